/* SPDX-License-Identifier: MIT */
/*
 * tr_hosted.c - "rpal-hosted": server and client as two programs of one
 * `rpal run` (hosted mode: two processes in one address space), each with
 * its own copy of librpal.  The
 * server waits in rpal_epoll_wait() and reads with rpal_recv(); the client
 * sends with rpal_send(), which switches into the parked server in user
 * mode (an RPAL call), and reads the echo with rpal_recv().  The programs
 * (rpal-bench-hosted, bench_hosted.c) run the rpal-connected transport
 * through run.c's loops: same messages, same stamps.
 *
 * As in tr_go.c, the forked, pinned server child only relays: it execs
 * `rpal run` on both programs with a results file (a memfd) as fd 3, passes
 * the client's progress on 4 times a second, and copies the samples into
 * the run's shared area.  The client child has nothing to do and ends at
 * once.  Each program pins its own thread: the server's main thread to the
 * server's CPU, the client's to the client's.  With RPAL calls the server's
 * code runs on the client's thread, so on the client's CPU.
 *
 * CPU time: each program is its own process, so each marks its own
 * (getrusage(RUSAGE_SELF)); the server's code that calls run on the
 * client's thread counts as the client's.
 *
 * The program is looked for in $RPAL_BENCH_HOSTED, else next to the rpal
 * binary; CMake builds it unless the build is sanitized.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "hosted.h"
#include "hosted_bench.h"

struct hrun {
	char service[64];
};

/* path of the rpal binary (which runs `rpal run`), or of the program */
static const char *self_path(const char *name)
{
	static char path[2][PATH_MAX];
	char *p = path[name != NULL], *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", p, PATH_MAX - sizeof("/rpal-bench-hosted"));
	if (n <= 0)
		return NULL;
	p[n] = 0;
	if (!name)
		return p;
	slash = strrchr(p, '/');
	if (!slash)
		return NULL;
	strcpy(slash + 1, name);
	return p;
}

static const char *prog_path(void)
{
	const char *env = getenv("RPAL_BENCH_HOSTED");

	return env && env[0] ? env : self_path("rpal-bench-hosted");
}

static const char *hosted_unavailable(void)
{
	static char why[PATH_MAX + 128];
	const char *p;

#ifdef RPAL_BENCH_SANITIZED
	return "sanitized build (" RPAL_BENCH_SANITIZED "): a sanitizer runtime cannot live in a "
	       "second linker namespace";
#endif
	if (!hosted_have_fsgsbase())
		return "no FSGSBASE: the CPU or kernel does not let user mode write the fs base "
		       "(wrfsbase), which the RPAL call's switch needs";
	p = prog_path();
	if (!p)
		return "cannot find the rpal binary's directory (/proc/self/exe)";
	if (access(p, X_OK) == 0)
		return NULL;
	snprintf(why, sizeof(why), "%s: %s (built next to rpal; or set RPAL_BENCH_HOSTED)", p,
		 strerror(errno));
	return why;
}

static int hr_setup(struct bt_ctx *c)
{
	static unsigned seq;
	struct hrun *h = calloc(1, sizeof(*h));

	if (!h)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = h;
	/* Abstract namespace: nothing left on disk if a run is killed. */
	snprintf(h->service, sizeof(h->service), "@rpal-bench-hosted-%d-%u", (int)getpid(), seq++);
	return 0;
}

