/* SPDX-License-Identifier: MIT */
/*
 * helpers.h - shared by the tests: exit codes, checks that say what failed,
 * and child-process plumbing.  Each test is a standalone program.
 */
#ifndef RPAL_TEST_HELPERS_H
#define RPAL_TEST_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rpal.h"

/* Line-buffered output, so forked children do not print the parent's buffer again. */
__attribute__((constructor)) static void t_line_buffered(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

#define T_EXIT_PASS 0
#define T_EXIT_FAIL 1
#define T_EXIT_SKIP 77

#define t_fail(...) do { \
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); \
	fprintf(stderr, "\n"); \
	exit(T_EXIT_FAIL); \
} while (0)

#define t_check(cond, ...) do { if (!(cond)) t_fail(__VA_ARGS__); } while (0)

/* An rpal call that must succeed: prints the rpal_strerror sentence. */
#define t_ok(expr) ({ \
	long _r = (long)(expr); \
	if (_r < 0) t_fail("%s = %ld: %s", #expr, _r, rpal_strerror((int)_r)); \
	_r; })

static inline void t_skip(const char *why)
{
	printf("SKIP: %s\n", why);
	exit(T_EXIT_SKIP);
}

/*
 * A cross build's tests run under a user-mode emulator (qemu-user), whose
 * command line CMake passes in RPAL_TEST_EMULATOR.  It cannot do all that a
 * kernel does for a native process; a check that needs what it lacks says
 * so and is skipped, and the rest of the test runs.
 */
static inline const char *t_emulator(void)
{
	const char *e = getenv("RPAL_TEST_EMULATOR");

	return e && *e ? e : NULL;
}

/* True, after a "skip:" line naming what and why, under an emulator. */
static inline bool t_skip_emulated(const char *what, const char *why)
{
	if (!t_emulator())
		return false;
	printf("skip: %s: under %s, %s\n", what, t_emulator(), why);
	return true;
}

/* execv() of one of our binaries, through the emulator where there is
 * one (it runs only binaries of its host otherwise).  /proc/self/exe
 * names the test itself.  Returns only on failure. */
static inline int t_execv(const char *path, char *const argv[])
{
	char self[4096], line[4096], *args[64], *save = NULL;
	int n = 0;

	if (!t_emulator())
		return execv(path, argv);
	if (!strcmp(path, "/proc/self/exe")) {
		ssize_t len = readlink(path, self, sizeof(self) - 1);

		if (len < 0)
			return -1;
		self[len] = 0;
		path = self;
	}
	snprintf(line, sizeof(line), "%s", t_emulator());
	for (char *w = strtok_r(line, " ", &save); w && n < 48; w = strtok_r(NULL, " ", &save))
		args[n++] = w;
	args[n++] = (char *)path;
	for (int i = 1; argv[i] && n < 63; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	return execv(args[0], args);
}

/* Multiply iteration counts: RPAL_TEST_SCALE=10 divides them by 10 (sanitizers). */
static inline long t_scaled(long n)
{
	const char *s = getenv("RPAL_TEST_SCALE");
	long d = s ? atol(s) : 1;

	return d > 1 ? (n / d > 0 ? n / d : 1) : n;
}

static inline uint64_t t_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void *t_accept_one(void *listener)
{
	return (void *)(intptr_t)t_ok(rpal_accept(*(int *)listener, 0));
}

/* This process connected to itself through a new service: *conn is the
 * connecting end, *accepted the other; returns the listener. */
static inline int t_self_pair(const char *service, int *conn, int *accepted)
{
	int lfd = (int)t_ok(rpal_listen(service, NULL));
	pthread_t th;
	void *r;

	t_check(pthread_create(&th, NULL, t_accept_one, &lfd) == 0, "pthread_create");
	*conn = (int)t_ok(rpal_connect(service, NULL, 0));
	pthread_join(th, &r);
	*accepted = (int)(intptr_t)r;
	return lfd;
}

/* Wait for a child; fail unless it exited with status 0. */
static inline void t_wait_ok(pid_t pid, const char *what)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		t_fail("waitpid(%s): %s", what, strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		t_fail("%s: %s %d", what, WIFEXITED(st) ? "exited" : "killed by signal",
		       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* Poll until cond is true or ms pass; returns cond. */
#define t_eventually(cond, ms) ({ \
	uint64_t _end = t_now_ns() + (uint64_t)(ms) * 1000000; \
	while (!(cond) && t_now_ns() < _end) usleep(1000); \
	(cond); })

/* A small deterministic PRNG so that failures can be replayed by seed. */
static inline uint64_t t_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Count open descriptors of this process. */
/* Remove a directory of plain files (a runtime directory a test made). */
static inline void t_rmdir_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(dir);
}

static inline int t_count_fds(void)
{
	char path[64];
	int n = 0, fd;

	for (fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (access(path, F_OK) == 0)
			n++;
	}
	return n;
}

/* A numeric field of /proc/<pid>/status ("VmRSS", "voluntary_ctxt_switches"); -1 if absent. */
static inline long t_proc_status(pid_t pid, const char *field)
{
	char path[64], line[256], fmt[80];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(fmt, sizeof(fmt), "%s: %%ld", field);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Is anything mapped at addr (from /proc/self/maps), and with which perms? */
static inline int t_mapping_perms(uintptr_t addr, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char p[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 && addr >= lo && addr < hi) {
			memcpy(perms, p, 5);
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}

#endif
