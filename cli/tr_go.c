/* SPDX-License-Identifier: MIT */
/*
 * tr_go.c - "rpal-go" and "go-uds": Go to Go, each side a Go program
 * (go/cmd/rpal-bench-go) in its own process; and, in the rpc suite only,
 * gRPC-go and Kitex over a Unix socket and over rpal.  rpal-go moves the messages
 * with the Go package's rpal.Conn (Send/Recv, or Alloc/WriteMsg and ReadMsg/Ack
 * for zero copy); go-uds with a Unix stream socket through Go's netpoller,
 * the baseline a Go user would otherwise have.
 *
 * The message loops run in Go, so these transports do not use run.c's
 * serve()/drive(): open() runs the whole role.  The forked, pinned child
 * starts rpal-bench-go (which inherits the pinning: every Go thread stays
 * on the child's CPU), relays the server's readiness and the client's
 * progress, waits for it, copies its samples and counters from a shared
 * results file (a memfd) into the run's shared area, and ends the child
 * with its verdict.  The samples are the same as the C transports': the
 * client's RDTSCP stamp in the message, the server's RDTSCP at receipt;
 * the bench's TSC calibration converts them.
 *
 * The program is looked for in $RPAL_BENCH_GO, else next to the rpal
 * binary (CMake builds build/rpal-bench-go when it finds Go).  Without it
 * both transports are listed as not available.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include "bench.h"
#include "rpal.h"

/*
 * The results file, written by rpal-bench-go (go/cmd/rpal-bench-go/main.go,
 * the off* constants: change both together and bump the version).  The
 * samples follow at GO_SAMPLES: the server's one-way times or the client's
 * round trips.
 */
struct go_results {
	uint32_t magic, version;
	uint64_t progress;		/* client: messages done */
	uint64_t skew, bad;
	uint64_t user_ns, sys_ns;	/* measured loop (cpu suite) */
	uint64_t elapsed_tsc;		/* client: measured loop */
	uint64_t wakeups, sleeps;	/* rpal: doorbell rings made, sleeps taken */
	uint32_t has_counts;
	uint32_t pad;
	uint64_t rpc_done;		/* rpc client: measured requests answered */
	uint64_t rpc_unsent;		/* rpc client: never sent by the deadline */
	char pad2[32];
	char err[256];			/* the first error, NUL-terminated */
};
#define GO_MAGIC 0x4f474252u		/* "RBGO" */
#define GO_VERSION 2u
#define GO_SAMPLES 4096
_Static_assert(offsetof(struct go_results, progress) == 8, "results layout");
_Static_assert(offsetof(struct go_results, has_counts) == 72, "results layout");
_Static_assert(offsetof(struct go_results, rpc_done) == 80, "results layout");
_Static_assert(offsetof(struct go_results, rpc_unsent) == 88, "results layout");
_Static_assert(offsetof(struct go_results, err) == 128, "results layout");
_Static_assert(sizeof(struct go_results) <= GO_SAMPLES, "results layout");

struct gorun {
	const char *net;		/* rpal-bench-go -net */
	char addr[64];
	pid_t pid;			/* the Go program, in the child */
};

/* Where rpal-bench-go is: $RPAL_BENCH_GO, else next to this binary. */
static const char *go_path(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("RPAL_BENCH_GO");
	ssize_t n;
	char *slash;

	if (env && env[0])
		return env;
	n = readlink("/proc/self/exe", path, sizeof(path) - sizeof("/rpal-bench-go"));
	if (n <= 0)
		return NULL;
	path[n] = 0;
	slash = strrchr(path, '/');
	if (!slash)
		return NULL;
	strcpy(slash, "/rpal-bench-go");
	return path;
}

static const char *go_unavailable(void)
{
	static char why[PATH_MAX + 128];
	const char *p = go_path();

	if (!p)
		return "cannot find the rpal binary's directory (/proc/self/exe)";
	if (access(p, X_OK) == 0)
		return NULL;
	snprintf(why, sizeof(why), "%s: %s (CMake builds it when it finds Go; or set RPAL_BENCH_GO)",
		 p, strerror(errno));
	return why;
}

