/* SPDX-License-Identifier: MIT */
/*
 * doctor.c - `rpal doctor`: what this machine offers rpal, and what follows.
 *
 * Connected mode is tried for real rather than inferred: rpal_init() (the
 * region, a slot, the sealed arena, the runtime directory), a listener, a
 * connection to it and one message each way.  The kernel and CPU features
 * that only some parts of rpal need are probed one by one, each line
 * naming what it enables.  Exit status 0 when connected mode works here,
 * 1 when it does not.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <fcntl.h>
#include <unistd.h>
#include <rpal.h>

#include "../src/rundir.h"
#include "bench.h"
#if RPAL_CLI_HOSTED
#include "hosted.h"
#endif
#include "stats.h"
#include "tsc.h"

#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif
#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#endif
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* ok: 1 ok, 0 no, -1 a measurement (neither). */
static void line(int ok, const char *what, const char *detail, const char *enables)
{
	printf("%-4s %-28s %s\n", ok < 0 ? "--" : ok ? "ok" : "no", what, detail);
	printf("     %-28s %s\n", "", enables);
}

/* ------------------------------------------------------ wake-up cost */

#define WAKE_TRIES 41

struct wake_probe {
	_Atomic uint32_t word;        /* the sleeper waits while it is even */
	_Atomic int asleep;           /* the sleeper is about to wait */
	int cpu;
	uint64_t woke_ns[WAKE_TRIES];
};

static void *wake_sleeper(void *arg)
{
	struct wake_probe *p = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	for (int i = 0; i < WAKE_TRIES; i++) {
		uint32_t w = (uint32_t)(2 * i);

		atomic_store(&p->asleep, 1);
		while (atomic_load(&p->word) == w)
			syscall(SYS_futex, &p->word, FUTEX_WAIT, w, NULL, NULL, 0);
		p->woke_ns[i] = mono_ns();
		atomic_store(&p->word, w + 2);
	}
	return NULL;
}

/*
 * What a wake-up of a thread whose CPU went idle costs: the waker's
 * FUTEX_WAKE, and the time until the sleeper runs (medians of 41, each
 * after 2 ms of idleness).  -1 where the process may use one CPU only.
 */
static int wake_cost(uint64_t *call_ns, uint64_t *latency_ns)
{
	static struct wake_probe p;
	uint64_t call[WAKE_TRIES], lat[WAKE_TRIES];
	cpu_set_t set, mine;
	pthread_t t;
	int other = -1, me = sched_getcpu();

	if (sched_getaffinity(0, sizeof(set), &set) || me < 0)
		return -1;
	for (int c = 0; c < CPU_SETSIZE && other < 0; c++)
		if (c != me && CPU_ISSET(c, &set))
			other = c;
	if (other < 0)
		return -1;
	CPU_ZERO(&mine);
	CPU_SET(me, &mine);
	pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
	memset(&p, 0, sizeof(p));
	p.cpu = other;
	if (pthread_create(&t, NULL, wake_sleeper, &p)) {
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		return -1;
	}
	for (int i = 0; i < WAKE_TRIES; i++) {
		uint64_t t0, t1;

		while (!atomic_load(&p.asleep))
			usleep(100);
		atomic_store(&p.asleep, 0);
		usleep(2000);           /* its CPU goes idle */
		t0 = mono_ns();
		atomic_store(&p.word, (uint32_t)(2 * i + 1));
		syscall(SYS_futex, &p.word, FUTEX_WAKE, 1, NULL, NULL, 0);
		t1 = mono_ns();
		while (atomic_load(&p.word) != (uint32_t)(2 * i + 2))
			usleep(50);
		call[i] = t1 - t0;
		lat[i] = p.woke_ns[i] - t0;
	}
	pthread_join(t, NULL);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	stats_sort(call, WAKE_TRIES);
	stats_sort(lat, WAKE_TRIES);
	*call_ns = call[WAKE_TRIES / 2];
	*latency_ns = lat[WAKE_TRIES / 2];
	return 0;
}

