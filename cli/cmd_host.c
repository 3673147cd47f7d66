/* SPDX-License-Identifier: MIT */
/*
 * cmd_host.c - `rpal host NAME`, `rpal join NAME PROG ARGS...` and
 * `rpal ps NAME`: a host that stays up, and programs that join it from any
 * shell, each as its own process in the host's address space.
 *
 * The host listens on <runtime dir>/host-NAME.sock (SOCK_SEQPACKET, mode
 * 0600, and a joiner's uid must be the host's: SO_PEERCRED).  A request is
 * one message:
 *
 *   JOIN: struct join_req, then NUL-terminated strings: the program's path
 *         (absolute), its argv, its environment; SCM_RIGHTS carries the
 *         joiner's descriptors 0, 1 and 2.  The host answers "STARTED <pid>"
 *         or "ERROR <sentence>", and when the program's process has ended,
 *         "EXIT <status> <signal> <lost> <failed> <fault address>" (the last
 *         three: hosted_print_call_end's; a joiner reads what it gets).  The joiner passes the signals a shell
 *         sends (Ctrl-C, kill) on to that pid, and exits with the status.
 *         The host reaps the ended process only when the joiner hangs up, so
 *         that pid names the program for as long as the joiner may signal it.
 *         One that comes before the answer it sends as "SIG <n>", then ends
 *         by it; the host sends it to the program if that starts.
 *   PS:   the host answers with the JSON of `rpal ps --json`.
 *
 * Everything that loads or starts a program runs on the host's main thread:
 * a program's process is killed when the thread that cloned it ends
 * (PR_SET_PDEATHSIG), and the dynamic linker is not for several threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rpal.h>

#include "../src/rundir.h"
#include "hosted.h"
#include "rpal_host.h"
#include "bench.h"
#include "tsc.h"

#define JOIN_MAGIC "RPALJOIN"
#define JOIN_VERSION 1u
#define JOIN_MAX_ARGS 4096u     /* arguments of a program a host takes */
#define JOIN_MAX_ENV 65536u     /* environment strings */
#define JOIN_MAX (256u << 10)    /* a request: argv and environment */
#define REPLY_MAX (64u << 10)   /* a reply: ps of 15 programs */
#define JOIN_ANSWER_S 30        /* rpal join waits this long for STARTED or ERROR (RPAL_JOIN_TIMEOUT) */
#define PS_ANSWER_S 5           /* rpal ps waits this long for the answer */

struct join_req {
	char magic[8];
	uint32_t version;
	uint32_t argc, envc;
	int32_t umask;
	uint64_t sigmask;       /* the joiner's blocked signals */
	uint64_t ignored;       /* the joiner's ignored signals (nohup's SIGHUP) */
	uint32_t nrlimits;
	struct {
		int32_t resource;
		uint64_t cur, max;
	} rlimits[16];
	uint32_t cwd_len;       /* the cwd string (with its NUL) comes first */
};

static int host_socket_path(const char *name, char *out, size_t len)
{
	char dir[108];

	if (!*name || strchr(name, '/') || strlen(name) > 48) {
		fprintf(stderr, "rpal: host name \"%s\": 1 to 48 characters, no '/'\n", name);
		return -1;
	}
	if (rpal_runtime_dir(NULL, dir, sizeof(dir)) < 0 ||
	    snprintf(out, len, "%s/host-%s.sock", dir, name) >= (int)len) {
		fprintf(stderr, "rpal: the runtime directory's name is too long for a socket\n");
		return -1;
	}
	return 0;
}

/* How long a connect to a host's socket may wait, in seconds. */
#define HOST_CONNECT_S 5

/*
 * connect() to a host's socket, waiting at most HOST_CONNECT_S for room in
 * its backlog: a listener that never accepts (wedged, or anything of our
 * uid that took the name) would otherwise hold us in connect() for ever.
 * An AF_UNIX connect waits for room for as long as SO_SNDTIMEO says, then
 * fails with EAGAIN.  The timeout stays on the socket: a host reads each
 * request at once, so a send that waits 5 s has no reader either.
 */
static int connect_bounded(int fd, const struct sockaddr_un *a)
{
	struct timeval tv = { .tv_sec = HOST_CONNECT_S };

	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -1;
	return connect(fd, (const struct sockaddr *)a, sizeof(*a));
}

static int host_connect(const char *me, const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	if (host_socket_path(name, a.sun_path, sizeof(a.sun_path)) < 0)
		return -1;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect_bounded(fd, &a) == 0) {
		struct ucred uc;
		socklen_t ul = sizeof(uc);

		/* A request carries our environment and our terminal's
		 * descriptors, and we signal the pid the answer names: only a
		 * host of our own uid (or root's) may have them.  Anyone who
		 * can write the runtime directory could have put a socket of
		 * theirs at the host's name. */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0 && (uc.uid == geteuid() || uc.uid == 0))
			return fd;
		fprintf(stderr, "%s: %s is served by uid %d, not by us (uid %u) or root: not a host of ours\n", me,
			a.sun_path, ul == sizeof(uc) ? (int)uc.uid : -1, (unsigned)geteuid());
		close(fd);
		return -1;
	}
	if (errno == EAGAIN)
		fprintf(stderr, "%s: host \"%s\" did not accept the connection within %d s (%s)\n", me, name,
			HOST_CONNECT_S, a.sun_path);
	else
		fprintf(stderr, "%s: no host \"%s\" at %s: %s (start one with `rpal host %s`)\n", me, name,
			a.sun_path, strerror(errno), name);
	if (fd >= 0)
		close(fd);
	return -1;
	return fd;
}

/* One reply from the host, NUL-terminated in buf; its length, 0 at end, -1 on error. */
static ssize_t recv_reply(int fd, char *buf, size_t len)
{
	ssize_t n;

	do
		n = recv(fd, buf, len - 1, 0);
	while (n < 0 && errno == EINTR);
	if (n >= 0)
		buf[n] = 0;
	return n;
}

/* ------------------------------------------------------------ text that ps shows */

/* The code point of the UTF-8 sequence of at most n (> 0) bytes at p and its length; 0 where it is
 * not one (overlong, a surrogate, beyond U+10FFFF, a byte that should continue it and does not,
 * cut short). */
static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
	size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : p[0] >= 0xe0 && p[0] < 0xf0 ? 3 :
		     p[0] >= 0xf0 && p[0] < 0xf5 ? 4 : 0;
	uint32_t c = len == 1 ? p[0] : len == 2 ? p[0] & 0x1f : len == 3 ? p[0] & 0x0f : p[0] & 0x07;

	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) || (len == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	*cp = c;
	return len;
}

/* Whether a terminal shows character c as itself without changing the text around it or passing
 * for white space: not a control (C0, DEL, C1), a bidirectional formatting character (which
 * reorders what follows), a line or paragraph separator, a space other than U+0020, or an
 * invisible format character (zero-width ones, the soft hyphen, tags). */
static bool shows_as_itself(uint32_t c)
{
	if (c < 0x20 || (c >= 0x7f && c <= 0xa0))
		return false;
	switch (c) {
	case 0xad: case 0x061c: case 0x1680: case 0x180e: case 0x3000: case 0xfeff:
		return false;
	}
	return !(c >= 0x2000 && c <= 0x200f) && !(c >= 0x2028 && c <= 0x202f) && !(c >= 0x205f && c <= 0x206f) &&
	       !(c >= 0xfff9 && c <= 0xfffb) && !(c >= 0xe0000 && c <= 0xe007f);
}

/* How put_shown writes what does not show as itself. */
enum {
	SHOW_NL = 1,    /* newline and tab kept: the lines of an answer */
	SHOW_U = 2,     /* as JSON's \uXXXX, a byte that is not UTF-8 as U+FFFD: in a JSON document */
	SHOW_JSTR = 4,  /* the inside of a JSON string: '"' and '\' escaped too */
	SHOW_ARG = 8,   /* an argument in ps's table */
};