static int go_setup(struct bt_ctx *c, const char *net)
{
	static unsigned seq;
	struct gorun *g = calloc(1, sizeof(*g));

	if (!g)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = g;
	g->net = net;
	/* Abstract namespace: nothing left on disk if a run is killed. */
	snprintf(g->addr, sizeof(g->addr), "@rpal-bench-go-%s-%d-%u", net, (int)getpid(), seq++);
	return 0;
}

static int rpal_go_setup(struct bt_ctx *c) { return go_setup(c, "rpal"); }
static int go_uds_setup(struct bt_ctx *c) { return go_setup(c, "unix"); }
static int grpc_rpal_setup(struct bt_ctx *c) { return go_setup(c, "grpc-rpal"); }
static int grpc_uds_setup(struct bt_ctx *c) { return go_setup(c, "grpc-unix"); }
static int kitex_rpal_setup(struct bt_ctx *c) { return go_setup(c, "kitex-rpal"); }
static int kitex_uds_setup(struct bt_ctx *c) { return go_setup(c, "kitex-unix"); }

/* What run.c's measured() and warm() give: throughput rounds to batches. */
static void go_counts(const struct run_spec *s, uint64_t *count, uint64_t *warmup, unsigned *batch)
{
	*batch = s->suite == SU_THROUGHPUT ? s->batch : 1;
	*count = (s->count + *batch - 1) / *batch * *batch;
	*warmup = ((uint64_t)s->warmup + *batch - 1) / *batch * *batch;
}

/* Start rpal-bench-go with the results file as fd 3 and the ready pipe as fd 4. */
static int go_start(struct bt_ctx *c, int res_fd, int ready_fd)
{
	const struct run_spec *s = c->spec;
	struct gorun *g = c->priv;
	const char *path = go_path();
	char a[12][32], *argv[40];
	uint64_t count, warmup;
	unsigned batch;
	pid_t me = getpid();
	int n = 0;

	go_counts(s, &count, &warmup, &batch);
	snprintf(a[0], sizeof(a[0]), "%zu", s->size);
	snprintf(a[1], sizeof(a[1]), "%llu", (unsigned long long)count);
	snprintf(a[2], sizeof(a[2]), "%llu", (unsigned long long)warmup);
	snprintf(a[3], sizeof(a[3]), "%u", batch);
	snprintf(a[4], sizeof(a[4]), "%lluns", (unsigned long long)(s->suite == SU_CPU ? 1e9 / s->rate : 0));
	/* The Go package's policies are librpal's, its spin ceiling 50 µs. */
	snprintf(a[5], sizeof(a[5]), "%u", s->wait == WAIT_SPIN ? s->spin_us : RPAL_DEFAULT_SPIN_US);
	argv[n++] = "rpal-bench-go";
	argv[n++] = "-role";
	argv[n++] = c->role == ROLE_SERVER ? "server" : "client";
	argv[n++] = "-net";
	argv[n++] = (char *)g->net;
	argv[n++] = "-addr";
	argv[n++] = g->addr;
	argv[n++] = "-size";
	argv[n++] = a[0];
	argv[n++] = "-count";
	argv[n++] = a[1];
	argv[n++] = "-warmup";
	argv[n++] = a[2];
	argv[n++] = "-batch";
	argv[n++] = a[3];
	argv[n++] = "-period";
	argv[n++] = a[4];
	argv[n++] = "-spin-us";
	argv[n++] = a[5];
	argv[n++] = "-wait";
	argv[n++] = (char *)(wait_name(s->wait) ? wait_name(s->wait) : "adaptive");
	if (s->suite == SU_CPU)
		argv[n++] = "-cpu";
	if (s->suite == SU_RPC) {
		snprintf(a[6], sizeof(a[6]), "%.6f", s->rate);
		snprintf(a[7], sizeof(a[7]), "%.6f", s->seconds);
		snprintf(a[8], sizeof(a[8]), "%u", s->concurrency);
		snprintf(a[9], sizeof(a[9]), "%lluns", (unsigned long long)s->work_ns);
		snprintf(a[10], sizeof(a[10]), "%.0f", c->sh->tsc_hz);
		argv[n++] = "-rpc";
		argv[n++] = "-rate";
		argv[n++] = a[6];
		argv[n++] = "-seconds";
		argv[n++] = a[7];
		argv[n++] = "-concurrency";
		argv[n++] = a[8];
		argv[n++] = "-work";
		argv[n++] = a[9];
		argv[n++] = "-tsc-hz";
		argv[n++] = a[10];
	}
	if (s->zerocopy)
		argv[n++] = "-zerocopy";
	argv[n] = NULL;

	fflush(NULL);
	g->pid = fork();
	if (g->pid < 0)
		return bt_fail(c, errno, "fork: %s", strerror(errno));
	if (g->pid)
		return 0;
	/* Die with the child (the bench kills it on a failure or timeout). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != me)
		_exit(127);
	/* Out of the way first: either may already be 3 or 4 (dup2 clears CLOEXEC). */
	res_fd = fcntl(res_fd, F_DUPFD_CLOEXEC, 10);
	ready_fd = fcntl(ready_fd, F_DUPFD_CLOEXEC, 10);
	if (res_fd < 0 || ready_fd < 0 || dup2(res_fd, 3) < 0 || dup2(ready_fd, 4) < 0)
		_exit(127);
	execv(path, argv);
	fprintf(stderr, "rpal bench: cannot run %s: %s\n", path, strerror(errno));
	_exit(127);
}