/* A KVM guest's halt polling, where its cpuidle driver offers it: ""
 * where it does not, else what it is set to. */
static void halt_polling(char *buf, size_t len)
{
	char drv[32] = "";
	long ns = -1;
	FILE *f = fopen("/sys/devices/system/cpu/cpuidle/current_driver", "r");

	buf[0] = '\0';
	if (f) {
		if (!fgets(drv, sizeof(drv), f))
			drv[0] = '\0';
		fclose(f);
	}
	if (strncmp(drv, "haltpoll", 8))
		return;
	f = fopen("/sys/module/haltpoll/parameters/guest_halt_poll_ns", "r");
	if (f) {
		if (fscanf(f, "%ld", &ns) != 1)
			ns = -1;
		fclose(f);
	}
	if (ns == 0)
		snprintf(buf, len, "; halt polling off (haltpoll.guest_halt_poll_ns=0)");
	else if (ns > 0)
		snprintf(buf, len, "; halt polling up to %ld us", ns / 1000);
}

/* The listener's side of the trial: one connection, its message echoed. */
struct acceptor {
	int lfd;
	/* 0 while the connect runs; then when to stop waiting for a client. */
	_Atomic uint64_t give_up_ns;
	char buf[16];
};

/*
 * Never a blocking rpal_accept(): a connect that fails before it reaches
 * the listener (out of descriptors, say) leaves it nothing to wake it.
 * Instead, a pass of RPAL_NONBLOCK whenever lfd turns readable (or every
 * 10 ms), until the connect has returned: then at once where it failed,
 * and a second later at most where it succeeded (the pass that sent its
 * WELCOME returns the connection).  The connect is bounded by
 * handshake_ms, so this wait is too.
 */
static void *accept_one(void *arg)
{
	struct acceptor *a = arg;
	struct pollfd pfd = { .fd = a->lfd, .events = POLLIN };
	long n;
	int fd;

	for (;;) {
		uint64_t give_up = atomic_load(&a->give_up_ns);

		fd = rpal_accept(a->lfd, RPAL_NONBLOCK);
		if (fd != -EAGAIN || (give_up && mono_ns() >= give_up))
			break;
		poll(&pfd, 1, 10);
	}
	n = fd < 0 ? fd : rpal_recv(fd, a->buf, sizeof(a->buf), 0);
	if (n > 0)
		n = rpal_send(fd, a->buf, (size_t)n, 0);
	if (fd >= 0)
		rpal_close(fd);
	return (void *)n;
}

/* rpal_init, listen, connect, one message each way; 0 or -errno, with why. */
static int connected_mode(char *why, size_t len, char *dir, size_t dlen)
{
	struct acceptor acc;
	char name[64], buf[16];
	struct rpal_stats st;
	pthread_t t;
	void *echoed;
	int fd, ret;
	long n;

	ret = rpal_init(NULL);
	if (ret < 0) {
		snprintf(why, len, "rpal_init: %s", rpal_strerror(ret));
		return ret;
	}
	if (!rpal_stats(&st))
		snprintf(dir, dlen, "%s", st.runtime_dir);
	snprintf(name, sizeof(name), "doctor-%d", (int)getpid());
	acc.lfd = rpal_listen(name, NULL);
	if (acc.lfd < 0) {
		snprintf(why, len, "rpal_listen: %s", rpal_strerror(acc.lfd));
		rpal_fini();
		return acc.lfd;
	}
	atomic_init(&acc.give_up_ns, 0);
	ret = pthread_create(&t, NULL, accept_one, &acc);
	if (ret) {
		snprintf(why, len, "pthread_create (the listener's thread): %s", strerror(ret));
		rpal_close(acc.lfd);
		rpal_fini();
		return -ret;
	}
	fd = rpal_connect(name, NULL, 0);
	atomic_store(&acc.give_up_ns, mono_ns() + (fd < 0 ? 0 : 1000000000));
	n = fd < 0 ? fd : rpal_send(fd, "doctor", 6, 0);
	if (n > 0)
		n = rpal_recv(fd, buf, sizeof(buf), 0);
	if (fd < 0)
		snprintf(why, len, "rpal_connect: %s", rpal_strerror(fd));
	else if (n != 6 || memcmp(buf, "doctor", 6))
		snprintf(why, len, "a message and its echo: %s", n < 0 ? rpal_strerror((int)n) : "wrong bytes");
	if (fd >= 0)
		rpal_close(fd);
	pthread_join(t, &echoed);
	rpal_close(acc.lfd);
	rpal_fini();
	if (fd < 0)
		return fd;
	if (n != 6 || memcmp(buf, "doctor", 6) || (long)echoed != 6)
		return n < 0 ? (int)n : -EIO;
	snprintf(why, len, "init, listen, connect, a message each way");
	return 0;
}