/*
 * s[0..n) so that what a terminal shows is what it holds: a byte that is not part of valid UTF-8
 * as \xNN, a character that does not show as itself as \xNN below U+0080 and \u{N} above (or
 * JSON's escapes, SHOW_U).  SHOW_ARG, for an argument in ps's table: a backslash as \\, a space
 * beside another or at either end of the argument as \x20, and an empty argument as '': no run
 * of spaces is an argument's, so none can line text up as a row of its own where the terminal
 * wraps the line.
 */
static void put_shown(FILE *f, const char *s, size_t n, int how)
{
	const unsigned char *start = (const unsigned char *)s, *p = start, *end = p + n;

	if ((how & SHOW_ARG) && !n)
		fputs("''", f);
	while (p < end) {
		uint32_t c;
		size_t len = utf8_decode(p, (size_t)(end - p), &c);

		if (!len && (how & SHOW_U))
			fputs("\\ufffd", f);
		else if (!len)
			fprintf(f, "\\x%02x", *p);
		else if ((how & SHOW_JSTR) && (c == '"' || c == '\\'))
			fprintf(f, "\\%c", (char)c);
		else if ((how & SHOW_ARG) && c == '\\')
			fputs("\\\\", f);
		else if ((how & SHOW_ARG) && c == ' ' && (p == start || p + 1 == end || p[-1] == ' ' || p[1] == ' '))
			fputs("\\x20", f);
		else if (shows_as_itself(c) || ((c == '\n' || c == '\t') && (how & SHOW_NL)))
			fwrite(p, 1, len, f);
		else if ((how & SHOW_U) && c > 0xffff)
			fprintf(f, "\\u%04x\\u%04x", 0xd800 + ((c - 0x10000) >> 10), 0xdc00 + ((c - 0x10000) & 0x3ff));
		else
			fprintf(f, how & SHOW_U ? "\\u%04x" : c < 0x80 ? "\\x%02x" : "\\u{%x}", c);
		p += len ? len : 1;
	}
}

/* s[0..n) as a JSON string that shows as it holds. */
static void put_jstr(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	put_shown(f, s, n, SHOW_U | SHOW_JSTR);
	fputc('"', f);
}

/* ------------------------------------------------------------ the host */

enum { P_FREE, P_RUNNING, P_ENDED };

struct hprog {
	int state;
	int idx;                /* in the host block */
	hosted_prog *p;
	int client;             /* the joiner's connection, -1 once it went */
	char **argv;
	int argc;
	int status, signal;
	bool held;              /* ended, left unreaped until its joiner hangs up (see reap) */
};

static struct hprog progs[HOSTED_NNS];
static int nprogs;
static bool hold_ended = true;  /* false once a stopping host stops waiting for its joiners */
static const char *host_name;
static char host_rundir[PATH_MAX];      /* where the programs' slots.lock is */

/*
 * A join whose program the loader thread loads.  Loading runs the constructors of the program's
 * libraries for as long as they take, while the main loop goes on answering rpal ps, passing
 * joiners' signals on and reaping.  One load at a time, as glibc's loader runs them anyway: a join
 * request that comes meanwhile waits, unread, among the pending connections.
 */
struct joining {
	char *msg;                      /* the request, copied: the strings below point into it */
	char *path, *cwd, **argv, **env, **envp;
	struct join_req rq;
	int client, fds[3], cwd_fd, idx;
	hosted_prog *p;                 /* what the loader thread loaded, or NULL with err */
	char err[HOSTED_ERR_MAX];
};
static struct joining *loading;         /* the join whose program is loading, if any */
static pthread_t loader;
static int load_done[2] = { -1, -1 };   /* a pipe: the loader thread's byte says it is done */

/* The linker namespaces this host has used: every program it loaded, including one that loaded
 * but then failed to start (a namespace is never unloaded). */
static int ns_used(void)
{
	return HOSTED_NNS - 1 - hosted_ns_limit();
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
	char buf[HOSTED_ERR_MAX];
	va_list ap;
	int n;

	if (fd < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 1;
	(void)!send(fd, buf, (size_t)n, MSG_NOSIGNAL);
}

static const char *prog_state(const struct hprog *hp, const struct rpal_host *h)
{
	if (hp->state == P_RUNNING)
		return "running";
	if (atomic_load(&h->progs[hp->idx].failed))
		return "failed";
	return hp->signal ? "killed" : "exited";
}

/* Bytes of a program's arguments that ps shows, each argument counted with the NUL that ends it
 * (as in /proc/PID/cmdline, so that thousands of empty ones count too): those of 15 programs fit
 * a reply (REPLY_MAX) even where every byte is escaped (6 in JSON). */
#define ARGV_SHOWN 600

/* How much of argument a ps shows, of the budget *left its program's arguments share; false if
 * that is not all of it (the budget ends inside it, cut at the start of a character). */
static bool arg_shown(const char *a, size_t *left, size_t *n)
{
	size_t len = strlen(a);

	if (len < *left) {
		*n = len;
		*left -= len + 1;
		return true;
	}
	*n = *left;
	while (*n && ((unsigned char)a[*n] & 0xc0) == 0x80)
		(*n)--;
	*left = 0;
	return false;
}

/* A program's arguments, ending its row of the table: one line, whatever they hold (put_shown). */
static void ps_argv_table(FILE *f, int argc, char *const *argv)
{
	size_t left = ARGV_SHOWN, n;

	for (int k = 0; k < argc; k++) {
		bool all = arg_shown(argv[k], &left, &n);

		fputc(' ', f);
		if (all || n)
			put_shown(f, argv[k], n, SHOW_ARG);
		if (!all) {
			fputs("...", f);
			break;
		}
	}
	fputc('\n', f);
}

/* A program's arguments as a JSON array; false if they are cut. */
static bool ps_argv_json(FILE *f, int argc, char *const *argv)
{
	size_t left = ARGV_SHOWN, n;
	bool all = true;

	fputc('[', f);
	for (int k = 0; k < argc && all; k++) {
		all = arg_shown(argv[k], &left, &n);
		if (!all && !n)
			break;  /* none of it shown */
		if (k)
			fputs(", ", f);
		put_jstr(f, argv[k], n);
	}
	fputc(']', f);
	return all;
}

/* The answer to PST: what `rpal ps` prints. */
static void ps_table(FILE *f, const struct rpal_host *h, double tsc_hz)
{
	fputs("host ", f);
	put_shown(f, host_name, strlen(host_name), 0);
	fprintf(f, ": pid %d, %d of %d programs loaded\n", (int)getpid(), ns_used(), HOSTED_NNS - 1);
	fprintf(f, "%8s %-10s %12s %12s %9s %12s  %s\n", "PID", "STATE", "CALLS_IN", "CALLS_OUT",
		"HANDOFFS", "CALLEE_MS", "COMMAND");
	for (int i = 0; i < nprogs; i++) {
		const struct hprog *hp = &progs[i];
		const struct rpal_host_prog *bp = &h->progs[hp->idx];
		const char *state = prog_state(hp, h);
		uint64_t calls, tsc;
		char shown[24];

		/* An ended program's exit status, or the signal that killed it. */
		if (hp->state == P_ENDED && strcmp(state, "failed"))
			snprintf(shown, sizeof(shown), "%s %d", state, hp->signal ? hp->signal : hp->status);
		else
			snprintf(shown, sizeof(shown), "%s", state);
		rpal_host_prog_calls(bp, &calls, &tsc);
		fprintf(f, "%8d %-10s %12llu %12llu %9llu %12.3f ", hosted_pid(hp->p), shown,
			(unsigned long long)calls, (unsigned long long)rpal_host_prog_calls_out(bp),
			(unsigned long long)atomic_load(&bp->handoffs), tsc_hz > 0 ? (double)tsc * 1e3 / tsc_hz : 0);
		ps_argv_table(f, hp->argc, hp->argv);
	}
	if (loading) {
		fprintf(f, "%8s %-10s %12d %12d %9d %12.3f ", "-", "loading", 0, 0, 0, 0.0);
		ps_argv_table(f, (int)loading->rq.argc, loading->argv);
	}
}

/* The answer to PS: see `rpal ps --help` for the fields. */
static void ps_json(FILE *f, const struct rpal_host *h, double tsc_hz)
{
	fprintf(f, "{\"host\": {\"name\": ");
	put_jstr(f, host_name, strlen(host_name));
	fprintf(f, ", \"pid\": %d, \"programs_loaded\": %d, \"programs_max\": %d}, \"programs\": [",
		(int)getpid(), ns_used(), HOSTED_NNS - 1);
	for (int i = 0; i < nprogs; i++) {
		const struct hprog *hp = &progs[i];
		const struct rpal_host_prog *bp = &h->progs[hp->idx];
		uint64_t calls, tsc;

		rpal_host_prog_calls(bp, &calls, &tsc);
		fprintf(f, "%s{\"pid\": %d, \"argv\": ", i ? ", " : "", hosted_pid(hp->p));
		bool all = ps_argv_json(f, hp->argc, hp->argv);
		fprintf(f, ", \"state\": \"%s\"", prog_state(hp, h));
		if (hp->state == P_ENDED)
			fprintf(f, ", \"exit_status\": %d", hp->status);
		fprintf(f, ", \"calls_in\": %llu, \"calls_out\": %llu, \"handoffs\": %llu, \"callee_cpu_ns\": %llu, "
			"\"argv_cut\": %s}",
			(unsigned long long)calls, (unsigned long long)rpal_host_prog_calls_out(bp),
			(unsigned long long)atomic_load(&bp->handoffs),
			(unsigned long long)(tsc_hz > 0 ? (double)tsc * 1e9 / tsc_hz : 0), all ? "false" : "true");
	}
	if (loading) {
		fprintf(f, "%s{\"pid\": null, \"argv\": ", nprogs ? ", " : "");
		bool all = ps_argv_json(f, (int)loading->rq.argc, loading->argv);
		fprintf(f, ", \"state\": \"loading\", \"calls_in\": 0, \"calls_out\": 0, \"handoffs\": 0, "
			"\"callee_cpu_ns\": 0, \"argv_cut\": %s}", all ? "false" : "true");
	}
	fprintf(f, "]}\n");
}

static void answer_ps(int fd, const struct rpal_host *h, double tsc_hz, bool table)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return;
	(table ? ps_table : ps_json)(f, h, tsc_hz);
	fclose(f);
	/* ARGV_SHOWN keeps it shorter; were it not, half a table or JSON document would pass for
	 * the whole (rpal ps takes up to REPLY_MAX - 2 bytes). */
	if (len > REPLY_MAX - 2)
		say(fd, "ERROR host \"%s\": its answer of %zu bytes is longer than rpal ps takes (%u)", host_name,
		    len, REPLY_MAX - 2);
	else
		(void)!send(fd, buf, len, MSG_NOSIGNAL);
	free(buf);
}