/* Copy what the Go program measured into the run's shared area. */
static void go_collect(struct bt_ctx *c, const struct go_results *r)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh;
	const uint64_t *samples = (const uint64_t *)((const char *)r + GO_SAMPLES);
	uint64_t count, warmup;
	unsigned batch;

	go_counts(s, &count, &warmup, &batch);
	sh->cpu[c->role].user_ns = r->user_ns;
	sh->cpu[c->role].sys_ns = r->sys_ns;
	if (r->has_counts) {
		sh->wakeups[c->role] = r->wakeups;
		sh->sleeps[c->role] = r->sleeps;
		sh->has_counts = 1;
	}
	if (s->suite == SU_RPC) {
		if (c->role == ROLE_CLIENT) {
			sh->rpc_done = r->rpc_done < count ? r->rpc_done : count;
			sh->rpc_unsent = r->rpc_unsent;
			memcpy(sh->rtt, samples, sh->rpc_done * sizeof(uint64_t));
			sh->elapsed_tsc = r->elapsed_tsc;
			atomic_store_explicit(&sh->progress, warmup + count, memory_order_relaxed);
			atomic_store_explicit(&sh->client_done, 1, memory_order_release);
		}
		sh->bad += r->bad;
		return;
	}
	if (c->role == ROLE_SERVER) {
		memcpy(sh->oneway, samples, count * sizeof(uint64_t));
		sh->skew = r->skew;
		sh->bad += r->bad;
		return;
	}
	memcpy(sh->rtt, samples, count / batch * sizeof(uint64_t));
	sh->bad += r->bad;
	sh->elapsed_tsc = r->elapsed_tsc;
	atomic_store_explicit(&sh->progress, warmup + count, memory_order_relaxed);
	atomic_store_explicit(&sh->client_done, 1, memory_order_release);
}