static int cmd_doctor_usage(FILE *f)
{
	fprintf(f, "usage: rpal doctor\n\n"
		"Says what this machine offers rpal: tries connected mode end to end, then\n"
		"probes the kernel and CPU features that parts of rpal need, each line naming\n"
		"what it enables.  Exit status 0 when connected mode works here, 1 if not.\n");
	return f == stdout ? 0 : 2;
}

int cmd_doctor(int argc, char **argv)
{
	char why[512], dir[108] = "", detail[256];
	struct utsname u;
	int ok, connected;
	long r;

	if (argc > 1) {
		bool help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));

		if (!help)
			fprintf(stderr, "rpal doctor: takes no arguments (%s)\n\n", argv[1]);
		return cmd_doctor_usage(help ? stdout : stderr);
	}
	uname(&u);
	printf("rpal doctor: Linux %s on %s, glibc %s\n\n", u.release, u.machine, gnu_get_libc_version());

	connected = connected_mode(why, sizeof(why), dir, sizeof(dir)) == 0;
	line(connected, "connected mode", why,
	     "everything: processes connect, map each other's arena, exchange messages");
	/* Also where rpal_init failed: the directory is often why. */
	if (dir[0] || !rpal_runtime_dir(NULL, dir, sizeof(dir))) {
		struct stat sb;
		char what[128];

		ok = 0;
		/* rpal_init()'s own check, then whether we may make our
		 * sockets there, which rpal_init() finds out only then. */
		switch (rpal_rundir_check(dir, &sb)) {
		case RPAL_RUNDIR_OK:
			if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) < 0) {
				snprintf(what, sizeof(what), "mode %04o: we cannot make our sockets in it",
					 (unsigned)(sb.st_mode & 07777));
				break;
			}
			/* Group or others may enter a directory shared by peers
			 * of several uids (rpal_listen(3)): a socket is 0600
			 * unless its listener's policy admits other uids, and
			 * both ends check the peer's credentials. */
			snprintf(what, sizeof(what), "%s, mode %04o%s", sb.st_uid == geteuid() ? "ours" : "root's",
				 (unsigned)(sb.st_mode & 07777),
				 sb.st_mode & 077 ? ": shared; sockets are 0600 unless a policy admits other uids" : "");
			ok = 1;
			break;
		case RPAL_RUNDIR_NO_STAT:
			snprintf(what, sizeof(what), "%s", strerror(errno));
			break;
		case RPAL_RUNDIR_SYMLINK:
			snprintf(what, sizeof(what), "a symbolic link, not a directory");
			break;
		case RPAL_RUNDIR_NOT_DIR:
			snprintf(what, sizeof(what), "not a directory");
			break;
		case RPAL_RUNDIR_NOT_OURS:
			snprintf(what, sizeof(what), "owned by uid %u, not us or root", (unsigned)sb.st_uid);
			break;
		case RPAL_RUNDIR_ANYONE_WRITES:
			snprintf(what, sizeof(what), "mode %04o: anyone may write it", (unsigned)(sb.st_mode & 07777));
			break;
		}
		snprintf(detail, sizeof(detail), "%s (%s)", dir, what);
		line(ok, "runtime directory", detail,
		     "rendezvous: processes (and containers) that connect must share it");
	}

	r = syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0);
	ok = !(r < 0 && errno == ENOSYS);
	line(ok, "futex_waitv (Linux 5.16)", ok ? "present" : "absent",
	     "a waiter sleeps on several futex words; without it, on the doorbell in poll()");

	r = syscall(SYS_pidfd_open, getpid(), 0);
	ok = r >= 0;
	if (ok)
		close((int)r);
	line(ok, "pidfd_open (Linux 5.3)", ok ? "present" : strerror(errno),
	     "a peer's death is noticed at once, and its pid cannot be reused under us");

	{
		int sv[2], no = 0;

		ok = !socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
		if (ok) {
			ok = !setsockopt(sv[0], SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no));
			close(sv[0]);
			close(sv[1]);
		}
		line(ok, "SO_PASSRIGHTS (Linux 6.16)", ok ? "present" : "absent",
		     "doorbells refuse descriptors a peer pushes into them; without it they are drained");
	}