/* Split n bytes of NUL-terminated strings into v[0..count); false if they are not all there. */
static bool take_strings(char **cur, char *end, char **v, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		char *nul = memchr(*cur, 0, (size_t)(end - *cur));

		if (!nul)
			return false;
		v[i] = *cur;
		*cur = nul + 1;
	}
	return true;
}

/* KiB of the host's address space (field "VmSize") or of its private writable data ("VmData"),
 * from /proc/self/status; -1 if unknown. */
static long long host_vm_kib(const char *field)
{
	char line[256];
	long long kib = -1;
	size_t n = strlen(field);
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return -1;
	while (kib < 0 && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			kib = strtoll(line + n + 1, NULL, 10);
	fclose(f);
	return kib;
}

/*
 * The kernel checks RLIMIT_AS and RLIMIT_DATA of the process that maps against the size of its
 * address space, which a joined program shares with the host: the rpal region the host reserved,
 * and every program's heap, stacks and mappings, those of ended programs included.  A joiner's
 * limit below what the host has mapped already would let the program map nothing (its main
 * thread's stack, malloc, pthread_create), and it would fail far from the cause; so the join is
 * refused, before anything is loaded, naming the limit.  A higher limit applies, to the sum.
 * Writes the refusal into err; 0 when the limits fit.
 */
static int join_memory_limits(const struct join_req *rq, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < rq->nrlimits; i++) {
		int r = rq->rlimits[i].resource;
		const char *name = r == RLIMIT_AS ? "RLIMIT_AS (ulimit -v)" : "RLIMIT_DATA (ulimit -d)";
		const char *what = r == RLIMIT_AS ? "address space (the rpal region included)"
						  : "private data (every program's heap and stacks, ended ones' included)";
		long long have;

		if ((r != RLIMIT_AS && r != RLIMIT_DATA) || rq->rlimits[i].cur == RLIM_INFINITY)
			continue;
		have = host_vm_kib(r == RLIMIT_AS ? "VmSize" : "VmData");
		if (have < 0 || rq->rlimits[i].cur / 1024 > (uint64_t)have)
			continue;
		snprintf(err, errlen, "the joiner's %s of %llu KiB is below the %lld KiB of %s that host \"%s\" "
			 "has mapped: the kernel checks it against the address space that the program would "
			 "share, so it could map no memory; raise it, or run the program directly", name,
			 (unsigned long long)(rq->rlimits[i].cur / 1024), have, what, host_name);
		return -1;
	}
	return 0;
}

/* A descriptor of dir for the program's process to enter (fchdir), checked as chdir(2) would check
 * it; -1 with errno saying why it could not.  The directory checked is the one entered, whatever is
 * renamed or removed while the program loads.  The host runs as the joiner's uid, so its answer is
 * the joiner's. */
static int dir_open(const char *dir)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int e;

	if (fd < 0)
		return -1;
	/* Without faccessat2 (Linux < 5.8, or a seccomp filter): the name, just opened. */
	if (syscall(SYS_faccessat2, fd, "", X_OK, AT_EMPTY_PATH | AT_EACCESS) == 0 ||
	    ((errno == ENOSYS || errno == EINVAL || errno == EPERM) && access(dir, X_OK) == 0))
		return fd;
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* A JOIN: load the program, start its process with the joiner's descriptors, directory, umask,
 * rlimits and signal mask, and answer STARTED or ERROR. */
static void joining_free(struct joining *j)
{
	if (j->client >= 0)
		close(j->client);
	for (int i = 0; i < 3; i++)
		if (j->fds[i] >= 0)
			close(j->fds[i]);
	if (j->cwd_fd >= 0)
		close(j->cwd_fd);
	free(j->argv);
	free(j->env);
	if (j->envp) {
		/* hosted_load copied it; the last entry, RPAL_HOST, is the only
		 * one hosted_host_environ allocated. */
		size_t k = 0;

		while (j->envp[k])
			k++;
		if (k)
			free(j->envp[k - 1]);
		free(j->envp);
	}
	free(j->msg);
	free(j);
}

static void *load_thread(void *arg)
{
	struct joining *j = arg;

	j->p = hosted_load(j->path, (int)j->rq.argc, j->argv, j->envp, j->err, sizeof(j->err));
	(void)!write(load_done[1], "", 1);
	return NULL;
}