/* Start `rpal run` on both programs with the results file as fd 3. */
static pid_t hr_start(struct bt_ctx *c, int fd)
{
	const char *rpal = self_path(NULL), *prog = prog_path();
	char *argv[] = { "rpal", "run", "-q", (char *)prog, "server", "3", ":::", (char *)prog,
			 "client", "3", NULL };
	pid_t me = getpid(), pid;

	if (!rpal || !prog) {
		bt_fail(c, ENOENT, "server: cannot find the rpal binary (/proc/self/exe)");
		return -1;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		bt_fail(c, errno, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid)
		return pid;
	/* Die with the relay (the bench kills it on a failure or timeout). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != me)
		_exit(127);
	if (fd != HB_FD && dup2(fd, HB_FD) < 0)
		_exit(127);
	if (fd == HB_FD)
		fcntl(fd, F_SETFD, 0);
	execv(rpal, argv);
	fprintf(stderr, "rpal bench: cannot run %s: %s\n", rpal, strerror(errno));
	_exit(127);
}

/* The extra latency metrics: sorted here, filed as results by run.c. */
static void hr_extra(struct run_shared *sh, int metric, uint64_t *v, uint64_t n)
{
	sh->extra[sh->nextra].metric = metric;
	stats_compute(v, n, &sh->extra[sh->nextra].st);
	sh->nextra++;
}

/* Copy what the programs measured into the run's shared area. */
static void hr_collect(struct bt_ctx *c, struct hb_file *f)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh, *hs = &f->sh;
	unsigned batch = s->suite == SU_THROUGHPUT ? s->batch : 1;

	sh->skew = hs->skew;
	sh->bad = hs->bad;
	memcpy(sh->cpu, hs->cpu, sizeof(sh->cpu));
	sh->rpc_done = hs->rpc_done;
	sh->rpc_unsent = hs->rpc_unsent;
	sh->elapsed_tsc = hs->elapsed_tsc;
	sh->has_counts = hs->has_counts;
	memcpy(sh->wakeups, hs->wakeups, sizeof(sh->wakeups));
	memcpy(sh->sleeps, hs->sleeps, sizeof(sh->sleeps));
	memcpy(sh->oneway, hb_samples(f, HB_ONEWAY), f->count * sizeof(uint64_t));
	memcpy(sh->rtt, hb_samples(f, HB_RTT), f->count / batch * sizeof(uint64_t));
	if (f->narrays > HB_SWITCH) {
		hr_extra(sh, M_CALL_RTT, hb_samples(f, HB_CALL), f->count);
		hr_extra(sh, M_SWITCH_PAIR, hb_samples(f, HB_SWITCH), f->count);
	}
	atomic_store_explicit(&sh->progress, f->warmup + f->count, memory_order_relaxed);
	atomic_store_explicit(&sh->client_done, 1, memory_order_release);
}

/* Run both programs, then end this child: 0 when both succeeded. */
static int hr_run(struct bt_ctx *c)
{
	const struct run_spec *s = c->spec;
	struct hrun *h = c->priv;
	unsigned batch = s->suite == SU_THROUGHPUT ? s->batch : 1;
	unsigned narrays = s->suite == SU_LATENCY ? HB_NR : 2;
	struct hb_file *f;
	uint64_t count, warmup;
	int fd, pidfd, status;
	size_t len;
	pid_t pid;

	/* What run.c's measured() and warm() give: throughput rounds to batches. */
	count = (s->count + batch - 1) / batch * batch;
	warmup = ((uint64_t)s->warmup + batch - 1) / batch * batch;
	len = HB_HEAD + narrays * count * sizeof(uint64_t);
	fd = memfd_create("rpal-bench-hosted", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len))
		return bt_fail(c, errno, "server: results file: %s", strerror(errno));
	f = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (f == MAP_FAILED)
		return bt_fail(c, errno, "server: results file: %s", strerror(errno));
	f->magic = HB_MAGIC;
	f->version = HB_VERSION;
	f->spec_size = sizeof(struct run_spec);
	f->shared_size = sizeof(struct run_shared);
	f->narrays = narrays;
	f->count = count;
	f->warmup = warmup;
	f->spec = *s;
	f->sh.tsc_hz = c->sh->tsc_hz;
	atomic_store(&f->sh.rpc_total, UINT64_MAX);	/* as run.c sets it: no end marker yet */
	snprintf(f->service, sizeof(f->service), "%s", h->service);
	pid = hr_start(c, fd);
	close(fd);
	if (pid < 0)
		return -EIO;
	/* The client child only ends: it may start at once. */
	atomic_store_explicit(&c->sh->server_ready, 1, memory_order_release);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	for (;;) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return bt_fail(c, errno, "server: waitpid: %s", strerror(errno));
		/* Without a pidfd, poll() just sleeps the 250 ms. */
		poll(&p, pidfd >= 0, 250);
		atomic_store_explicit(&c->sh->progress,
				      atomic_load_explicit(&f->sh.progress, memory_order_relaxed),
				      memory_order_relaxed);
	}
	if (pidfd >= 0)
		close(pidfd);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !f->sh.err[0][0] && !f->sh.err[1][0]) {
		hr_collect(c, f);
		return 0;
	}
	if (f->sh.err[0][0] || f->sh.err[1][0])
		return bt_fail(c, EIO, "%.*s%s%.*s", 120, f->sh.err[0],
			       f->sh.err[0][0] && f->sh.err[1][0] ? "; " : "", 120, f->sh.err[1]);
	if (WIFSIGNALED(status))
		return bt_fail(c, EIO, "rpal run killed by signal %d (%s)", WTERMSIG(status),
			       strsignal(WTERMSIG(status)));
	return bt_fail(c, EIO, "rpal run exited with status %d (see its stderr)", WEXITSTATUS(status));
}

static int hr_open(struct bt_ctx *c)
{
	/*
	 * run.c would go on to its own loops: the hosted programs ran them,
	 * so this child ends here, as run.c's spawn() ends it.
	 */
	if (c->role == ROLE_CLIENT)
		_exit(0);
	_exit(hr_run(c) < 0 ? 1 : 0);
}

static void hr_teardown(struct bt_ctx *c)
{
	free(c->priv);
}

const struct transport tr_rpal_hosted = {
	.name = "rpal-hosted",
	.what = "librpal hosted mode: two programs in one `rpal run` process; rpal_send switches "
		"into the server parked in rpal_epoll_wait (an RPAL call)",
	.unavailable = hosted_unavailable,
	.flags = TF_ZEROCOPY,
	.setup = hr_setup,
	.open = hr_open,
	.teardown = hr_teardown,
};
