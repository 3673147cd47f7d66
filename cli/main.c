/* SPDX-License-Identifier: MIT */
/* main.c - the `rpal` command: one subcommand per file. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "snap.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: rpal <command> [options]\n"
"\n"
"commands:\n"
"  bench     measure cross-process messaging: rpal against Unix socket + epoll,\n"
"            pipe, eventfd, futex and a shared-memory spin floor\n"
"            (rpal bench --help lists every option)\n"
"  run       hosted mode: run several programs in this one process, their\n"
"            rpal connections upgraded to RPAL calls (rpal run --help)\n"
"  host      start an empty host that programs join (rpal host --help)\n"
"  join      run a program inside a host, as its own process (rpal join --help)\n"
"  ps        list a host's programs and their RPAL calls (rpal ps --help)\n"
"  doctor    what this machine offers rpal, and whether connected mode works\n"
"  stat      the connection counters of every rpal process (rpal stat --help)\n"
"  top       the same, live: message rates and wake-ups each second\n"
"  version   print the version\n"
"  help      this text\n");
}

/*
 * Output that did not all reach stdout (a full disk; a closed pipe where
 * SIGPIPE is ignored) fails the command: `rpal stat --prometheus > f.$$ &&
 * mv f.$$ f` must not install a cut file.  cmd: the command, for the message.
 */
static int finish(const char *cmd, int ret)
{
	/* A write that failed while the command printed set errno, and stdio
	 * drops the buffer it could not write: fclose() may then have nothing
	 * left to fail on.  errno still holds the reason unless a later call
	 * set another, so it counts where it names a write's failure. */
	int last = errno, bad = ferror(stdout);
	/* Some file systems (NFS, FUSE) report a failed write only at the close. */
	int err = fclose(stdout) ? errno : 0;

	if (!err && !bad)
		return ret;
	if (!err && (last == ENOSPC || last == EPIPE || last == EIO || last == EFBIG || last == EDQUOT))
		err = last;
	fprintf(stderr, "rpal%s%s: cannot write the output: %s\n", cmd ? " " : "", cmd ? cmd : "",
		err ? strerror(err) : "write error");
	return ret ? ret : 1;
}

static int run(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "bench"))
		return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "host"))
		return cmd_host(argc - 1, argv + 1);
	if (!strcmp(argv[1], "join"))
		return cmd_join(argc - 1, argv + 1);
	if (!strcmp(argv[1], "ps"))
		return cmd_ps(argc - 1, argv + 1);
	if (!strcmp(argv[1], "doctor"))
		return cmd_doctor(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "top"))
		return cmd_top(argc - 1, argv + 1);
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("rpal 0.1\n");
		return 0;
	}
	if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "rpal: unknown command \"%s\"\n\n", argv[1]);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;   /* a command may rewrite its argv */
	int ret = run(argc, argv);

	return finish(cmd, ret);
}