/* The program of j is loaded, or could not be: start it, or say why not. */
static void join_finish(struct rpal_host *h, struct joining *j, bool stopping)
{
	hosted_spawn sp = { .umask = -1 };
	struct hprog *hp;

	if (!j->p) {
		say(j->client, "ERROR %s", j->err);
		goto refused;
	}
	if (stopping) {
		say(j->client, "ERROR host \"%s\" is stopping", host_name);
		goto refused;
	}
	hosted_host_set_code(h, j->idx, j->p);
	memcpy(sp.fds, j->fds, sizeof(sp.fds));
	sp.only_std_fds = 1;    /* the joiner's three, none of the host's */
	sp.own_pgrp = 1;        /* a job of its own, which the joiner signals */
	sp.cwd = j->cwd;
	sp.cwd_fd = j->cwd_fd;
	sp.umask = j->rq.umask;
	sp.sigmask = j->rq.sigmask;
	sp.set_sigmask = 1;
	sp.ignored = j->rq.ignored;
	sp.set_ignored = 1;
	sp.pid_out = &h->progs[j->idx].pid;
	sp.nrlimits = (int)j->rq.nrlimits;
	for (uint32_t i = 0; i < j->rq.nrlimits; i++) {
		sp.rlimits[i].resource = j->rq.rlimits[i].resource;
		sp.rlimits[i].cur = j->rq.rlimits[i].cur;
		sp.rlimits[i].max = j->rq.rlimits[i].max;
	}
	if (hosted_start_spawn(j->p, &sp, j->err, sizeof(j->err)) < 0) {
		say(j->client, "ERROR %s", j->err);
		goto refused;
	}
	hp = &progs[nprogs++];
	hp->state = P_RUNNING;
	hp->idx = j->idx;
	hp->p = j->p;
	hp->client = j->client;
	hp->argc = (int)j->rq.argc;
	hp->argv = calloc(j->rq.argc, sizeof(char *));
	for (uint32_t i = 0; hp->argv && i < j->rq.argc; i++)
		hp->argv[i] = strdup(j->argv[i]);
	if (!hp->argv)
		hp->argc = 0;
	say(j->client, "STARTED %d", hosted_pid(j->p));
	j->client = -1;
	joining_free(j);
	return;
refused:
	/* A join that never started a program gives its entry of the host block back. */
	hosted_host_unadd(h, j->idx);
	joining_free(j);
}

/* The loader thread is done: finish its join. */
static void load_finished(struct rpal_host *h, bool stopping)
{
	char c;
	struct joining *j = loading;

	while (read(load_done[0], &c, 1) > 0)
		;
	pthread_join(loader, NULL);
	loading = NULL;
	join_finish(h, j, stopping);
}

/* A join request: checked, and its program's load begun.  Takes client and the descriptors. */
static void join(struct rpal_host *h, int client, const char *msg, size_t n, int fds[3])
{
	struct joining *j = calloc(1, sizeof(*j));
	char *cur, *end;

	if (!j) {
		say(client, "ERROR out of memory");
		close(client);
		return;
	}
	j->client = client;
	j->cwd_fd = j->idx = -1;
	for (int i = 0; i < 3; i++) {
		j->fds[i] = fds[i];
		fds[i] = -1;
	}
	j->msg = malloc(n);
	if (!j->msg) {
		say(client, "ERROR out of memory");
		goto out;
	}
	memcpy(j->msg, msg, n);
	memcpy(&j->rq, j->msg, sizeof(j->rq));
	cur = j->msg + sizeof(j->rq);
	end = j->msg + n;
	if (j->rq.version != JOIN_VERSION || j->rq.argc < 1 || j->rq.argc > JOIN_MAX_ARGS || j->rq.envc > JOIN_MAX_ENV ||
	    j->rq.nrlimits > 16 || !(j->argv = calloc(j->rq.argc + 1, sizeof(*j->argv))) ||
	    !(j->env = calloc(j->rq.envc + 1, sizeof(*j->env))) || !take_strings(&cur, end, &j->cwd, 1) ||
	    !take_strings(&cur, end, &j->path, 1) || !take_strings(&cur, end, j->argv, j->rq.argc) ||
	    !take_strings(&cur, end, j->env, j->rq.envc) || j->path[0] != '/') {
		say(client, "ERROR malformed join request (this rpal join and host do not match?)");
		goto out;
	}
	if (j->rq.umask < 0 || j->rq.umask > 0777) {
		say(client, "ERROR malformed join request: umask %d is not one of 0 to 0777", (int)j->rq.umask);
		goto out;
	}
	/* Checked before loading: a program loaded takes a linker namespace for good, even one whose
	 * process then cannot start there. */
	j->cwd_fd = dir_open(j->cwd);
	if (j->cwd_fd < 0) {
		say(client, "ERROR %s: cannot enter its working directory %s: %s", j->path, j->cwd, strerror(errno));
		goto out;
	}
	if (hosted_ns_limit() <= 0 || nprogs == HOSTED_NNS - 1 || h->nprogs >= RPAL_HOST_MAX_PROGS) {
		say(client, "ERROR host \"%s\" is full: it has loaded %d programs, glibc's limit of linker "
		    "namespaces (DL_NNS = %d, one is the host's own); a namespace is never unloaded, so "
		    "start another host", host_name, ns_used(), HOSTED_NNS);
		goto out;
	}
	if (join_memory_limits(&j->rq, j->err, sizeof(j->err)) < 0) {
		say(client, "ERROR %s", j->err);
		goto out;
	}
	j->idx = hosted_host_add(h, j->path);
	if (j->idx < 0 || !(j->envp = hosted_host_environ(h, j->idx, j->env))) {
		say(client, "ERROR out of memory");
		if (j->idx >= 0)
			hosted_host_unadd(h, j->idx);
		goto out;
	}
	if (load_done[0] < 0 && pipe2(load_done, O_CLOEXEC | O_NONBLOCK) < 0) {
		load_done[0] = load_done[1] = -1;
	} else if (pthread_create(&loader, NULL, load_thread, j) == 0) {
		loading = j;
		return;
	}
	/* No thread to load it on: load it here, holding the loop meanwhile. */
	j->p = hosted_load(j->path, (int)j->rq.argc, j->argv, j->envp, j->err, sizeof(j->err));
	join_finish(h, j, false);
	return;
out:
	joining_free(j);
}

/*
 * Tell the joiners of the programs whose process ended.  Such a process is
 * left a zombie (waitid WNOWAIT) until its joiner hangs up: until then the
 * joiner may still pass a signal on to its pid or process group, or read its
 * /proc entry, and a reaped pid could by then name another process.  A joiner
 * that went away, or a host that has stopped waiting, reaps at once.
 */
static void reap(struct rpal_host *h)
{
	bool ended = false;

	for (int i = 0; i < nprogs; i++) {
		struct hprog *hp = &progs[i];
		siginfo_t si = { 0 };
		char prefix[96];
		int lost, failed;
		uint64_t addr;

		if (hp->state != P_RUNNING)
			continue;
		if (waitid(P_PID, (id_t)hosted_pid(hp->p), &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid == 0)
			continue;
		hp->state = P_ENDED;
		hp->signal = si.si_code == CLD_EXITED ? 0 : si.si_status;
		hp->status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
		lost = hosted_host_ended(h, hp->idx);
		failed = atomic_load(&h->progs[hp->idx].failed);
		addr = atomic_load(&h->progs[hp->idx].fault_addr);
		snprintf(prefix, sizeof(prefix), "rpal host %s: ", host_name);
		hosted_print_call_end(stderr, prefix, hosted_path(hp->p), hosted_pid(hp->p), lost, failed, addr);
		/* The joiner prints the same sentences: the program's stderr is its own. */
		say(hp->client, "EXIT %d %d %d %d %llu", hp->status, hp->signal, lost, failed,
		    (unsigned long long)addr);
		hp->held = hp->client >= 0 && hold_ended;
		if (!hp->held)
			hosted_wait(hp->p);
		ended = true;
	}
	/* A program killed while it read an outside peer's arena could not unmap it. */
	if (ended)
		hosted_host_unmap_unread(h, host_rundir, 1);
}

/* A program that called execve() while one of its threads ran another program's receiver lost
 * that receiver: that program fails now, not when the new image ends. */
static void execd(struct rpal_host *h)
{
	char prefix[96];

	snprintf(prefix, sizeof(prefix), "rpal host %s: ", host_name);
	for (int i = 0; i < nprogs; i++)
		if (progs[i].state == P_RUNNING)
			hosted_print_exec_lost(stderr, prefix, hosted_path(progs[i].p), hosted_pid(progs[i].p),
					       hosted_host_execd(h, progs[i].idx, hosted_pid(progs[i].p)));
}

/* Reap an ended program whose joiner has gone (or is no longer waited for). */
static void release(struct hprog *hp)
{
	if (hp->client >= 0)
		close(hp->client);
	hp->client = -1;
	if (hp->held)
		hosted_wait(hp->p);
	hp->held = false;
}

/* What a joiner says after its join: "SIG <n>", a signal that came before it knew the program's
 * pid (it has ended itself since); a hang-up, that it is gone (kill -9: the program runs on). */
static void joiner_said(struct hprog *hp)
{
	char msg[16];
	ssize_t n = recv(hp->client, msg, sizeof(msg) - 1, MSG_DONTWAIT);
	int sig;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0) {
		msg[n] = 0;
		if (sscanf(msg, "SIG %d", &sig) == 1 && sig > 0 && sig < 65 && hp->state == P_RUNNING)
			kill(hosted_pid(hp->p), sig);
		return;
	}
	release(hp);
}

