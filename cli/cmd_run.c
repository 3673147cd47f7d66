/* SPDX-License-Identifier: MIT */
/*
 * cmd_run.c - `rpal run`: hosted mode.  Starts several independently built
 * programs in this one address space (hosted/launch.c), each in its own
 * linker namespace and its own process, with a host block (hosted/host.c) through which their copies
 * of librpal upgrade local connections to the RPAL call.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rpal.h>

#include "hosted.h"
#include "rpal_host.h"
#include "bench.h"

static void run_usage(FILE *f)
{
	fprintf(f,
"usage: rpal run [-q] [--stat] PROGRAM [ARGS...] [::: PROGRAM [ARGS...]]...\n"
"\n"
"Runs every PROGRAM in this one address space, each in its own linker\n"
"namespace (own globals, libc, heap, TLS) and its own process (own PID,\n"
"descriptors, signal handlers); at most %d programs.  SIGTERM, SIGINT,\n"
"SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to rpal run with kill are passed\n"
"on to every program; the programs share its process group, so one sent to\n"
"the whole group (kill -PGID, kill %%1) can reach each of them twice.\n"
"A PROGRAM is an ordinary PIE executable linked with -rdynamic (pkg-config\n"
"--variable=hosted_ldflags rpal), looked up in PATH when its name has no\n"
"slash, as a shell would.  rpal connections between the programs\n"
"deliver messages by RPAL calls: a user-mode switch into a receiver parked\n"
"in rpal_epoll_wait().\n"
"\n"
"  -q       do not print each program's exit status (one killed by a signal\n"
"           is still reported)\n"
"  --stat   at the end, print per program the RPAL calls into it and the\n"
"           TSC cycles its code ran on other programs' threads\n"
"\n"
"Exit status: 0 if every program exited 0, 1 otherwise, 2 on a usage or\n"
"load error.\n", HOSTED_NNS - 1);
}

static void print_stat(const struct rpal_host *h)
{
	fprintf(stderr, "rpal run: %-4s %-32s %12s %16s %10s %s\n", "prog", "path", "calls in",
		"cycles in calls", "handoffs", "failed");
	for (unsigned i = 0; i < h->nprogs; i++) {
		const struct rpal_host_prog *p = &h->progs[i];
		uint64_t calls, tsc;

		rpal_host_prog_calls(p, &calls, &tsc);
		fprintf(stderr, "rpal run: [%-2u] %-32s %12llu %16llu %10llu %d\n", i, p->name,
			(unsigned long long)calls, (unsigned long long)tsc,
			(unsigned long long)atomic_load(&p->handoffs), (int)atomic_load(&p->failed));
	}
}

int cmd_run(int argc, char **argv)
{
	struct rpal_config cfg;
	struct rpal_host *h;
	int quiet = 0, stat = 0, i = 1, ret;
	char err[512], dir[PATH_MAX];

	hosted_reexec_with_tunables(argc, argv - 1);
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-q"))
			quiet = 1;
		else if (!strcmp(argv[i], "--stat"))
			stat = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			run_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "rpal run: unknown option %s\n\n", argv[i]);
			run_usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		run_usage(stderr);
		return 2;
	}
	rpal_config_default(&cfg);
	h = hosted_host_create(cfg.region_base, cfg.slot_size, cfg.nr_slots, err, sizeof(err));
	if (!h) {
		fprintf(stderr, "rpal run: %s\n", err);
		return 2;
	}
	hosted_linker_watch(h, "rpal run: ");
	rpal_runtime_dir(&cfg, dir, sizeof(dir));
	ret = hosted_launch("rpal run", argc - i, argv + i, h, dir, quiet);
	if (stat)
		print_stat(h);
	/* Every program has run its exit handlers; end without running the
	 * namespaces' destructors a second time (exit would, via _dl_fini). */
	fflush(NULL);
	if (ret < 0) {
		/* A shell stops a loop only for a job that the signal ended. */
		sigset_t one;

		signal(-ret, SIG_DFL);
		sigemptyset(&one);
		sigaddset(&one, -ret);
		sigprocmask(SIG_UNBLOCK, &one, NULL);
		raise(-ret);
		_exit(1);
	}
	_exit(ret);
}