/* Run the role in Go, then end this child: 0 when the Go side succeeded. */
static int go_run(struct bt_ctx *c)
{
	struct gorun *g = c->priv;
	const char *who = c->role == ROLE_SERVER ? "server" : "client";
	uint64_t count, warmup;
	unsigned batch;
	size_t len;
	struct go_results *r;
	int fd, pfd[2], status, ret;

	go_counts(c->spec, &count, &warmup, &batch);
	len = GO_SAMPLES + count * sizeof(uint64_t);
	fd = memfd_create("rpal-bench-go", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len))
		return bt_fail(c, errno, "%s: results file: %s", who, strerror(errno));
	r = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r == MAP_FAILED)
		return bt_fail(c, errno, "%s: results file: %s", who, strerror(errno));
	r->magic = GO_MAGIC;
	r->version = GO_VERSION;
	if (pipe2(pfd, O_CLOEXEC))
		return bt_fail(c, errno, "%s: pipe: %s", who, strerror(errno));
	ret = go_start(c, fd, pfd[1]);
	close(pfd[1]);
	close(fd);
	if (ret < 0)
		return ret;
	/*
	 * Block until the program ends (its end of the pipe closes), waking
	 * 4 times a second to pass the client's progress on.  The server's one
	 * byte says it listens: only then may the parent start the client.
	 */
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		char b;
		ssize_t n;

		if (poll(&p, 1, 250) == 0) {
			atomic_store_explicit(&c->sh->progress,
					      __atomic_load_n(&r->progress, __ATOMIC_RELAXED),
					      memory_order_relaxed);
			continue;
		}
		n = read(pfd[0], &b, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (c->role == ROLE_SERVER)
			atomic_store_explicit(&c->sh->server_ready, 1, memory_order_release);
	}
	close(pfd[0]);
	while (waitpid(g->pid, &status, 0) < 0)
		if (errno != EINTR)
			return bt_fail(c, errno, "%s: waitpid: %s", who, strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		go_collect(c, r);
		return 0;
	}
	if (r->err[0])
		return bt_fail(c, EIO, "%s: %.*s", who, (int)sizeof(r->err) - 1, r->err);
	if (WIFSIGNALED(status))
		return bt_fail(c, EIO, "%s: rpal-bench-go killed by signal %d (%s)", who,
			       WTERMSIG(status), strsignal(WTERMSIG(status)));
	return bt_fail(c, EIO, "%s: rpal-bench-go exited with status %d (see its stderr)", who,
		       WEXITSTATUS(status));
}

static int go_open(struct bt_ctx *c)
{
	/*
	 * run.c would go on to its own loops: the Go program ran them, so this
	 * child ends here, as run.c's spawn() ends it (exit status 0 or 1).
	 */
	_exit(go_run(c) < 0 ? 1 : 0);
}

static void go_teardown(struct bt_ctx *c)
{
	free(c->priv);
}

const struct transport tr_rpal_go = {
	.name = "rpal-go",
	.what = "Go to Go: rpal.Conn Send/Recv (go/cmd/rpal-bench-go); spin, then park in the netpoller",
	.unavailable = go_unavailable,
	.flags = TF_WAIT | TF_ZEROCOPY,
	.baseline = "go-uds",
	.setup = rpal_go_setup,
	.open = go_open,
	.teardown = go_teardown,
};

const struct transport tr_go_uds = {
	.name = "go-uds",
	.what = "Go to Go: Unix stream socket through Go's netpoller (rpal-go's baseline)",
	.unavailable = go_unavailable,
	.setup = go_uds_setup,
	.open = go_open,
	.teardown = go_teardown,
};

const struct transport tr_grpc_uds = {
	.name = "grpc-uds",
	.what = "gRPC-go unary calls over a Unix stream socket (rpc suite only)",
	.unavailable = go_unavailable,
	.flags = TF_RPC_ONLY,
	.setup = grpc_uds_setup,
	.open = go_open,
	.teardown = go_teardown,
};

const struct transport tr_grpc_rpal = {
	.name = "grpc-rpal",
	.what = "gRPC-go unary calls over rpal: rpal.Listen and rpal.Dialer, nothing else changed (rpc suite only)",
	.unavailable = go_unavailable,
	.flags = TF_WAIT | TF_RPC_ONLY,
	.baseline = "grpc-uds",
	.setup = grpc_rpal_setup,
	.open = go_open,
	.teardown = go_teardown,
};

const struct transport tr_kitex_uds = {
	.name = "kitex-uds",
	.what = "Kitex unary calls (gonet transport, Thrift binary generic) over a Unix stream socket (rpc suite only)",
	.unavailable = go_unavailable,
	.flags = TF_RPC_ONLY,
	.setup = kitex_uds_setup,
	.open = go_open,
	.teardown = go_teardown,
};

const struct transport tr_kitex_rpal = {
	.name = "kitex-rpal",
	.what = "Kitex unary calls over rpal: WithListener(rpal.Listen), WithDialer(rpal.Dialer) (rpc suite only)",
	.unavailable = go_unavailable,
	.flags = TF_WAIT | TF_RPC_ONLY,
	.baseline = "kitex-uds",
	.setup = kitex_rpal_setup,
	.open = go_open,
	.teardown = go_teardown,
};