/* The request a new connection has sent (the main loop waited for it). */
/* Serve a connection whose request has come, and close it, or keep it as a running program's.
 * False, with the request left unread, for a join that must wait for the load under way. */
static bool serve(struct rpal_host *h, int client, double tsc_hz)
{
	static char msg[JOIN_MAX];
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = { msg, sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	int fds[3] = { -1, -1, -1 }, nfds = 0;
	ssize_t n;

	if (loading && recv(client, msg, 8, MSG_PEEK | MSG_DONTWAIT) == 8 && !memcmp(msg, JOIN_MAGIC, 8))
		return false;
	n = recvmsg(client, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0) {
		close(client);
		return true;
	}
	/* An empty request may still carry descriptors: they are closed below. */
	/* Checked after the request is read: closing a socket with unread data
	 * resets the peer, which would lose the answer. */
	if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0 || uc.uid != geteuid()) {
		say(client, "ERROR host \"%s\" runs as uid %u and takes programs of that uid only (you are uid %d)",
		    host_name, (unsigned)geteuid(), ul == sizeof(uc) ? (int)uc.uid : -1);
		n = 0;          /* nothing of the request is used, its descriptors are closed below */
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)(nfds < 3 ? nfds : 3) * sizeof(int));
			for (int i = 3; i < nfds; i++)
				close(((int *)CMSG_DATA(c))[i]);
		}
	if (n == 0) {
		close(client);
	} else if ((n == 2 || n == 3) && !memcmp(msg, "PST", (size_t)n)) {
		answer_ps(client, h, tsc_hz, n == 3);
		close(client);
	} else if ((size_t)n >= sizeof(struct join_req) && !memcmp(msg, JOIN_MAGIC, 8) && nfds == 3 &&
		   !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		join(h, client, msg, (size_t)n, fds);
	} else {
		say(client, "ERROR malformed request");
		close(client);
	}
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return true;
}

/*
 * Connections accepted whose request has not come yet.  The main loop waits
 * for them beside everything else, so one that sends nothing holds up no
 * one: it is dropped after PENDING_MS.  When PENDING_MAX wait, one makes
 * room for a new one: the oldest of the process that connected the most of
 * them, served if its request came since the loop looked, dropped if not.
 * A flood from a few processes then takes room from itself, not from a
 * joiner slow to send (a busy machine).
 */
#define PENDING_MAX 64
#define PENDING_MS 2000

static struct pending {
	int fd;
	pid_t pid;              /* that connected it (SO_PEERCRED) */
	uint64_t deadline;      /* mono_ns */
	bool queued;            /* a join request, unread until the load under way is done */
} pending[PENDING_MAX];
static int npending;

static void pending_add(struct rpal_host *h, int fd, double tsc_hz)
{
	struct ucred uc = { .pid = 0 };
	socklen_t ul = sizeof(uc);

	if (npending == PENDING_MAX) {
		int most = 0, out = 0;

		for (int i = 0; i < npending; i++) {
			int k = 0;

			for (int j = 0; j < npending; j++)
				k += pending[j].pid == pending[i].pid;
			if (k > most) {
				most = k;
				out = i;
			}
		}
		if (!serve(h, pending[out].fd, tsc_hz)) {       /* closes it if nothing came */
			say(pending[out].fd, "ERROR host \"%s\" has %d connections waiting while it loads a "
			    "program; try again", host_name, PENDING_MAX);
			close(pending[out].fd);
		}
		memmove(&pending[out], &pending[out + 1], (size_t)(npending - out - 1) * sizeof(pending[0]));
		npending--;
	}
	getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul);
	pending[npending++] = (struct pending){ fd, uc.pid, mono_ns() + PENDING_MS * 1000000ull, false };
}

/* The poll timeout, ms, that wakes the loop for the next pending deadline, or dflt. */
static int pending_timeout(int dflt)
{
	uint64_t now = mono_ns();
	int t = dflt;

	for (int i = 0; i < npending; i++) {
		int left = pending[i].deadline > now ? (int)((pending[i].deadline - now + 999999) / 1000000) : 0;

		/* A join waiting for the load under way is due when it ends, and at once after. */
		if (pending[i].queued && loading)
			continue;
		if (pending[i].queued)
			left = 0;
		if (t < 0 || left < t)
			t = left;
	}
	return t;
}

static void host_usage(FILE *f)
{
	fprintf(f,
"usage: rpal host NAME\n"
"\n"
"Starts an empty host that stays up until SIGTERM, Ctrl-C or SIGHUP.  Programs\n"
"join it with `rpal join NAME PROGRAM [ARGS...]`, each as its own process (own\n"
"PID, descriptors, signal handlers) in the host's address space, so that rpal\n"
"connections between them deliver messages by RPAL calls.  At most %d programs\n"
"in a host's life (glibc's linker namespaces).  Only the host's uid may join.\n"
"The socket is <runtime dir>/host-NAME.sock.  On any of those signals the host\n"
"sends its programs SIGTERM, waits for them (5 s, then SIGKILL) and exits 0.\n", HOSTED_NNS - 1);
}