#if RPAL_CLI_HOSTED
	ok = !!(getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE);
	line(ok, "FSGSBASE", ok ? "the kernel enables it" : "absent",
	     "hosted mode: the user-mode switch sets the callee's TLS without a system call");

	r = prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
	ok = r == 0;
	line(ok, "Syscall User Dispatch", ok ? "present (Linux 5.11)" : strerror(errno),
	     "hosted mode: system calls made inside a callee run in its own process (lazy switch)");

	ok = hosted_getfd_works();
	line(ok, "pidfd_getfd (Linux 5.6)", ok ? "a child's descriptor taken" : "refused (seccomp or LSM?)",
	     "hosted mode: a sender wakes a receiver of another program; without it, no RPAL calls");

	{
		Dl_info libc;
		uintptr_t lo, hi;

		ok = dladdr((void *)write, &libc) && libc.dli_fbase &&
		     hosted_find_sigreturn((uintptr_t)libc.dli_fbase, &lo, &hi);
		line(ok, "libc's signal return", ok ? "found in its code" : "not found",
		     "hosted mode: a program's signal handler run in an RPAL call makes its system calls "
		     "through libc as usual; without it the launcher runs them, and a handler that "
		     "blocks SIGSYS ends its program");
	}

	snprintf(detail, sizeof(detail), "glibc %s: %d namespaces (DL_NNS)", gnu_get_libc_version(), HOSTED_NNS);
	line(1, "linker namespaces", detail,
	     "hosted mode: 15 programs per host in its life (rpal run and rpal host raise glibc.rtld.nns)");
#else
	line(-1, "hosted mode", "not in this build (-DRPAL_HOSTED=OFF)",
	     "rpal run, rpal host and RPAL calls; x86-64 only");
#endif

	{
		uint64_t call_ns, latency_ns;
		char poll[96];

		halt_polling(poll, sizeof(poll));
		if (wake_cost(&call_ns, &latency_ns) == 0)
			snprintf(detail, sizeof(detail), "%.1f us in FUTEX_WAKE, %.1f us until the sleeper runs%s",
				 call_ns / 1e3, latency_ns / 1e3, poll);
		else
			snprintf(detail, sizeof(detail), "not measured: this process may use one CPU only%s", poll);
		line(-1, "wake-up of an idle CPU", detail,
		     "what a sleep costs: rpal's adaptive wait spins where that is dearer (rpal stat shows each process's)");
	}

	r = syscall(SYS_pkey_alloc, 0, 0);
	ok = r >= 0;
	if (ok)
		syscall(SYS_pkey_free, r);
	snprintf(detail, sizeof(detail), "pkey_alloc: %s", ok ? "a key" : strerror(errno));
	line(ok, "memory protection keys (PKU)", detail,
	     "protect_peers: peer arenas unreadable outside windows (RPAL_PROTECT_PEERS)");

	printf("\n%s\n", connected ? "rpal doctor: connected mode works here"
				   : "rpal doctor: connected mode does not work here (see above)");
	return connected ? 0 : 1;
}