int cmd_host(int argc, char **argv)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct rpal_config cfg;
	struct rpal_host *h;
	char err[512], dir[108], prefix[96];
	sigset_t sigs;
	int lfd, sfd, stopping = 0;
	uint64_t stop_deadline = 0;
	bool load_abandoned = false;
	double tsc_hz;

	hosted_reexec_with_tunables(argc, argv - 1);
	if (argc != 2 || argv[1][0] == '-') {
		bool help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));

		if (argc == 2 && !help)
			fprintf(stderr, "rpal host: unknown option %s\n\n", argv[1]);
		host_usage(help ? stdout : stderr);
		return help ? 0 : 2;
	}
	host_name = argv[1];
	if (host_socket_path(host_name, a.sun_path, sizeof(a.sun_path)) < 0)
		return 2;
	rpal_runtime_dir(NULL, dir, sizeof(dir));
	snprintf(host_rundir, sizeof(host_rundir), "%s", dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "rpal host: cannot create %s: %s\n", dir, strerror(errno));
		return 2;
	}
	/* Where rpal_init would refuse to work, others could replace our
	 * socket and receive our joiners' requests. */
	{
		struct stat sb;

		if (rpal_rundir_check(dir, &sb) != RPAL_RUNDIR_OK) {
			fprintf(stderr, "rpal host: %s is not a runtime directory rpal_init would use (a link, "
				"not ours or root's, or writable by others)\n", dir);
			return 2;
		}
	}
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno == EADDRINUSE) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (probe >= 0 && connect_bounded(probe, &a) == 0) {
			fprintf(stderr, "rpal host: host \"%s\" is already running (%s)\n", host_name, a.sun_path);
			return 2;
		}
		/* Something listens there but does not accept: not a socket a
		 * dead host left, and not ours to take. */
		if (probe >= 0 && errno == EAGAIN) {
			fprintf(stderr, "rpal host: %s is taken: its listener did not accept a connection within %d s\n",
				a.sun_path, HOST_CONNECT_S);
			return 2;
		}
		if (probe >= 0)
			close(probe);
		unlink(a.sun_path);     /* a host that died left it */
		if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0)
			lfd = -1;
	}
	if (lfd < 0 || chmod(a.sun_path, 0600) < 0 || listen(lfd, 64) < 0) {
		fprintf(stderr, "rpal host: cannot listen on %s: %s\n", a.sun_path, strerror(errno));
		return 2;
	}
	rpal_config_default(&cfg);
	h = hosted_host_create(cfg.region_base, cfg.slot_size, cfg.nr_slots, err, sizeof(err));
	if (!h) {
		fprintf(stderr, "rpal host: %s\n", err);
		unlink(a.sun_path);
		return 2;
	}
	snprintf(prefix, sizeof(prefix), "rpal host %s: ", host_name);
	hosted_linker_watch(h, prefix);
	tsc_hz = tsc_calibrate(20);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGCHLD);
	sigprocmask(SIG_BLOCK, &sigs, NULL);    /* programs get the joiner's mask instead */
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "rpal host %s: pid %d, listening on %s\n", host_name, (int)getpid(), a.sun_path);
	for (;;) {
		struct pollfd pfd[3 + HOSTED_NNS + PENDING_MAX] = { { sfd, POLLIN, 0 }, { lfd, POLLIN, 0 },
								     { loading ? load_done[0] : -1, POLLIN, 0 } };
		int running = 0, npfd = 3, who[HOSTED_NNS], first_pending, nwaiting;
		struct pending waiting[PENDING_MAX];

		for (int i = 0; i < nprogs; i++)
			if ((progs[i].state == P_RUNNING || progs[i].held) && progs[i].client >= 0) {
				who[npfd - 3] = i;
				pfd[npfd++] = (struct pollfd){ progs[i].client, POLLIN, 0 };
			}
		first_pending = npfd;
		for (int i = 0; i < npending; i++)
			pfd[npfd++] = (struct pollfd){ pending[i].queued ? -1 : pending[i].fd, POLLIN, 0 };
		if (stopping)
			pfd[1].fd = -1;
		poll(pfd, (nfds_t)npfd, pending_timeout(stopping ? 100 : nprogs ? HOSTED_EXEC_CHECK_MS : -1));
		for (int k = 3; k < first_pending; k++)
			if (pfd[k].revents)
				joiner_said(&progs[who[k - 3]]);
		if (pfd[2].revents)
			load_finished(h, stopping);
		/* Serve those whose request came, drop those past their time; a join that came during a
		 * load waits for its end. */
		nwaiting = 0;
		for (int i = 0; i < npending; i++) {
			bool due = pfd[first_pending + i].revents || (pending[i].queued && !loading);

			if (due && !stopping) {
				if (!serve(h, pending[i].fd, tsc_hz)) {
					pending[i].queued = true;
					waiting[nwaiting++] = pending[i];
				}
			} else if (stopping || (!pending[i].queued && mono_ns() >= pending[i].deadline)) {
				close(pending[i].fd);
			} else {
				waiting[nwaiting++] = pending[i];
			}
		}
		memcpy(pending, waiting, (size_t)nwaiting * sizeof(pending[0]));
		npending = nwaiting;
		if (pfd[0].revents) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD || stopping)
					continue;
				stopping = 1;
				stop_deadline = mono_ns() + 5000000000ull;
				for (int i = 0; i < nprogs; i++)
					if (progs[i].state == P_RUNNING)
						kill(hosted_pid(progs[i].p), SIGTERM);
			}
		}
		reap(h);
		if (nprogs)
			hosted_host_unmap_unread(h, host_rundir, 0);
		execd(h);
		if (!stopping && (pfd[1].revents & POLLIN)) {
			/* Not blocking: nothing that a client does or does not send holds the loop. */
			int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (c >= 0)
				pending_add(h, c, tsc_hz);
		}
		for (int i = 0; i < nprogs; i++)
			running += progs[i].state == P_RUNNING || progs[i].held;
		if (stopping && !running && (!loading || load_abandoned))
			break;
		if (stopping && mono_ns() > stop_deadline) {
			/* A joiner that does not hang up (stopped: Ctrl-Z) holds the host no longer, and
			 * neither does a load that never ends (a constructor that waits for ever, or the
			 * dynamic linker's lock held by a program killed inside it). */
			hold_ended = false;
			for (int i = 0; i < nprogs; i++)
				if (progs[i].state == P_RUNNING)
					kill(hosted_pid(progs[i].p), SIGKILL);
				else if (progs[i].held)
					release(&progs[i]);
			if (loading) {
				fprintf(stderr, "rpal host %s: the load of %s did not end within 5 s of the stop: "
					"stopping without it\n", host_name, loading->path);
				load_abandoned = true;
			}
			stop_deadline = UINT64_MAX;
		}
	}
	unlink(a.sun_path);
	fprintf(stderr, "rpal host %s: stopped\n", host_name);
	fflush(NULL);
	_exit(0);       /* the programs ran their exit handlers; see cmd_run */
}

/* ------------------------------------------------------------ the joiner */

static volatile sig_atomic_t joined_pid;
static int host_fd = -1;
static uint64_t joiner_ignored;  /* the signals ignored when rpal join started */

/* /proc/PID/NAME into buf, NUL-terminated (as much as fits); its length, 0
 * where it cannot be read.  Async-signal-safe but for snprintf, which with
 * these arguments neither allocates nor locks in glibc. */
static size_t read_proc(pid_t pid, const char *name, char *buf, size_t len)
{
	char path[40];
	size_t n = 0;
	ssize_t r;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	while (n < len - 1 && (r = read(fd, buf + n, len - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = 0;
	return n;
}

/* 1 when process pid is stopped (state T in /proc); async-signal-safe. */
static int stopped(pid_t pid)
{
	char buf[512], *p;

	if (!read_proc(pid, "stat", buf, sizeof(buf)))
		return 0;
	p = strrchr(buf, ')');  /* after the name, which may hold anything */
	return p && p[1] == ' ' && p[2] == 'T';
}

/* The SigBlk, SigIgn and SigCgt masks of /proc/PATH/status (PATH: "PID" or "PID/task/TID"), read
 * to its end: the Groups line before them grows with the supplementary groups (tens of KiB), so
 * no fixed part of the file is sure to hold them.  -1 where it cannot be read or a mask is
 * missing.  Async-signal-safe but for snprintf (see read_proc). */
static int status_masks(const char *path, uint64_t *blk, uint64_t *ign, uint64_t *cgt)
{
	static const char *const key[3] = { "SigBlk:", "SigIgn:", "SigCgt:" };
	uint64_t *mask[3] = { blk, ign, cgt };
	char file[64], chunk[4096], line[64];
	size_t ll = 0;
	int found = 0, fd;
	ssize_t r;

	snprintf(file, sizeof(file), "/proc/%s/status", path);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while ((r = read(fd, chunk, sizeof(chunk))) > 0)
		for (ssize_t i = 0; i < r; i++) {
			if (chunk[i] != '\n') {
				if (ll < sizeof(line) - 1)
					line[ll++] = chunk[i];      /* the masks' lines are short */
				continue;
			}
			line[ll] = 0;
			for (int k = 0; k < 3; k++) {
				const char *c = line + 7;
				uint64_t v = 0;

				if (strncmp(line, key[k], 7) != 0)
					continue;
				while (*c == ' ' || *c == '\t')
					c++;
				for (; (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'); c++)
					v = v << 4 | (uint64_t)(*c <= '9' ? *c - '0' : *c - 'a' + 10);
				*mask[k] = v;
				found |= 1 << k;
			}
			ll = 0;
		}
	close(fd);
	return found == 7 ? 0 : -1;
}

/*
 * 1 when the kernel would discard or defer a SIGTSTP for process pid, which
 * then must not be stopped for it: it catches SIGTSTP, ignores it, or blocks
 * it in every thread (a signal for a process waits only while all its threads
 * block it; the hosted process's first task blocks all signals for good).
 * Async-signal-safe (raw getdents64, no opendir).
 */
static int tstp_handled(pid_t pid)
{
	const uint64_t bit = 1ull << (SIGTSTP - 1);
	uint64_t blk, ign, cgt;
	char path[48], ents[2048];
	long n;
	int fd, all_block = 1, threads = 0;

	snprintf(path, sizeof(path), "%d", (int)pid);
	if (status_masks(path, &blk, &ign, &cgt) < 0)
		return 1;       /* gone, or unreadable: nothing is sent on a guess */
	if ((cgt | ign) & bit)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	while (all_block && (n = syscall(SYS_getdents64, fd, ents, sizeof(ents))) > 0)
		for (long off = 0; off < n && all_block;) {
			struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; }
				*d = (void *)(ents + off);

			off += d->reclen;
			if (d->name[0] < '0' || d->name[0] > '9')
				continue;
			snprintf(path, sizeof(path), "%d/task/%.16s", (int)pid, d->name);
			if (status_masks(path, &blk, &ign, &cgt) == 0) {
				threads++;
				all_block = (blk & bit) != 0;
			}
		}
	close(fd);
	return !threads || all_block;
}

/*
 * Where a signal for the running program goes.  The program leads a process
 * group of its own (its children join it), as a shell's job does, but not the
 * terminal's foreground group, which is the joiner's: what the terminal sends
 * to that group (Ctrl-C, Ctrl-\, Ctrl-Z, a resize: si_code SI_KERNEL) goes to
 * the program's group, and so does SIGCONT (fg, bg: a stopped job goes on
 * whole); a kill() of the joiner, to the program alone, as kill of an exec'd
 * program's pid.
 */
static void send_to_program(int sig, const siginfo_t *si)
{
	pid_t pid = (pid_t)joined_pid, to = pid;

	if ((sig == SIGCONT || (si && si->si_code == SI_KERNEL)) && kill(-pid, sig) == 0)
		to = -pid;
	else
		kill(pid, sig);
	/* One that ends a process must end a stopped one too (a program that
	 * read a terminal it does not own got SIGTTIN): it acts once continued. */
	if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) && stopped(pid))
		kill(to, SIGCONT);
}

/*
 * A signal for the program.  Once its pid is known it goes there.  Before the
 * host's answer (a slow load) one that would end a process ends the joiner,
 * as it would end the program: the host is told first ("SIG <n>" on the
 * connection) and sends it to the program if it starts after all.  One that
 * the joiner's parent had ignored stays ignored, as the program will ignore it.
 */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	char msg[8] = "SIG ";
	size_t n = 4;
	int e = errno;  /* the interrupted code may be about to read it */

	(void)uc;
	if (joined_pid > 0) {
		send_to_program(sig, si);
		errno = e;
		return;
	}
	if (sig == SIGWINCH || sig == SIGCONT || (joiner_ignored & (1ull << (sig - 1)))) {
		errno = e;
		return;
	}
	if (sig >= 10)
		msg[n++] = (char)('0' + sig / 10);
	msg[n++] = (char)('0' + sig % 10);
	(void)!send(host_fd, msg, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	signal(sig, SIG_DFL);
	raise(sig);     /* delivered as the handler returns */
	errno = e;
}

/*
 * Ctrl-Z (or kill -TSTP of the joiner): stop the program as the terminal would
 * have (send_to_program), then the joiner, so that the shell sees the job
 * stopped; fg and bg send SIGCONT, which pass_on hands on.  A program that
 * leaves SIGTSTP at its default action also gets SIGSTOP: in an orphaned
 * process group (one it made with setsid) the kernel discards a SIGTSTP that
 * would stop it.  One that catches, ignores or blocks SIGTSTP does not: Ctrl-Z
 * would not stop it exec'd either.
 */
static void stop_both(int sig, siginfo_t *si, void *uc)
{
	int e = errno;  /* the interrupted code may be about to read it */

	(void)uc;
	if (joined_pid > 0) {
		send_to_program(sig, si);
		if (!tstp_handled((pid_t)joined_pid))
			kill((pid_t)joined_pid, SIGSTOP);
	}
	raise(SIGSTOP);
	errno = e;
}

/* PROG as rpal run finds it (hosted_find_in_path), made absolute: the host has another cwd. */
static int resolve(const char *prog, char *out)
{
	char found[PATH_MAX];
	const char *path = hosted_find_in_path(prog, found, sizeof(found));

	if (!path) {
		errno = ENOENT;
		return -1;
	}
	return realpath(path, out) ? 0 : -1;
}

/* Does signal sig's default action end a process without a core dump? */
static bool ends_quietly(int sig)
{
	switch (sig) {
	case SIGHUP: case SIGINT: case SIGKILL: case SIGUSR1: case SIGUSR2: case SIGPIPE: case SIGALRM:
	case SIGTERM: case SIGSTKFLT: case SIGIO: case SIGPWR: case SIGVTALRM: case SIGPROF:
		return true;
	default:
		return sig >= SIGRTMIN && sig <= SIGRTMAX;
	}
}

/* End as the program did, by sig: a shell stops a loop only for a job that the signal ended (its
 * exit status would read 128 + sig all the same). */
static void end_by(int sig)
{
	sigset_t one;

	fflush(NULL);
	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
}

/* The host's sentence, as ps shows an answer: whatever took the host's name may have written it. */
static void print_answer(const char *s)
{
	fputs("rpal join: ", stderr);
	put_shown(stderr, s, strlen(s), SHOW_NL);
	fputc('\n', stderr);
}

int cmd_join(int argc, char **argv)
{
	static const int passed[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT };
	extern char **environ;
	struct join_req rq = { .version = JOIN_VERSION };
	char path[PATH_MAX], cwd[PATH_MAX], reply[HOSTED_ERR_MAX];
	char *buf = NULL;
	size_t len = 0;
	int fd, fds[3] = { 0, 1, 2 }, status, sig, answer_s = JOIN_ANSWER_S;
	sigset_t mask;
	FILE *f;

	bool help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));

	if (argc < 3 || argv[1][0] == '-') {
		if (argc > 1 && argv[1][0] == '-' && !help)
			fprintf(stderr, "rpal join: unknown option %s\n\n", argv[1]);
		fprintf(help ? stdout : stderr,
"usage: rpal join NAME PROGRAM [ARGS...]\n"
"\n"
"Runs PROGRAM inside the host NAME (`rpal host NAME`) as its own process, with\n"
"this shell's standard input, output and error, working directory, environment,\n"
"umask, rlimits, signal mask and ignored signals.  Signals sent to rpal join (Ctrl-C, kill) are\n"
"passed on to PROGRAM, the terminal's to its process group (one that comes before it started\n"
"ends rpal join by that signal, and reaches PROGRAM if it starts after all); Ctrl-Z stops\n"
"PROGRAM, then rpal join.  rpal join exits with PROGRAM's status, ends by signal N where N\n"
"ended PROGRAM without a core dump (128 + N for the others), or exits 2 when it could not be\n"
"started or the host went away.  It waits for the host to start PROGRAM at most\n"
"RPAL_JOIN_TIMEOUT seconds (default %d).\n", JOIN_ANSWER_S);
		return help ? 0 : 2;
	}
	const char *t = getenv("RPAL_JOIN_TIMEOUT");

	if (t) {
		char *end;
		long v = strtol(t, &end, 10);

		if (!*t || *end || v < 1 || v > 86400) {
			fprintf(stderr, "rpal join: RPAL_JOIN_TIMEOUT=%s: seconds, 1 to 86400\n", t);
			return 2;
		}
		answer_s = (int)v;
	}
	if (resolve(argv[2], path) < 0) {
		if (errno == ENOENT && !strchr(argv[2], '/'))
			fprintf(stderr, "rpal join: %s: not found in PATH\n", argv[2]);
		else
			fprintf(stderr, "rpal join: %s: %s\n", argv[2], strerror(errno));
		return 2;
	}
	if (!getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "rpal join: getcwd: %s\n", strerror(errno));
		return 2;
	}
	memcpy(rq.magic, JOIN_MAGIC, 8);
	rq.argc = (uint32_t)(argc - 2);
	for (char **e = environ; *e; e++)
		rq.envc++;
	if (rq.argc > JOIN_MAX_ARGS || rq.envc > JOIN_MAX_ENV) {
		fprintf(stderr, "rpal join: %u %s: a host takes at most %u arguments and %u environment strings\n",
			rq.argc > JOIN_MAX_ARGS ? rq.argc : rq.envc,
			rq.argc > JOIN_MAX_ARGS ? "arguments" : "environment strings", JOIN_MAX_ARGS, JOIN_MAX_ENV);
		return 2;
	}
	rq.umask = (int32_t)umask(022);
	umask((mode_t)rq.umask);
	sigprocmask(SIG_SETMASK, NULL, &mask);
	for (int s = 1; s <= 64; s++) {
		struct sigaction old;

		if (sigismember(&mask, s) == 1)
			rq.sigmask |= 1ull << (s - 1);
		if (sigaction(s, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			rq.ignored |= 1ull << (s - 1);
	}
	for (int r = 0; r < RLIM_NLIMITS && r < 16; r++) {
		struct rlimit rl;

		if (getrlimit((__rlimit_resource_t)r, &rl) == 0) {
			rq.rlimits[rq.nrlimits].resource = r;
			rq.rlimits[rq.nrlimits].cur = rl.rlim_cur;
			rq.rlimits[rq.nrlimits++].max = rl.rlim_max;
		}
	}
	f = open_memstream(&buf, &len);
	if (!f)
		return 2;
	fwrite(&rq, sizeof(rq), 1, f);
	fwrite(cwd, strlen(cwd) + 1, 1, f);
	fwrite(path, strlen(path) + 1, 1, f);
	for (int i = 2; i < argc; i++)
		fwrite(argv[i], strlen(argv[i]) + 1, 1, f);
	for (char **e = environ; *e; e++)
		fwrite(*e, strlen(*e) + 1, 1, f);
	fclose(f);
	if (len > JOIN_MAX) {
		fprintf(stderr, "rpal join: arguments and environment take %zu bytes, more than %u\n", len, JOIN_MAX);
		free(buf);
		return 2;
	}
	fd = host_connect("rpal join", argv[1]);
	if (fd < 0) {
		free(buf);
		return 2;
	}
	{
		char cbuf[CMSG_SPACE(sizeof(fds))];
		struct iovec iov = { buf, len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		int sndbuf = (int)len + 4096;

		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(c), fds, sizeof(fds));
		if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)len) {
			int e = errno;

			/* A host that refuses us says why before it hangs up. */
			if (recv_reply(fd, reply, sizeof(reply)) > 6 && !strncmp(reply, "ERROR ", 6))
				print_answer(reply + 6);
			else
				fprintf(stderr, "rpal join: cannot send the request to host \"%s\": %s\n", argv[1],
					strerror(e));
			free(buf);
			return 2;
		}
	}
	free(buf);
	host_fd = fd;
	joiner_ignored = rq.ignored;
	/* Pass signals on from before the answer (see pass_on). */
	struct sigaction sa = { .sa_sigaction = pass_on, .sa_flags = SA_SIGINFO };
	sigemptyset(&sa.sa_mask);
	for (unsigned i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
		sigaction(passed[i], &sa, NULL);
	if (!(joiner_ignored & (1ull << (SIGTSTP - 1)))) {
		sa.sa_sigaction = stop_both;
		sigaction(SIGTSTP, &sa, NULL);
	}
	/* A host answers once it has loaded the program: in milliseconds, but for library constructors
	 * that take their time and joins ahead of ours (one at a time).  A socket that never answers
	 * is not a host.  The program then runs as long as it likes. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = answer_s }, sizeof(struct timeval));
	errno = 0;
	if (recv_reply(fd, reply, sizeof(reply)) <= 0) {
		if (errno == EAGAIN) {
			/* Started after all, the program would run with no joiner to pass signals on
			 * or wait for its end: the host kills it as it starts (as in pass_on). */
			(void)!send(fd, "SIG 9", 5, MSG_NOSIGNAL | MSG_DONTWAIT);
			fprintf(stderr, "rpal join: host \"%s\" did not answer within %d s (RPAL_JOIN_TIMEOUT: raise it "
				"for a program slow to load); a program it starts after all is killed\n", argv[1],
				answer_s);
		} else {
			fprintf(stderr, "rpal join: host \"%s\" closed the connection without an answer\n", argv[1]);
		}
		return 2;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0 }, sizeof(struct timeval));
	if (strncmp(reply, "STARTED ", 8) != 0) {
		print_answer(strncmp(reply, "ERROR ", 6) ? reply : reply + 6);
		return 2;
	}
	joined_pid = atoi(reply + 8);
	for (;;) {
		ssize_t n = recv_reply(fd, reply, sizeof(reply));

		if (n <= 0) {
			int pid = (int)joined_pid;

			joined_pid = 0; /* reaped by now: its pid may name another process */
			fprintf(stderr, "rpal join: host \"%s\" went away while pid %d ran\n", argv[1], pid);
			return 2;
		}
		int lost = 0, failed = 0;
		unsigned long long addr = 0;

		if (sscanf(reply, "EXIT %d %d %d %d %llu", &status, &sig, &lost, &failed, &addr) >= 2) {
			hosted_print_call_end(stderr, "rpal join: ", path, (int)joined_pid, lost, failed, addr);
			if (ends_quietly(sig))
				end_by(sig);
			return status;
		}
	}
}

/* ------------------------------------------------------------ ps */

int cmd_ps(int argc, char **argv)
{
	static char reply[REPLY_MAX];
	int fd, json = 0;
	ssize_t n;
	const char *name = NULL;

	for (int i = 1; i < argc; i++) {
		bool help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");

		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else {
			if (!help)
				fprintf(stderr, "rpal ps: %s %s\n\n", argv[i][0] == '-' ? "unknown option" : "one NAME only, not also",
					argv[i]);
			fprintf(help ? stdout : stderr,
"usage: rpal ps NAME [--json]\n"
"\n"
"Lists the programs of host NAME: pid, state (loading, with no pid yet;\n"
"running, exited N with its exit status, killed N with the signal, failed), RPAL\n"
"calls into and out of each, system calls handed back to it\n"
"from calls (handoffs), and the CPU time its code ran on callers' threads.\n"
"--json: {\"host\": {\"name\", \"pid\", \"programs_loaded\", \"programs_max\"},\n"
"\"programs\": [{\"pid\", \"argv\" (its first 600 bytes, with a NUL each), \"state\",\n"
"\"exit_status\" (once ended), \"calls_in\", \"calls_out\", \"handoffs\",\n"
"\"callee_cpu_ns\", \"argv_cut\"}]}\n");
			return help ? 0 : 2;
		}
	}
	if (!name) {
		fprintf(stderr, "usage: rpal ps NAME [--json]\n");
		return 2;
	}
	fd = host_connect("rpal ps", name);
	if (fd < 0)
		return 2;
	/* A host answers at once, but for a join's load that it is in the middle of; a socket that
	 * never does is not one. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = PS_ANSWER_S }, sizeof(struct timeval));
	if (send(fd, json ? "PS" : "PST", json ? 2 : 3, MSG_NOSIGNAL) != 2 + !json) {
		fprintf(stderr, "rpal ps: cannot send the request to host \"%s\": %s\n", name, strerror(errno));
		return 2;
	}
	errno = 0;
	n = recv_reply(fd, reply, sizeof(reply));
	if (n <= 0) {
		if (errno == EAGAIN)
			fprintf(stderr, "rpal ps: host \"%s\" did not answer within %d s\n", name, PS_ANSWER_S);
		else
			fprintf(stderr, "rpal ps: host \"%s\" closed the connection without an answer\n", name);
		return 2;
	}
	/* A host bounds its answer; one that fills the buffer is cut, and half a table or JSON
	 * document would be taken for the whole. */
	if ((size_t)n >= sizeof(reply) - 1) {
		fprintf(stderr, "rpal ps: the answer of host \"%s\" is longer than %u bytes: not shown\n", name,
			REPLY_MAX - 2);
		return 2;
	}
	/* Whoever owns the socket wrote it: a host of our uid, or anything of our uid that took its
	 * name.  A host's own answer shows as itself. */
	if (strncmp(reply, "ERROR ", 6) == 0) {
		fputs("rpal ps: ", stderr);
		put_shown(stderr, reply + 6, (size_t)n - 6, 0);
		fputc('\n', stderr);
		return 2;
	}
	put_shown(stdout, reply, (size_t)n, SHOW_NL | (json ? SHOW_U : 0));
	return 0;
}
