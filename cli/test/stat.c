/* SPDX-License-Identifier: MIT */
/*
 * Description: `rpal stat` and `rpal top --batch` against live processes
 * and forged pages.
 *   stat RPAL: a process that sent N messages of S bytes shows exactly
 *     those counts (--json, by pid and by service), and no wait costs; a
 *     server with no client is found by its service, its listener counting
 *     the clients it accepted and refused; one
 *     whose receiver slept for a message shows the costs of a sleep and a
 *     wake-up, and how long after the ring it ran (--json, the table and
 *     --prometheus); a busy pair's counters
 *     grow between two calls a second apart; --prometheus has a HELP and
 *     TYPE line before every metric's samples, and the process's open
 *     connections and start time; a process that died without
 *     rpal_fini() is not listed and its page is removed; garbled pages
 *     (garbage, short, another version, lying counts and strings, a page
 *     that names another slot), held locked as a live owner would, are
 *     skipped with a reason and crash nothing; a runtime directory named
 *     with escape sequences is shown with '?' for them; --dir lists by
 *     pid; connections a full page has no entry for count as open; a pid
 *     whose page is in another runtime directory is not listed, and the
 *     message names that directory; bad arguments fail; a page that claims
 *     a start at INT64_MIN shows an uptime of 0; a page linked under names
 *     with leading zeros (stat.01) is listed once; full pages of entries
 *     that all claim one pair are read in seconds; a page that lists one
 *     connection twice is skipped (--prometheus repeats no series); as
 *     root, a page linked into two /tmp/rpal-* directories is listed once,
 *     and the pages of one pid and slot in two are both listed, with
 *     --prometheus series told apart by their directory; a /tmp/rpal-UID
 *     of another user, writable by anyone, or a link is skipped, and a
 *     page shows its file's owner as its uid; rpal stat PID of a process
 *     that maps a page 30000 times ends soon, and of one whose maps line
 *     is too long for it opens no FIFO its tail names.
 *   stat RPAL top: `rpal top --batch -n 2` shows the busy pair's rates.
 *   stat pair SECONDS: a busy pair for SECONDS (for the tmux test).
 * RPAL_RUNTIME_DIR names the runtime directory (ctest sets it).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rpal.h>
#include "../../src/statpage.h"
#include "minijson.h"
#include "runcmd.h"
#include "check.h"

static char dir[256];


static void die(const char *what, int err)
{
	printf("FAIL: %s: %s\n", what, rpal_strerror(err));
	exit(1);
}

static void *accept_one(void *lfd)
{
	return (void *)(intptr_t)rpal_accept(*(int *)lfd, 0);
}

/* A connection of this process to itself, through service name. */
static void self_pair(const char *name, int *a, int *b)
{
	int lfd = rpal_listen(name, NULL);
	pthread_t t;
	void *r;

	if (lfd < 0)
		die("rpal_listen", lfd);
	pthread_create(&t, NULL, accept_one, &lfd);
	*a = rpal_connect(name, NULL, 0);
	pthread_join(t, &r);
	*b = (int)(intptr_t)r;
	if (*a < 0 || *b < 0)
		die("connect or accept", *a < 0 ? *a : *b);
	rpal_close(lfd);
}

/* A receiver that blocks for one message (it sleeps: nothing comes for a while). */
static void *recv_one(void *fd)
{
	static char buf[64];

	return (void *)(intptr_t)rpal_recv(*(int *)fd, buf, sizeof(buf), 0);
}

/*
 * A child with one self-connection: it sends n messages of size bytes (0:
 * until its parent goes, or secs seconds pass; -1: one message, 50 ms
 * after a thread began to wait for it), writes its pid to the pipe once
 * the n are through, and stays until the parent closes it.
 */
static pid_t child(const char *service, long n, size_t size, double secs, int *ctl)
{
	int to[2], from[2];
	pid_t pid;

	if (pipe(to) || pipe(from))
		exit(1);
	pid = fork();
	if (pid) {
		char c;

		close(to[0]);
		close(from[1]);
		if (read(from[0], &c, 1) != 1) {
			printf("FAIL: the child did not start\n");
			exit(1);
		}
		close(from[0]);
		*ctl = to[1];
		return pid;
	}
	close(to[1]);
	close(from[0]);
	static char buf[4096];
	int a, b;
	uint64_t end = (uint64_t)time(NULL) + (uint64_t)(secs > 0 ? secs : 1e9);
	long i;

	self_pair(service, &a, &b);
	if (n < 0) {
		pthread_t t;
		void *r;

		pthread_create(&t, NULL, recv_one, &b);
		usleep(50000);
		if (rpal_send(a, buf, 32, 0) != 32 || pthread_join(t, &r) || (intptr_t)r != 32)
			_exit(1);
	}
	for (i = 0; i < n; i++) {
		if (rpal_send(a, buf, size, 0) != (ssize_t)size || rpal_recv(b, buf, sizeof(buf), 0) != (ssize_t)size)
			_exit(1);
	}
	/* A busy pair has sent something by the time its parent looks. */
	if (!n && (rpal_send(a, buf, 32, 0) != 32 || rpal_recv(b, buf, sizeof(buf), 0) != 32))
		_exit(1);
	(void)!write(from[1], "r", 1);
	if (n) {
		char c;

		(void)!read(to[0], &c, 1);
		_exit(0);
	}
	fcntl(to[0], F_SETFL, O_NONBLOCK);
	for (i = 0;; i++) {
		char c;

		if (rpal_send(a, buf, 32, 0) != 32 || rpal_recv(b, buf, sizeof(buf), 0) != 32)
			_exit(1);
		if (!(i & 1023) && (read(to[0], &c, 1) != -1 || errno != EAGAIN || (uint64_t)time(NULL) >= end))
			_exit(0);
	}
}

static void child_end(pid_t pid, int ctl)
{
	int st;

	close(ctl);
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child failed (status %#x)", st);
}

/* rpal stat ARGS...: stdout parsed as JSON (NULL and a failure if not). */
static struct jval *stat_json(const char *rpal, const char *arg, struct out *o)
{
	char *argv[] = { (char *)rpal, "stat", "--json", (char *)arg, NULL };
	char err[200];
	struct jval *v;

	if (runcmd(argv, o)) {
		printf("FAIL: cannot run %s\n", rpal);
		exit(1);
	}
	CHECK(o->status == 0, "rpal stat --json %s: status %d\n%s", arg ? arg : "", o->status, o->buf[1]);
	v = json_parse(o->buf[0], err, sizeof(err));
	CHECK(v != NULL, "rpal stat --json: %s\n%s", err, o->buf[0]);
	return v;
}

static double num(const struct jval *o, const char *k)
{
	const struct jval *v = json_get(o, k);

	return v && v->t == J_NUM ? v->num : -1;
}

static const char *str(const struct jval *o, const char *k)
{
	const struct jval *v = json_get(o, k);

	return v && v->t == J_STR ? v->str : "";
}

static const struct jval *proc_of(const struct jval *doc, pid_t pid)
{
	const struct jval *ps = json_get(doc, "processes");
	size_t i;

	for (i = 0; ps && ps->t == J_ARR && i < ps->n; i++)
		if (num(ps->items[i], "pid") == pid)
			return ps->items[i];
	return NULL;
}

static const struct jval *conn_of(const struct jval *proc, const char *role)
{
	const struct jval *cs = proc ? json_get(proc, "connections") : NULL;
	size_t i;

	for (i = 0; cs && cs->t == J_ARR && i < cs->n; i++)
		if (!strcmp(str(cs->items[i], "role"), role))
			return cs->items[i];
	return NULL;
}

static void exact(const char *rpal)
{
	enum { N = 1000, S = 100 };
	char service[64], pidarg[16];
	struct out o;
	struct jval *doc;
	const struct jval *p, *a, *b;
	int ctl;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-exact-%d", (int)getpid());
	pid = child(service, N, S, 0, &ctl);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	printf("stat: pid %d sent %d messages of %d bytes to itself\n", (int)pid, N, S);
	for (int by = 0; by < 2; by++) {
		doc = stat_json(rpal, by ? service : pidarg, &o);
		p = doc ? proc_of(doc, pid) : NULL;
		CHECK(p != NULL, "rpal stat --json %s does not list pid %d\n%s", by ? service : pidarg, (int)pid,
		      o.buf[0]);
		CHECK(json_get(doc, "processes") && json_get(doc, "processes")->n == 1,
		      "rpal stat %s lists other processes too", by ? service : pidarg);
		a = conn_of(p, "connected");
		b = conn_of(p, "accepted");
		CHECK(a && b, "pid %d: no connected and accepted pair\n%s", (int)pid, o.buf[0]);
		if (a && b) {
			CHECK(num(a, "msgs_sent") == N && num(a, "bytes_sent") == N * S, "sent %.0f msgs, %.0f bytes",
			      num(a, "msgs_sent"), num(a, "bytes_sent"));
			CHECK(num(b, "msgs_received") == N && num(b, "bytes_received") == N * S,
			      "received %.0f msgs, %.0f bytes", num(b, "msgs_received"), num(b, "bytes_received"));
			CHECK(num(a, "msgs_received") == 0 && num(b, "msgs_sent") == 0, "counts on the wrong side");
			CHECK(!strcmp(str(a, "service"), service) && !strcmp(str(b, "service"), service),
			      "services %s and %s, want %s", str(a, "service"), str(b, "service"), service);
			CHECK(num(a, "peer_pid") == pid && !strcmp(str(a, "state"), "open"), "peer or state");
			CHECK(num(a, "wakeups_sent") + num(a, "wakeups_avoided") == N,
			      "%.0f wake-ups and %.0f avoided for %d sends", num(a, "wakeups_sent"),
			      num(a, "wakeups_avoided"), N);
		}
		CHECK(num(p, "sleep_cost_ns") == 0 && num(p, "wake_cost_ns") == 0 && num(p, "wake_latency_ns") == 0,
		      "wait costs %.0f and %.0f ns and a wake-up latency of %.0f, where nothing slept",
		      num(p, "sleep_cost_ns"), num(p, "wake_cost_ns"), num(p, "wake_latency_ns"));
		json_free(doc);
		out_free(&o);
	}
	child_end(pid, ctl);
}

/* A pid or service that matches nothing: exit 1, nothing on stdout, and
 * stderr says what was looked for. */
static void unmatched(const char *rpal)
{
	char *by_name[] = { (char *)rpal, "stat", "no-such-service", NULL };
	char *by_pid[] = { (char *)rpal, "stat", "4000000", NULL };
	struct out o;

	char where[400];

	/* It names where it looked: a process of another runtime directory
	 * is not there. */
	snprintf(where, sizeof(where), "no process listens on or is connected to service no-such-service in %s", dir);
	CHECK(!runcmd(by_name, &o) && o.status == 1 && !o.len[0] && strstr(o.buf[1], where) &&
	      strstr(o.buf[1], "--dir"),
	      "rpal stat no-such-service: status %d, stdout '%s', stderr '%s'", o.status, o.buf[0], o.buf[1]);
	out_free(&o);
	/* Given --dir, it does not suggest --dir. */
	char *in_dir[] = { (char *)rpal, "stat", "--dir", (char *)dir, "no-such-service", NULL };
	CHECK(!runcmd(in_dir, &o) && o.status == 1 && strstr(o.buf[1], where) && !strstr(o.buf[1], "--dir"),
	      "rpal stat --dir DIR no-such-service: status %d, stderr '%s'", o.status, o.buf[1]);
	out_free(&o);
	snprintf(where, sizeof(where), "no rpal process has pid 4000000 in %s", dir);
	CHECK(!runcmd(by_pid, &o) && o.status == 1 && !o.len[0] && strstr(o.buf[1], where),
	      "rpal stat 4000000: status %d, stdout '%s', stderr '%s'", o.status, o.buf[0], o.buf[1]);
	out_free(&o);
	printf("stat: a service or pid that matches nothing exits 1 and says so on stderr only\n");

	/* rpal top, a live view, shows such a frame and says where it looked. */
	char *top[] = { (char *)rpal, "top", "--batch", "-n", "1", "no-such-service", NULL };
	snprintf(where, sizeof(where), "(no open connection of service no-such-service in %s", dir);
	CHECK(!runcmd(top, &o) && o.status == 0 && strstr(o.buf[0], where),
	      "rpal top no-such-service: status %d, stdout '%s', stderr '%s'", o.status, o.buf[0], o.buf[1]);
	out_free(&o);
	printf("stat: rpal top's empty frame says what matched nothing, and where it looked\n");

	/* A directory no rpal process ever used (no slots.lock) says so; ours
	 * (used by the checks before) does not. */
	char unused[300];
	snprintf(unused, sizeof(unused), "%s/never-used", dir);
	mkdir(unused, 0700);
	char *in_unused[] = { (char *)rpal, "stat", "--dir", unused, NULL };
	char *in_ours[] = { (char *)rpal, "stat", "--dir", dir, NULL };
	snprintf(where, sizeof(where), "no rpal processes in %s: no slots.lock, so no rpal process ever used it", unused);
	CHECK(!runcmd(in_unused, &o) && o.status == 0 && strstr(o.buf[0], where),
	      "rpal stat --dir NEVER-USED: status %d, stdout '%s'", o.status, o.buf[0]);
	out_free(&o);
	CHECK(!runcmd(in_ours, &o) && o.status == 0 && !strstr(o.buf[0], "no slots.lock"),
	      "rpal stat --dir %s, a directory in use, says it has no slots.lock: '%s'", dir, o.buf[0]);
	out_free(&o);
	rmdir(unused);
	printf("stat: a directory that no rpal process ever used reads as such, not as an idle one\n");
}

/* A peer killed while this process makes no rpal call shows as gone: in
 * the JSON's state, and as rpal_connection_peer_gone 1. */
static void gone(const char *rpal)
{
	char pidarg[16], prom[160];
	int lfd = rpal_init(NULL), fd;
	pid_t pid;

	if (lfd >= 0)
		lfd = rpal_listen("stat-gone", NULL);
	if (lfd < 0)
		die("rpal_listen", lfd);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		rpal_fini();
		if (rpal_init(NULL) < 0 || rpal_connect("stat-gone", NULL, 0) < 0)
			_exit(1);
		pause();
		_exit(0);
	}
	fd = rpal_accept(lfd, 0);
	if (fd < 0)
		die("rpal_accept", fd);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)getpid());
	const char *state = "";
	for (int i = 0; i < 40; i++) {
		struct out o;
		struct jval *doc = stat_json(rpal, pidarg, &o);
		const struct jval *c = doc ? conn_of(proc_of(doc, getpid()), "accepted") : NULL;

		state = c && !strcmp(str(c, "state"), "peer-gone") ? "peer-gone" : "open";
		json_free(doc);
		out_free(&o);
		if (!strcmp(state, "peer-gone"))
			break;
		usleep(50000);
	}
	CHECK(!strcmp(state, "peer-gone"), "rpal stat: the peer died 2 s ago, and its connection still reads %s", state);
	char *argv[] = { (char *)rpal, "stat", "--prometheus", pidarg, NULL };
	struct out o;
	CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --prometheus failed");
	snprintf(prom, sizeof(prom), "rpal_connection_peer_gone{pid=\"%d\",", (int)getpid());
	const char *at = strstr(o.buf[0], prom);
	const char *end = at ? strchr(at, '\n') : NULL;
	CHECK(at && end && end[-1] == '1' && end[-2] == ' ', "--prometheus: no %s... 1 line", prom);
	out_free(&o);
	/* rpal top: its rates are 0 as an idle connection's are; the row
	 * says peer-gone after its last column. */
	char *top[] = { (char *)rpal, "top", "--batch", "-n", "1", "-d", "0.05", pidarg, NULL };
	CHECK(!runcmd(top, &o) && o.status == 0, "rpal top --batch %s failed: %s", pidarg, o.buf[1]);
	CHECK(strstr(o.buf[0], " peer-gone\n") != NULL, "rpal top: no row says peer-gone:\n%s", o.buf[0]);
	out_free(&o);
	printf("stat: a peer killed while we make no call reads peer-gone (JSON, Prometheus, rpal top)\n");
	fflush(stdout);
	rpal_close(fd);
	rpal_close(lfd);
}

static void no_repeated_series(char *text);

/* The listener of this process, found by its service in the JSON. */
static const struct jval *listener_of(const struct jval *doc, const char *service)
{
	const struct jval *ls = json_get(proc_of(doc, getpid()), "listeners");
	size_t i;

	for (i = 0; ls && ls->t == J_ARR && i < ls->n; i++)
		if (!strcmp(str(ls->items[i], "service"), service))
			return ls->items[i];
	return NULL;
}

/* A server is found by its service before its first client and after its
 * last: its listener is listed, with the connections it accepted and the
 * handshakes it refused (JSON, the table, Prometheus); once it stops
 * listening, the service is not found. */
static void listening(const char *rpal)
{
	char service[64], path[400], want[300];
	int lfd, a, b, raw;
	struct out o;
	struct jval *doc;
	const struct jval *l;
	pthread_t t;
	void *r;

	snprintf(service, sizeof(service), "stat-listen-%d", (int)getpid());
	lfd = rpal_listen(service, NULL);
	if (lfd < 0)
		die("rpal_listen", lfd);
	doc = stat_json(rpal, service, &o);
	l = doc ? listener_of(doc, service) : NULL;
	CHECK(l && num(l, "fd") == lfd && num(l, "accepted") == 0 && num(l, "refused") == 0 &&
	      num(proc_of(doc, getpid()), "open_connections") == 0,
	      "rpal stat --json %s, a server with no client yet: no listener of fd %d with 0 accepted and refused, "
	      "or open connections\n%s", service, lfd, o.buf[0]);
	json_free(doc);
	out_free(&o);
	printf("stat: a server with no client yet is found by its service, as a listener\n");

	/* A client that sends garbage is refused; one that speaks is accepted. */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(path, sizeof(path), "%s/%s.sock", dir, service) >= (int)sizeof(sa.sun_path)) {
		printf("FAIL: the socket path %s, which rpal_listen bound, is too long\n", path);
		exit(1);
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	raw = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (raw < 0 || connect(raw, (struct sockaddr *)&sa, sizeof(sa)) < 0 || write(raw, "garbage", 7) != 7) {
		printf("FAIL: a raw client of %s: %s\n", path, strerror(errno));
		exit(1);
	}
	CHECK(rpal_accept(lfd, RPAL_NONBLOCK) < 0, "rpal_accept took a client that sent garbage");
	close(raw);
	pthread_create(&t, NULL, accept_one, &lfd);
	a = rpal_connect(service, NULL, 0);
	pthread_join(t, &r);
	b = (int)(intptr_t)r;
	if (a < 0 || b < 0)
		die("connect or accept", a < 0 ? a : b);
	rpal_close(a);
	rpal_close(b);
	doc = stat_json(rpal, service, &o);
	l = doc ? listener_of(doc, service) : NULL;
	CHECK(l && num(l, "accepted") == 1 && num(l, "refused") == 1,
	      "rpal stat --json %s: the listener does not count 1 accepted and 1 refused\n%s", service, o.buf[0]);
	json_free(doc);
	out_free(&o);
	char *table[] = { (char *)rpal, "stat", service, NULL };
	snprintf(want, sizeof(want), "  listening on %s (fd %d): 1 accepted, 1 refused or failed\n", service, lfd);
	CHECK(!runcmd(table, &o) && o.status == 0 && strstr(o.buf[0], want),
	      "rpal stat %s: status %d, no line '%s' in\n%s", service, o.status, want, o.buf[0]);
	out_free(&o);
	char *prom[] = { (char *)rpal, "stat", "--prometheus", service, NULL };
	snprintf(want, sizeof(want), "\",service=\"%s\"} 1\n", service);
	CHECK(!runcmd(prom, &o) && o.status == 0 && strstr(o.buf[0], "\nrpal_listener_accepted_total{") &&
	      strstr(strstr(o.buf[0], "\nrpal_listener_accepted_total{"), want) &&
	      strstr(o.buf[0], "# TYPE rpal_listener_refused_total counter\n"),
	      "rpal stat --prometheus %s: no listener counters\n%s", service, o.buf[0]);
	no_repeated_series(o.buf[0]);
	out_free(&o);
	printf("stat: the listener counts 1 accepted and 1 refused (JSON, the table, Prometheus)\n");

	rpal_close(lfd);
	CHECK(!runcmd(table, &o) && o.status == 1 && !o.len[0], "rpal stat %s after the listener closed: status %d\n%s",
	      service, o.status, o.buf[0]);
	out_free(&o);
	printf("stat: a service nobody listens on any more is not found\n");
}

/* A service given as a long path shows its last component at both ends,
 * and is selected by that path; a name outside ASCII is selected as typed. */
static void names(const char *rpal)
{
	char path[200], sub[160];
	int a, b, c, d;

	/* Longer than the 63 bytes a page keeps of a name, short enough to bind. */
	snprintf(sub, sizeof(sub), "/tmp/rpal-stat-%d-a-rather-long-directory-name-for-sockets", (int)getpid());
	mkdir(sub, 0700);
	snprintf(path, sizeof(path), "%s/svc.sock", sub);
	self_pair(path, &a, &b);
	self_pair("h\xc3\xa9llo", &c, &d);
	struct out o;
	struct jval *doc = stat_json(rpal, path, &o);
	const struct jval *p = doc ? proc_of(doc, getpid()) : NULL;
	const char *sa = str(conn_of(p, "connected"), "service"), *sb = str(conn_of(p, "accepted"), "service");
	CHECK(!strcmp(sa, "svc.sock") && !strcmp(sb, "svc.sock"),
	      "rpal stat %s: the ends show '%s' and '%s', want svc.sock", path, sa, sb);
	json_free(doc);
	out_free(&o);
	doc = stat_json(rpal, "h\xc3\xa9llo", &o);
	CHECK(doc && conn_of(proc_of(doc, getpid()), "accepted"), "rpal stat h\\xc3\\xa9llo selects nothing");
	json_free(doc);
	out_free(&o);
	printf("stat: a service named by a long path, and one outside ASCII, are shown and selected\n");
	fflush(stdout);
	rpal_close(a);
	rpal_close(b);
	rpal_close(c);
	rpal_close(d);
	/* rpal_close() leaves the name's lock file for its next server. */
	snprintf(path + strlen(path), sizeof(path) - strlen(path), ".lock");
	unlink(path);
	rmdir(sub);
	/* No watcher thread of ours in the children forked next (TSan
	 * cannot fork a process whose threads it still tracks). */
	rpal_fini();
}

/* A sleep and a wake-up are sampled, and their costs shown. */
static void costs(const char *rpal)
{
	char service[64], pidarg[16];
	struct out o;
	struct jval *doc;
	const struct jval *p;
	double sleep_ns, wake_ns, lat_ns;
	int ctl;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-costs-%d", (int)getpid());
	pid = child(service, -1, 0, 0, &ctl);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	doc = stat_json(rpal, pidarg, &o);
	p = doc ? proc_of(doc, pid) : NULL;
	sleep_ns = p ? num(p, "sleep_cost_ns") : -1;
	wake_ns = p ? num(p, "wake_cost_ns") : -1;
	lat_ns = p ? num(p, "wake_latency_ns") : -1;
	printf("stat: a receiver that slept for a message: a sleep costs %.0f ns, a wake-up %.0f ns, "
	       "and it ran %.0f ns after the ring\n", sleep_ns, wake_ns, lat_ns);
	CHECK(sleep_ns > 0 && sleep_ns < 1e6 && wake_ns > 0 && wake_ns < 1e6 && lat_ns > 0 && lat_ns < 1e6,
	      "sleep_cost_ns %.0f, wake_cost_ns %.0f and wake_latency_ns %.0f, want all in (0, 1 ms)\n%s", sleep_ns,
	      wake_ns, lat_ns, o.buf[0]);
	json_free(doc);
	out_free(&o);
	{
		char *argv[] = { (char *)rpal, "stat", pidarg, NULL };

		CHECK(!runcmd(argv, &o) && o.status == 0 && strstr(o.buf[0], "a sleep costs ") &&
		      strstr(o.buf[0], " us of CPU, a wake-up ") && strstr(o.buf[0], " us after its peer rings"),
		      "the table does not show the costs:\n%s", o.buf[0]);
		out_free(&o);
	}
	{
		char *argv[] = { (char *)rpal, "stat", "--prometheus", NULL };
		const char *gauges[] = { "rpal_wait_sleep_cost_ns", "rpal_wait_wake_cost_ns", "rpal_wait_wake_latency_ns" };

		CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --prometheus failed");
		for (unsigned i = 0; i < 3; i++) {
			char want[96];
			const char *at, *end;
			double v = 0;

			snprintf(want, sizeof(want), "%s{pid=\"%d\"", gauges[i], (int)pid);
			at = o.buf[0] ? strstr(o.buf[0], want) : NULL;
			end = at ? strchr(at, '}') : NULL;
			CHECK(end && sscanf(end + 1, "%lf", &v) == 1 && v > 0 && v < 1e6,
			      "--prometheus: %s of pid %d is %.0f, want it in (0, 1 ms)", gauges[i], (int)pid, v);
		}
		out_free(&o);
	}
	child_end(pid, ctl);
}

static void growing(const char *rpal)
{
	char service[64], pidarg[16];
	struct out o;
	struct jval *doc;
	double sent[2] = { 0, 0 };
	int ctl;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-busy-%d", (int)getpid());
	pid = child(service, 0, 0, 60, &ctl);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	for (int k = 0; k < 2; k++) {
		if (k)
			sleep(1);
		doc = stat_json(rpal, NULL, &o);
		sent[k] = doc ? num(conn_of(proc_of(doc, pid), "connected"), "msgs_sent") : -1;
		json_free(doc);
		out_free(&o);
	}
	printf("stat: a busy pair sent %.0f, then %.0f a second later\n", sent[0], sent[1]);
	CHECK(sent[0] > 0 && sent[1] > sent[0], "counters did not grow: %.0f then %.0f", sent[0], sent[1]);

	printf("stat: --prometheus declares every metric before its samples\n");
	{
		char *argv[] = { (char *)rpal, "stat", "--prometheus", NULL }, *line, *save = NULL, typed[128] = "";
		char want[64], open_want[64], start_want[80];
		int samples = 0, mine = 0, open_ok = 0, start_ok = 0;

		CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --prometheus failed");
		snprintf(want, sizeof(want), "rpal_messages_sent_total{pid=\"%d\"", (int)pid);
		snprintf(open_want, sizeof(open_want), "rpal_open_connections{pid=\"%d\"", (int)pid);
		snprintf(start_want, sizeof(start_want), "rpal_process_start_time_seconds{pid=\"%d\"", (int)pid);
		for (line = strtok_r(o.buf[0], "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char name[128];

			if (!strncmp(line, "# TYPE ", 7)) {
				CHECK(sscanf(line, "# TYPE %127s", typed) == 1 && !strncmp(typed, "rpal_", 5),
				      "bad TYPE line: %s", line);
				CHECK(strstr(line, " counter") || strstr(line, " gauge"), "TYPE without a type: %s", line);
				CHECK(!strstr(line, " counter") || strstr(typed, "_total"), "a counter not named _total: %s",
				      line);
				continue;
			}
			if (line[0] == '#')
				continue;
			CHECK(sscanf(line, "%127[^{ ]", name) == 1 && !strcmp(name, typed),
			      "sample of %s after TYPE of %s", line, typed);
			samples++;
			if (!strncmp(line, want, strlen(want)))
				mine += atof(strrchr(line, ' ') + 1) > 0;
			/* Per-process gauges: its open connection, and a start time
			 * in this century. */
			if (!strncmp(line, open_want, strlen(open_want)))
				open_ok += atof(strrchr(line, ' ') + 1) >= 1;
			if (!strncmp(line, start_want, strlen(start_want)))
				start_ok += atof(strrchr(line, ' ') + 1) > 1e9;
		}
		CHECK(samples > 10 && mine == 1, "%d samples, %d of pid %d's messages sent > 0", samples, mine, (int)pid);
		CHECK(open_ok == 1 && start_ok == 1, "pid %d: open_connections >= 1 %d time(s), a start time %d time(s)",
		      (int)pid, open_ok, start_ok);
		out_free(&o);
	}
	child_end(pid, ctl);
}

static void top_batch(const char *rpal)
{
	char service[64], pid_s[16];
	char *argv[] = { (char *)rpal, "top", "--batch", "-n", "2", "-d", "0.3", NULL, NULL };
	struct out o;
	int ctl, frames = 0, rows = 0;
	char *line, *save = NULL;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-top-%d", (int)getpid());
	pid = child(service, 0, 0, 60, &ctl);
	snprintf(pid_s, sizeof(pid_s), "%d", (int)pid);
	argv[7] = pid_s;
	printf("stat: rpal top --batch -n 2 -d 0.3 %s\n", pid_s);
	CHECK(!runcmd(argv, &o) && o.status == 0, "rpal top --batch failed: %s", o.buf[1]);
	for (line = strtok_r(o.buf[0], "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned p, conn, peer;
		char name[64], svc[64], out_s[16], in_s[16];

		if (!strncmp(line, "rpal top - ", 11))
			frames++;
		if (sscanf(line, "%u %63s %u %u %63s %15s %15s", &p, name, &conn, &peer, svc, out_s, in_s) == 7 &&
		    p == (unsigned)pid) {
			rows++;
			/* Both ends are pid's: one sends, the other receives, at a rate. */
			CHECK(!strncmp(svc, service, 16) && (strcmp(out_s, "0") != 0) != (strcmp(in_s, "0") != 0),
			      "row: %s", line);
		}
	}
	CHECK(frames == 2 && rows == 4, "%d frames, %d rows of pid %d (want 2 and 4):\n%s", frames, rows, (int)pid,
	      o.buf[0]);
	out_free(&o);
	child_end(pid, ctl);
}

/* A page as an owner writes it: header, then entries. */
static void page_write(const char *name, const void *buf, size_t len, int *lockfd)
{
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
		printf("FAIL: cannot write %s\n", path);
		exit(1);
	}
	if (lockfd) {
		flock(fd, LOCK_EX);
		*lockfd = fd;
	} else {
		close(fd);
	}
}

static void forged(const char *rpal)
{
	static _Alignas(64) unsigned char buf[sizeof(struct rpal_stat_hdr) + 3 * sizeof(struct rpal_stat_conn)];
	struct rpal_stat_hdr *h = (void *)buf;
	struct rpal_stat_conn *e = (void *)(buf + sizeof(*h));
	int locks[6], nl = 0, ctl, i;
	char path[400], service[64];
	struct out o;
	struct jval *doc;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-forged-%d", (int)getpid());
	pid = child(service, 10, 8, 0, &ctl);

	/* Garbage, and a page too short for a header. */
	for (i = 0; i < (int)sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 37 + 11);
	page_write("stat.4000", buf, sizeof(buf), &locks[nl++]);
	page_write("stat.4001", buf, 10, &locks[nl++]);
	/* A well-formed header that lies: entries it does not have, strings
	 * with no NUL and control bytes, one entry forever being rewritten. */
	memset(buf, 0, sizeof(buf));
	h->magic = RPAL_STAT_MAGIC;
	h->version = RPAL_STAT_VERSION;
	h->hdr_size = sizeof(*h);
	h->entry_size = sizeof(*e);
	h->nr_entries = 0xffffffffu;
	h->pid = 4242;
	h->slot = 4002;
	memset(h->name, '\033', sizeof(h->name));
	for (i = 0; i < 3; i++) {
		e[i].state = RPAL_STAT_OPEN;
		e[i].id = (uint64_t)i + 1;
		memset(e[i].service, i == 0 ? 'x' : 0x7f, sizeof(e[i].service));
		e[i].tx.msgs = 7;
	}
	e[2].seq = 1;
	page_write("stat.4002", buf, sizeof(buf), &locks[nl++]);
	/* Another version; another slot's page under this name. */
	h->version = 99;
	page_write("stat.4003", buf, sizeof(buf), &locks[nl++]);
	h->version = RPAL_STAT_VERSION;
	page_write("stat.4004", buf, sizeof(buf), &locks[nl++]);
	/* A page whose owner is gone: nobody holds its lock. */
	h->slot = 4005;
	page_write("stat.4005", buf, sizeof(buf), NULL);
	/* Not pages at all. */
	page_write("stat.new", buf, 3, NULL);
	page_write("stat.12x", buf, 3, NULL);

	printf("stat: garbled pages are skipped with a reason\n");
	doc = stat_json(rpal, NULL, &o);
	CHECK(doc && proc_of(doc, pid), "the live process is missing beside the garbled pages");
	{
		static const char *const want[][2] = {
			{ "stat.4000", "magic" }, { "stat.4001", "shorter" }, { "stat.4003", "version 99" },
			{ "stat.4004", "names slot 4002" },
		};
		const struct jval *sk = doc ? json_get(doc, "skipped") : NULL;

		for (i = 0; i < 4; i++) {
			bool found = false;

			for (size_t k = 0; sk && sk->t == J_ARR && k < sk->n; k++)
				if (strstr(str(sk->items[k], "path"), want[i][0]) &&
				    strstr(str(sk->items[k], "reason"), want[i][1]))
					found = true;
			CHECK(found, "%s not skipped for its %s", want[i][0], want[i][1]);
			CHECK(strstr(o.buf[1], want[i][0]), "stderr does not name %s", want[i][0]);
		}
	}
	{
		const struct jval *p = doc ? proc_of(doc, 4242) : NULL;
		const struct jval *cs = p ? json_get(p, "connections") : NULL;

		CHECK(p && cs && cs->n == 2, "the lying page: %zu connections listed, want 2 (one is busy)",
		      cs ? cs->n : 0);
		CHECK(p && num(p, "busy_entries") == 1, "busy_entries %.0f, want 1", p ? num(p, "busy_entries") : -1);
		CHECK(p && strspn(str(p, "name"), "?") == 63, "its name is not sanitized: \"%s\"", p ? str(p, "name") : "");
		CHECK(cs && cs->n == 2 && strlen(str(cs->items[0], "service")) == 63 &&
		      strspn(str(cs->items[1], "service"), "?") == 63, "its services are not sanitized");
	}
	json_free(doc);
	out_free(&o);
	snprintf(path, sizeof(path), "%s/stat.4005", dir);
	CHECK(access(path, F_OK) < 0, "the stale page %s is still there", path);

	printf("stat: a file lease on a replaced slots.lock does not hold up the removal of a stale page\n");
	{
		char lock[400], keep[400], fresh[400];
		struct timespec t0, t1;
		int fd;

		/* Anyone of our uid can put a file of their own in its place
		 * (the live processes keep the old one) and lease it. */
		snprintf(lock, sizeof(lock), "%s/slots.lock", dir);
		snprintf(keep, sizeof(keep), "%s/slots.lock.kept", dir);
		snprintf(fresh, sizeof(fresh), "%s/slots.lock.new", dir);
		CHECK(link(lock, keep) == 0, "link %s: %s", lock, strerror(errno));
		fd = open(fresh, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
		CHECK(fd >= 0 && rename(fresh, lock) == 0, "replace %s: %s", lock, strerror(errno));
		signal(SIGIO, SIG_IGN);
		if (fd >= 0 && fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
			h->slot = 4006;
			page_write("stat.4006", buf, sizeof(buf), NULL);
			clock_gettime(CLOCK_MONOTONIC, &t0);
			doc = stat_json(rpal, NULL, &o);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			double took = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
			CHECK(doc && proc_of(doc, pid), "the live process is missing");
			CHECK(took < 10, "rpal stat took %.1f s behind the lease", took);
			printf("stat:   rpal stat took %.2f s\n", took);
			json_free(doc);
			out_free(&o);
			fcntl(fd, F_SETLEASE, F_UNLCK);
		} else {
			printf("stat:   SKIP this case: no lease (%s)\n", strerror(errno));
		}
		if (fd >= 0)
			close(fd);
		CHECK(rename(keep, lock) == 0, "put %s back: %s", lock, strerror(errno));
		signal(SIGIO, SIG_DFL);
	}

	printf("stat: a process that died without rpal_fini() is not listed\n");
	{
		pid_t dead = fork();
		char deadpath[400];

		if (dead == 0) {
			struct rpal_stats st;
			int a, b;

			snprintf(service, sizeof(service), "stat-dead-%d", (int)getpid());
			self_pair(service, &a, &b);
			rpal_stats(&st);
			printf("stat: pid %d dies with its page %s/stat.%u\n", (int)getpid(), st.runtime_dir, st.slot);
			fflush(stdout);
			_exit(0);
		}
		waitpid(dead, NULL, 0);
		/* The kernel may drop a dead process's last reference to a file
		 * (and so its lock) a moment after it can be reaped. */
		for (i = 0; i < 20; i++) {
			doc = stat_json(rpal, NULL, &o);
			if (!doc || !proc_of(doc, dead) || i == 19)
				break;
			json_free(doc);
			out_free(&o);
			usleep(100000);
		}
		CHECK(doc && !proc_of(doc, dead), "dead pid %d is listed", (int)dead);
		CHECK(doc && num(doc, "stale_pages") >= 1, "no stale page counted");
		json_free(doc);
		out_free(&o);
		(void)deadpath;
	}
	child_end(pid, ctl);
	while (nl)
		close(locks[--nl]);

	printf("stat: bad arguments\n");
	{
		char *a1[] = { (char *)rpal, "stat", "--bogus", NULL };
		char *a2[] = { (char *)rpal, "stat", "999999", NULL };
		char *a3[] = { (char *)rpal, "stat", "1", "2", NULL };
		char *a4[] = { (char *)rpal, "top", "-n", "0", NULL };

		CHECK(!runcmd(a1, &o) && o.status == 2 && strstr(o.buf[1], "usage"), "stat --bogus: %d", o.status);
		out_free(&o);
		CHECK(!runcmd(a2, &o) && o.status == 1 && strstr(o.buf[1], "999999"), "stat 999999: %d", o.status);
		out_free(&o);
		CHECK(!runcmd(a3, &o) && o.status == 2, "stat 1 2: %d", o.status);
		out_free(&o);
		CHECK(!runcmd(a4, &o) && o.status == 2 && strstr(o.buf[1], "--iterations"), "top -n 0: %d", o.status);
		out_free(&o);
	}
}

/* Every byte of out is printable ASCII, a newline or a tab. */
/* The pair value of our open entry whose peer is pid, read from our own
 * page as any reader would (0 if none). */
static uint64_t own_pair(unsigned slot, pid_t pid)
{
	static _Alignas(64) unsigned char buf[sizeof(struct rpal_stat_hdr) + 64 * sizeof(struct rpal_stat_conn)];
	const struct rpal_stat_conn *e = (const void *)(buf + sizeof(struct rpal_stat_hdr));
	char path[400];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s%u", dir, RPAL_STAT_PREFIX, slot);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf), 0);
	if (fd >= 0)
		close(fd);
	for (ssize_t i = 0; n > 0 && (i + 1) * (ssize_t)sizeof(*e) + (ssize_t)sizeof(struct rpal_stat_hdr) <= n; i++)
		if (e[i].state == RPAL_STAT_OPEN && e[i].peer_pid == (uint32_t)pid)
			return e[i].pair;
	return 0;
}

/*
 * Messages one end sent and the other has not received show at both ends,
 * in each direction, as the two entries' counters differ, and drain to 0;
 * an entry of another page that claims the same connection leaves the
 * queues unknown rather than wrong.
 */
static void queues(const char *rpal)
{
	enum { IN = 37, OUT = 5 };
	static char buf[64];
	char service[64], pidarg[16], line[200];
	int sync[2], lfd, fd, lock, i;
	struct out o;
	struct jval *doc;
	const struct jval *me, *it;
	pid_t pid;

	snprintf(service, sizeof(service), "stat-queue-%d", (int)getpid());
	lfd = rpal_init(NULL);         /* an earlier check may have */
	if (lfd >= 0 || lfd == -EALREADY)
		lfd = rpal_listen(service, NULL);
	if (lfd < 0 || pipe(sync))
		die("rpal_listen", lfd);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		rpal_fini();
		if (rpal_init(NULL) < 0 || (fd = rpal_connect(service, NULL, 0)) < 0)
			_exit(1);
		for (i = 0; i < IN; i++)
			if (rpal_send(fd, buf, 16, 0) != 16)
				_exit(1);
		(void)!write(sync[1], "s", 1);
		pause();
		_exit(0);
	}
	fd = rpal_accept(lfd, 0);
	if (fd < 0)
		die("rpal_accept", fd);
	for (i = 0; i < OUT; i++)
		if (rpal_send(fd, buf, 16, 0) != 16)
			die("rpal_send", -errno);
	if (read(sync[0], buf, 1) != 1)
		die("the child's sends", -EIO);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)getpid());
	printf("stat: pid %d sent %d messages that we have not read, we sent it %d\n", (int)pid, IN, OUT);
	doc = stat_json(rpal, service, &o);
	me = doc ? conn_of(proc_of(doc, getpid()), "accepted") : NULL;
	it = doc ? conn_of(proc_of(doc, pid), "connected") : NULL;
	CHECK(me && it, "rpal stat %s: not both ends\n%s", service, o.buf[0]);
	CHECK(num(me, "in_queue") == IN && num(me, "out_queue") == OUT,
	      "our end: in_queue %.0f, out_queue %.0f, want %d and %d", num(me, "in_queue"), num(me, "out_queue"), IN,
	      OUT);
	CHECK(num(it, "in_queue") == OUT && num(it, "out_queue") == IN,
	      "its end: in_queue %.0f, out_queue %.0f, want %d and %d", num(it, "in_queue"), num(it, "out_queue"), OUT,
	      IN);
	unsigned slot = me ? (unsigned)num(proc_of(doc, getpid()), "slot") : 0;
	json_free(doc);
	out_free(&o);

	char *table[] = { (char *)rpal, "stat", pidarg, NULL };
	CHECK(!runcmd(table, &o) && o.status == 0, "rpal stat %s failed", pidarg);
	snprintf(line, sizeof(line), " %6d %6d ", IN, OUT);
	CHECK(strstr(o.buf[0], " INQ   OUTQ ") && strstr(o.buf[0], line), "the table has no INQ %d, OUTQ %d:\n%s", IN,
	      OUT, o.buf[0]);
	out_free(&o);
	/* rpal top's INQ: the eighth column of our row. */
	char *top[] = { (char *)rpal, "top", "--batch", "-n", "1", "-d", "0.05", pidarg, NULL };
	char inq[32] = "";
	CHECK(!runcmd(top, &o) && o.status == 0, "rpal top --batch %s failed: %s", pidarg, o.buf[1]);
	snprintf(line, sizeof(line), "\n%7d ", (int)getpid());
	const char *row = strstr(o.buf[0], line);
	CHECK(row && sscanf(row, "%*s %*s %*s %*s %*s %*s %*s %31s", inq) == 1 && !strcmp(inq, "37"),
	      "rpal top: INQ \"%s\", want %d:\n%s", inq, IN, o.buf[0]);
	out_free(&o);
	char *prom[] = { (char *)rpal, "stat", "--prometheus", pidarg, NULL };
	CHECK(!runcmd(prom, &o) && o.status == 0, "rpal stat --prometheus failed");
	snprintf(line, sizeof(line), "rpal_in_queue_messages{pid=\"%d\",", (int)getpid());
	const char *at = strstr(o.buf[0], line), *end = at ? strchr(at, '\n') : NULL;
	CHECK(at && end && end - at > 4 && !strncmp(end - 3, " 37", 3), "--prometheus: no %s... %d line", line, IN);
	out_free(&o);

	for (i = 0; i < IN; i++)
		if (rpal_recv(fd, buf, sizeof(buf), 0) != 16)
			die("rpal_recv", -errno);
	doc = stat_json(rpal, service, &o);
	me = doc ? conn_of(proc_of(doc, getpid()), "accepted") : NULL;
	it = doc ? conn_of(proc_of(doc, pid), "connected") : NULL;
	CHECK(me && it && num(me, "in_queue") == 0 && num(it, "out_queue") == 0,
	      "after we read all: our in_queue %.0f, its out_queue %.0f", me ? num(me, "in_queue") : -2,
	      it ? num(it, "out_queue") : -2);
	json_free(doc);
	out_free(&o);
	printf("stat: both ends show both queues (JSON, table, Prometheus, rpal top), and 0 once read\n");

	/* A page that claims our connection too, naming us as its peer. */
	static _Alignas(64) unsigned char page[sizeof(struct rpal_stat_hdr) + sizeof(struct rpal_stat_conn)];
	struct rpal_stat_hdr *h = (void *)page;
	struct rpal_stat_conn *e = (void *)(page + sizeof(*h));
	uint64_t pair = own_pair(slot, pid);

	CHECK(pair != 0, "our entry for pid %d has no pair value", (int)pid);
	memset(page, 0, sizeof(page));
	h->magic = RPAL_STAT_MAGIC;
	h->version = RPAL_STAT_VERSION;
	h->hdr_size = sizeof(*h);
	h->entry_size = sizeof(*e);
	h->nr_entries = 1;
	h->pid = (uint32_t)pid;
	h->slot = 4010;
	e->state = RPAL_STAT_OPEN;
	e->id = 1;
	e->peer_pid = (uint32_t)getpid();
	e->pair = pair;
	e->tx.msgs = 1000;
	snprintf(e->service, sizeof(e->service), "%s", service);
	page_write("stat.4010", page, sizeof(page), &lock);
	doc = stat_json(rpal, pidarg, &o);
	me = doc ? conn_of(proc_of(doc, getpid()), "accepted") : NULL;
	CHECK(me && num(me, "in_queue") == -1 && num(me, "out_queue") == -1,
	      "a second entry claiming our connection: in_queue %.0f, out_queue %.0f, want null",
	      me ? num(me, "in_queue") : -2, me ? num(me, "out_queue") : -2);
	json_free(doc);
	out_free(&o);
	close(lock);
	char path[400];
	snprintf(path, sizeof(path), "%s/stat.4010", dir);
	unlink(path);
	printf("stat: a forged entry that claims a connection leaves its queues unknown (null)\n");
	fflush(stdout);

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(sync[0]);
	close(sync[1]);
	rpal_close(fd);
	rpal_close(lfd);
}

static bool plain_text(const char *out, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((out[i] < 0x20 || out[i] > 0x7e) && out[i] != '\n' && out[i] != '\t')
			return false;
	return true;
}

/*
 * A runtime directory whose name holds bytes a terminal acts on and bytes
 * that are not UTF-8 (anyone may make such a directory under /tmp, where
 * root's rpal stat looks): its path is shown with '?' for them, on stderr
 * (a page skipped in it), in the table and in the JSON, which stays valid.
 */
static void odd_dir(const char *rpal)
{
	static _Alignas(64) unsigned char buf[sizeof(struct rpal_stat_hdr) + sizeof(struct rpal_stat_conn)];
	static const char tail[] = "odd-\033]0;title\007\033[2J\t\xff", shown[] = "odd-?]0;title??[2J??";
	struct rpal_stat_hdr *h = (void *)buf;
	char odd[300], want[300], path[2][400];
	int fd[2];

	printf("stat: a runtime directory named with escape sequences and a byte outside UTF-8\n");
	snprintf(odd, sizeof(odd), "%s/%s", dir, tail);
	snprintf(want, sizeof(want), "%s/%s", dir, shown);
	mkdir(odd, 0700);
	/* A page that fails its checks, and a live one, each locked as its
	 * owner would hold it. */
	memset(buf, 0xee, sizeof(buf));
	memset(buf, 0, sizeof(*h));
	for (int i = 0; i < 2; i++) {
		if (i) {
			memset(buf, 0, sizeof(buf));
			h->magic = RPAL_STAT_MAGIC;
			h->version = RPAL_STAT_VERSION;
			h->hdr_size = sizeof(*h);
			h->entry_size = sizeof(struct rpal_stat_conn);
			h->pid = 4243;
			h->slot = 1;
			snprintf(h->name, sizeof(h->name), "odd");
		}
		snprintf(path[i], sizeof(path[i]), "%s/stat.%d", odd, i);
		fd[i] = open(path[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd[i] < 0 || write(fd[i], buf, sizeof(buf)) != (ssize_t)sizeof(buf) || flock(fd[i], LOCK_EX)) {
			printf("FAIL: cannot write %s\n", path[i]);
			exit(1);
		}
	}
	for (int json = 0; json < 2; json++) {
		char *argv[] = { (char *)rpal, "stat", "--dir", odd, json ? "--json" : NULL, NULL };
		struct out o;

		CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --dir ODD%s: status %d", json ? " --json" : "",
		      o.status);
		CHECK(plain_text(o.buf[0], o.len[0]) && plain_text(o.buf[1], o.len[1]),
		      "rpal stat --dir ODD%s writes bytes a terminal acts on:\n%s%s", json ? " --json" : "", o.buf[0],
		      o.buf[1]);
		CHECK(strstr(o.buf[1], want) != NULL, "stderr does not name the skipped page in %s:\n%s", want, o.buf[1]);
		if (json) {
			char err[200];
			struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
			const struct jval *p = doc ? proc_of(doc, 4243) : NULL;

			CHECK(doc != NULL, "rpal stat --dir ODD --json: %s\n%s", err, o.buf[0]);
			CHECK(p && !strcmp(str(p, "runtime_dir"), want), "runtime_dir \"%s\", want \"%s\"",
			      p ? str(p, "runtime_dir") : "(no process)", want);
			json_free(doc);
		}
		out_free(&o);
	}
	for (int i = 0; i < 2; i++) {
		close(fd[i]);
		unlink(path[i]);
	}
	rmdir(odd);
}

/* A well-formed page of pid in dir, held locked as its owner would: its
 * descriptor. */
static int live_page(const char *in, unsigned slot, uint32_t pid, uint32_t nr_open, uint32_t overflow)
{
	static _Alignas(64) struct rpal_stat_hdr h;
	char path[400];
	int fd;

	memset(&h, 0, sizeof(h));
	h.magic = RPAL_STAT_MAGIC;
	h.version = RPAL_STAT_VERSION;
	h.hdr_size = sizeof(h);
	h.entry_size = sizeof(struct rpal_stat_conn);
	h.pid = pid;
	h.slot = slot;
	h.nr_open = nr_open;
	h.overflow = overflow;
	snprintf(h.name, sizeof(h.name), "forged");
	snprintf(path, sizeof(path), "%s/stat.%u", in, slot);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h) || flock(fd, LOCK_EX)) {
		printf("FAIL: cannot write %s\n", path);
		exit(1);
	}
	return fd;
}

/* rpal stat --dir lists processes by pid, as rpal stat does. */
static void dir_order(const char *rpal)
{
	enum { N = 8 };
	char sub[300], path[400];
	int fd[N];
	struct out o;

	printf("stat: --dir lists processes by pid\n");
	snprintf(sub, sizeof(sub), "%s/order", dir);
	mkdir(sub, 0700);
	for (int i = 0; i < N; i++)
		fd[i] = live_page(sub, (unsigned)i + 1, 4300 + (uint32_t)(i * 7 % N), 0, 0);
	char *argv[] = { (char *)rpal, "stat", "--json", "--dir", sub, NULL };
	char err[200];
	CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --json --dir %s: status %d", sub, o.status);
	struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
	const struct jval *ps = doc ? json_get(doc, "processes") : NULL;
	bool sorted = ps && ps->t == J_ARR && ps->n == N;
	for (size_t i = 1; sorted && i < ps->n; i++)
		sorted = num(ps->items[i - 1], "pid") < num(ps->items[i], "pid");
	CHECK(sorted, "rpal stat --json --dir: %zu processes, want %d by pid:\n%s", ps ? ps->n : 0, N, o.buf[0]);
	json_free(doc);
	out_free(&o);
	for (int i = 0; i < N; i++) {
		close(fd[i]);
		snprintf(path, sizeof(path), "%s/stat.%d", sub, i + 1);
		unlink(path);
	}
	rmdir(sub);
}

/*
 * A process whose page is full: 2 open connections with an entry, 3
 * without.  It has 5 open connections, 3 of them unlisted, in the table,
 * the JSON and Prometheus.
 */
static void unlisted(const char *rpal)
{
	char sub[300], path[400], want[400];
	struct out o;
	char err[200];

	printf("stat: a process with connections its page has no room for counts them as open\n");
	snprintf(sub, sizeof(sub), "%s/full", dir);
	mkdir(sub, 0700);
	int fd = live_page(sub, 1, 4400, 2, 3);
	char *json[] = { (char *)rpal, "stat", "--json", "--dir", sub, NULL };
	CHECK(!runcmd(json, &o) && o.status == 0, "rpal stat --json --dir %s: status %d", sub, o.status);
	struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
	const struct jval *p = doc ? proc_of(doc, 4400) : NULL;
	CHECK(p && num(p, "open_connections") == 5 && num(p, "unlisted_connections") == 3,
	      "open_connections %.0f, unlisted_connections %.0f, want 5 and 3", p ? num(p, "open_connections") : -1,
	      p ? num(p, "unlisted_connections") : -1);
	json_free(doc);
	out_free(&o);
	char *table[] = { (char *)rpal, "stat", "--dir", sub, NULL };
	CHECK(!runcmd(table, &o) && o.status == 0 && strstr(o.buf[0], "5 connections (some not listed: page full)"),
	      "the table does not count 5 connections:\n%s", o.buf[0]);
	out_free(&o);
	char *prom[] = { (char *)rpal, "stat", "--prometheus", "--dir", sub, NULL };
	snprintf(want, sizeof(want), "rpal_open_connections{pid=\"4400\",slot=\"1\",dir=\"%s\",name=\"forged\"} 5\n",
		 sub);
	CHECK(!runcmd(prom, &o) && o.status == 0 && strstr(o.buf[0], want), "--prometheus has no %s", want);
	out_free(&o);
	close(fd);
	snprintf(path, sizeof(path), "%s/stat.1", sub);
	unlink(path);
	rmdir(sub);
}

/* A page of n entries at <in>/<name>, with the header of live_page()'s
 * pid and slot, held locked as its owner would: its descriptor.  *h and
 * e[] may be changed first by the caller through the pointers returned. */
struct forged_page {
	struct rpal_stat_hdr *h;
	struct rpal_stat_conn *e;
	size_t len;
};

static struct forged_page forge(uint32_t pid, unsigned slot, unsigned n)
{
	struct forged_page f;

	f.len = sizeof(*f.h) + (size_t)n * sizeof(*f.e);
	f.h = aligned_alloc(64, f.len);
	if (!f.h) {
		printf("FAIL: out of memory\n");
		exit(1);
	}
	memset(f.h, 0, f.len);
	f.e = (void *)(f.h + 1);
	f.h->magic = RPAL_STAT_MAGIC;
	f.h->version = RPAL_STAT_VERSION;
	f.h->hdr_size = sizeof(*f.h);
	f.h->entry_size = sizeof(*f.e);
	f.h->nr_entries = n;
	f.h->pid = pid;
	f.h->slot = slot;
	snprintf(f.h->name, sizeof(f.h->name), "forged");
	for (unsigned i = 0; i < n; i++) {
		f.e[i].state = RPAL_STAT_OPEN;
		f.e[i].id = i + 1;
		f.e[i].peer_pid = pid;
		snprintf(f.e[i].service, sizeof(f.e[i].service), "forged");
	}
	return f;
}

static int forge_write(const char *in, const char *name, const struct forged_page *f)
{
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", in, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, f->h, f->len) != (ssize_t)f->len || flock(fd, LOCK_EX)) {
		printf("FAIL: cannot write %s\n", path);
		exit(1);
	}
	return fd;
}

/* rm -r of a directory of forged pages (no subdirectories). */
static void forge_clean(const char *in)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", in);
	(void)!system(cmd);
}

/* A page whose start lies before the epoch by as much as an i64 goes:
 * the table shows no uptime rather than one computed by overflowing. */
static void start_before_epoch(const char *rpal)
{
	char sub[300];
	struct out o;

	printf("stat: a page started at INT64_MIN shows an uptime of 0\n");
	snprintf(sub, sizeof(sub), "%s/epoch", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4450, 1, 0);
	f.h->started = INT64_MIN;
	int fd = forge_write(sub, "stat.1", &f);
	char *argv[] = { (char *)rpal, "stat", "--dir", sub, NULL };
	CHECK(!runcmd(argv, &o) && o.status == 0 && strstr(o.buf[0], "pid 4450  forged  slot 1  0 connections  up 0:00:00\n"),
	      "rpal stat --dir EPOCH: status %d, want uptime 0:00:00:\n%s%s", o.status, o.buf[0], o.buf[1]);
	out_free(&o);
	close(fd);
	free(f.h);
	forge_clean(sub);
}

/* One page linked under names of its slot with leading zeros: read once,
 * under its own name; the others are not page names. */
static void zero_names(const char *rpal)
{
	static const char *const alias[] = { "stat.01", "stat.001", "stat.0000000001" };
	char sub[300], from[400], to[400], err[200];
	struct out o;

	printf("stat: a page linked as stat.01, stat.001... is listed once\n");
	snprintf(sub, sizeof(sub), "%s/zeros", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4460, 1, 1);
	int fd = forge_write(sub, "stat.1", &f);
	snprintf(from, sizeof(from), "%s/stat.1", sub);
	for (unsigned i = 0; i < sizeof(alias) / sizeof(alias[0]); i++) {
		snprintf(to, sizeof(to), "%s/%s", sub, alias[i]);
		CHECK(link(from, to) == 0, "link %s: %s", to, strerror(errno));
	}
	char *argv[] = { (char *)rpal, "stat", "--json", "--dir", sub, NULL };
	CHECK(!runcmd(argv, &o) && o.status == 0, "rpal stat --json --dir ZEROS: status %d", o.status);
	struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
	const struct jval *ps = doc ? json_get(doc, "processes") : NULL;
	CHECK(ps && ps->t == J_ARR && ps->n == 1, "%zu processes listed, want 1:\n%s", ps ? ps->n : 0, o.buf[0]);
	json_free(doc);
	out_free(&o);
	close(fd);
	free(f.h);
	forge_clean(sub);
}

/* Full pages whose every entry claims one pair, naming its own process as
 * the peer: every end is a candidate for every other.  rpal stat reads
 * them in a time that grows with the entries, not their square. */
static void one_pair(const char *rpal)
{
	enum { PAGES = 8 };
	char sub[300], name[32];
	int fd[PAGES];
	struct timespec t0, t1;
	struct out o;

	printf("stat: %d full pages whose %u entries all claim one pair are read within 30 s\n", PAGES,
	       PAGES * RPAL_STAT_MAX_CONNS);
	snprintf(sub, sizeof(sub), "%s/one-pair", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4470, 0, RPAL_STAT_MAX_CONNS);
	for (unsigned i = 0; i < RPAL_STAT_MAX_CONNS; i++)
		f.e[i].pair = 0x7000;
	for (int i = 0; i < PAGES; i++) {
		f.h->slot = (uint32_t)i + 1;
		snprintf(name, sizeof(name), "stat.%d", i + 1);
		fd[i] = forge_write(sub, name, &f);
	}
	/* A service nobody has: the pairing is done, and nothing printed. */
	char *argv[] = { "/usr/bin/env", "timeout", "30", (char *)rpal, "stat", "--dir", sub, "no-such-service", NULL };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(!runcmd(argv, &o) && o.status == 1, "rpal stat --dir ONE-PAIR no-such-service: status %d (124: it ran 30 s)",
	      o.status);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("stat:   it took %.2f s\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	out_free(&o);
	for (int i = 0; i < PAGES; i++)
		close(fd[i]);
	free(f.h);
	forge_clean(sub);
}

static int line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prometheus text (cut up in place) has samples, and none repeats the
 * series (name and labels) of another. */
static void no_repeated_series(char *text)
{
	size_t dup = 0, cap = 1, n = 0;
	char *line, *save = NULL;

	for (const char *t = text; *t; t++)
		cap += *t == '\n';
	char **lines = malloc(cap * sizeof(*lines));
	if (!lines)
		die("malloc", -ENOMEM);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (line[0] != '#')
			lines[n++] = line;
	qsort(lines, n, sizeof(*lines), line_cmp);
	for (size_t i = 1; i < n; i++) {
		char *a = lines[i - 1], *b = lines[i];
		size_t la = strrchr(a, ' ') - a, lb = strrchr(b, ' ') - b;

		dup += la == lb && !strncmp(a, b, la);
	}
	free(lines);
	CHECK(n > 0 && dup == 0, "--prometheus: %zu of %zu samples repeat a series", dup, n);
}

/* A page that lists one connection id in two entries is skipped with a
 * reason, and --prometheus gives no series twice. */
static void twice(const char *rpal)
{
	char sub[300], err[200];
	struct out o;

	printf("stat: a page that lists a connection twice, or a listener under a connection's id, is skipped; "
	       "--prometheus repeats no series\n");
	snprintf(sub, sizeof(sub), "%s/twice", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4480, 1, 3);
	f.e[2].id = 2;
	int fd = forge_write(sub, "stat.1", &f);
	struct forged_page g = forge(4481, 2, 2);
	int fd2 = forge_write(sub, "stat.2", &g);
	struct forged_page h = forge(4482, 3, 2);
	h.e[1].state = RPAL_STAT_LISTEN;
	h.e[1].id = 1;
	int fd3 = forge_write(sub, "stat.3", &h);

	char *json[] = { (char *)rpal, "stat", "--json", "--dir", sub, NULL };
	CHECK(!runcmd(json, &o) && o.status == 0, "rpal stat --json --dir TWICE: status %d", o.status);
	struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
	const struct jval *sk = doc ? json_get(doc, "skipped") : NULL;
	CHECK(doc && !proc_of(doc, 4480) && !proc_of(doc, 4482) && proc_of(doc, 4481),
	      "a lying page is listed, or the honest one not:\n%s", o.buf[0]);
	CHECK(sk && sk->t == J_ARR && sk->n == 2 && strstr(o.buf[0], "listener 2 in two entries") &&
	      strstr(o.buf[0], "listener 1 in two entries"),
	      "the lying pages are not skipped for their repeated ids:\n%s", o.buf[0]);
	json_free(doc);
	out_free(&o);

	char *prom[] = { (char *)rpal, "stat", "--prometheus", "--dir", sub, NULL };
	CHECK(!runcmd(prom, &o) && o.status == 0, "rpal stat --prometheus --dir TWICE: status %d", o.status);
	no_repeated_series(o.buf[0]);
	out_free(&o);
	close(fd);
	close(fd2);
	close(fd3);
	free(f.h);
	free(g.h);
	free(h.h);
	forge_clean(sub);
}

/* A page of 20 listeners shows 16 and counts the rest; an entry of a
 * state that readers do not know is passed over. */
static void many_listeners(const char *rpal)
{
	char sub[300], err[200];
	struct out o;

	snprintf(sub, sizeof(sub), "%s/listeners", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4490, 1, 22);
	for (unsigned i = 0; i < 21; i++) {
		f.e[i].state = i < 20 ? RPAL_STAT_LISTEN : 7;
		f.e[i].rx.msgs = i;
	}
	snprintf(f.e[19].service, sizeof(f.e[19].service), "last-listener");
	int fd = forge_write(sub, "stat.1", &f);
	char *json[] = { (char *)rpal, "stat", "--json", "--dir", sub, NULL };
	CHECK(!runcmd(json, &o) && o.status == 0, "rpal stat --json --dir LISTENERS: status %d", o.status);
	struct jval *doc = json_parse(o.buf[0], err, sizeof(err));
	const struct jval *p = doc ? proc_of(doc, 4490) : NULL;
	const struct jval *ls = p ? json_get(p, "listeners") : NULL, *cs = p ? json_get(p, "connections") : NULL;
	CHECK(ls && ls->t == J_ARR && ls->n == 16 && num(p, "unlisted_listeners") == 4 && cs &&
	      cs->t == J_ARR && cs->n == 1 && num(ls->items[3], "accepted") == 3,
	      "a page of 20 listeners, an entry of state 7 and a connection:\n%s", o.buf[0]);
	json_free(doc);
	out_free(&o);
	char *table[] = { (char *)rpal, "stat", "--dir", sub, NULL };
	CHECK(!runcmd(table, &o) && o.status == 0 && strstr(o.buf[0], "  listening on 4 more services"),
	      "the table does not count the listeners it leaves out:\n%s", o.buf[0]);
	out_free(&o);
	/* One the outputs leave out is still found by its service. */
	char *named[] = { (char *)rpal, "stat", "--dir", sub, "last-listener", NULL };
	CHECK(!runcmd(named, &o) && o.status == 0 && strstr(o.buf[0], "listening on last-listener (fd ") &&
	      strstr(o.buf[0], ": 19 accepted") && !strstr(o.buf[0], "more services"),
	      "rpal stat SERVICE does not find the 20th listener (status %d):\n%s%s", o.status, o.buf[0], o.buf[1]);
	out_free(&o);
	printf("stat: a page of 20 listeners shows 16 and counts 4 more, and the 20th is found by its service; "
	       "an entry of an unknown state is passed over\n");
	close(fd);
	free(f.h);
	forge_clean(sub);
}

/* The default runtime directory of a uid no account has, for case tag
 * (0..3) of this test, a or b: /tmp/rpal-UID, where root looks. */
static unsigned fake_uid(int tag, int b)
{
	return 4000000000u + (unsigned)(getpid() % 10000000) * 8 + (unsigned)tag * 2 + (unsigned)b;
}

/* Two directories root reads as it reads every user's (/tmp/rpal-UID),
 * for case tag: 0 when the caller is not root, and the case is skipped. */
static int root_dirs(const char *what, int tag, char *a, char *b, size_t len)
{
	printf("stat: %s\n", what);
	if (geteuid() != 0) {
		printf("stat:   SKIP this case: only root reads every /tmp/rpal-*\n");
		return 0;
	}
	snprintf(a, len, "/tmp/rpal-%u", fake_uid(tag, 0));
	snprintf(b, len, "/tmp/rpal-%u", fake_uid(tag, 1));
	mkdir(a, 0700);
	mkdir(b, 0700);
	return 1;
}

/* How many processes of pid rpal stat --json lists, of all it reads. */
static int listed_times(const char *rpal, unsigned pid)
{
	struct out o;
	int listed = 0;
	struct jval *doc = stat_json(rpal, NULL, &o);
	const struct jval *ps = doc ? json_get(doc, "processes") : NULL;

	for (size_t i = 0; ps && ps->t == J_ARR && i < ps->n; i++)
		listed += num(ps->items[i], "pid") == pid;
	json_free(doc);
	out_free(&o);
	return listed;
}

/* Root reads every /tmp/rpal-*, which anyone can make: one page linked
 * into two of them is read and listed once. */
static void linked_dirs(const char *rpal)
{
	char a[300], b[300], from[400], to[400];
	int listed;

	if (!root_dirs("a page linked into two directories root reads is listed once", 0, a, b, sizeof(a)))
		return;
	struct forged_page f = forge(4490, 7, 1);
	int fd = forge_write(a, "stat.7", &f);
	snprintf(from, sizeof(from), "%s/stat.7", a);
	snprintf(to, sizeof(to), "%s/stat.7", b);
	CHECK(link(from, to) == 0, "link %s: %s", to, strerror(errno));
	listed = listed_times(rpal, 4490);
	CHECK(listed == 1, "pid 4490 listed %d times, want once", listed);
	close(fd);
	free(f.h);
	forge_clean(a);
	forge_clean(b);
}

/* Root reads every /tmp/rpal-*: processes of other PID namespaces (containers
 * sharing the host's /tmp) can have the same pid and slot in two of them.
 * Both are listed, and --prometheus tells their series apart. */
static void same_pid_two_dirs(const char *rpal)
{
	char a[300], b[300], want[400];
	struct out o;
	int listed;

	if (!root_dirs("one pid and slot in two directories root reads: both listed, no series repeated", 1, a, b,
		       sizeof(a)))
		return;
	struct forged_page f = forge(4491, 7, 2);
	int fd = forge_write(a, "stat.7", &f);
	struct forged_page g = forge(4491, 7, 2);
	int fd2 = forge_write(b, "stat.7", &g);
	listed = listed_times(rpal, 4491);
	CHECK(listed == 2, "pid 4491 listed %d times, want twice", listed);

	char *prom[] = { (char *)rpal, "stat", "--prometheus", NULL };
	CHECK(!runcmd(prom, &o) && o.status == 0, "rpal stat --prometheus: status %d", o.status);
	snprintf(want, sizeof(want), "rpal_open_connections{pid=\"4491\",slot=\"7\",dir=\"%s\",", b);
	CHECK(strstr(o.buf[0], want), "--prometheus has no %s", want);
	no_repeated_series(o.buf[0]);
	out_free(&o);
	close(fd);
	close(fd2);
	free(f.h);
	free(g.h);
	forge_clean(a);
	forge_clean(b);
}

/* Root reads /tmp/rpal-UID only as rpal_init() of UID would use it: anyone
 * may make it first.  One owned by another user, one anyone may write and
 * a link to a directory are skipped, saying why, and their pages not
 * listed; a page shows the uid that owns its file, not the one it claims. */
static void foreign_dirs(const char *rpal)
{
	char a[300], b[300], c[300], target[300], page[400], want[400];
	struct out o;

	if (!root_dirs("a /tmp/rpal-UID of another user, writable by anyone, or a link is skipped", 2, a, b,
		       sizeof(a)))
		return;
	snprintf(c, sizeof(c), "/tmp/rpal-%u", fake_uid(3, 0));
	snprintf(target, sizeof(target), "%s/linked", dir);
	mkdir(target, 0700);
	CHECK(chown(a, 65534, 65534) == 0 && chmod(b, 0777) == 0 && symlink(target, c) == 0,
	      "set up %s, %s and %s: %s", a, b, c, strerror(errno));
	struct forged_page f = forge(4492, 5, 1), g = forge(4493, 5, 1), h = forge(4494, 5, 1);
	int fa = forge_write(a, "stat.5", &f), fb = forge_write(b, "stat.5", &g), fc = forge_write(target, "stat.5", &h);

	CHECK(listed_times(rpal, 4492) + listed_times(rpal, 4493) + listed_times(rpal, 4494) == 0,
	      "a page of a refused directory is listed");
	char *argv[] = { (char *)rpal, "stat", NULL };
	CHECK(!runcmd(argv, &o), "rpal stat");
	snprintf(want, sizeof(want), "skipped %s: owned by uid 65534", a);
	CHECK(strstr(o.buf[1], want), "stderr does not say %s:\n%s", want, o.buf[1]);
	snprintf(want, sizeof(want), "skipped %s: owned by uid 0, mode 0777", b);
	CHECK(strstr(o.buf[1], want), "stderr does not say %s:\n%s", want, o.buf[1]);
	snprintf(want, sizeof(want), "skipped %s: cannot open the directory", c);
	CHECK(strstr(o.buf[1], want), "stderr does not say %s:\n%s", want, o.buf[1]);
	out_free(&o);

	printf("stat: a page claims uid 0, its file is uid 65534's: listed as 65534's\n");
	CHECK(chown(a, 0, 0) == 0, "chown %s", a);
	snprintf(page, sizeof(page), "%s/stat.5", a);
	CHECK(fchown(fa, 65534, 65534) == 0, "chown %s", page);
	struct jval *doc = stat_json(rpal, "4492", &o);
	const struct jval *pr = doc ? proc_of(doc, 4492) : NULL;
	CHECK(pr && num(pr, "uid") == 65534, "pid 4492: uid %.0f, want 65534", pr ? num(pr, "uid") : -1);
	json_free(doc);
	out_free(&o);
	close(fa);
	close(fb);
	close(fc);
	free(f.h);
	free(g.h);
	free(h.h);
	unlink(c);
	forge_clean(a);
	forge_clean(b);
	forge_clean(target);
}

/* A process that maps a full page (of another pid) tens of thousands of
 * times: rpal stat of its pid, which looks through its mappings for a
 * page of its own, says it has none within seconds. */
static void many_maps(const char *rpal)
{
	enum { MAPS = 30000 };
	char sub[300], pidarg[16], want[64];
	int sync[2];
	struct out o;

	printf("stat: rpal stat PID of a process that maps a full page %d times ends within 15 s\n", MAPS);
	snprintf(sub, sizeof(sub), "%s/many-maps", dir);
	mkdir(sub, 0700);
	struct forged_page f = forge(4495, 1, RPAL_STAT_MAX_CONNS);
	int fd = forge_write(sub, "stat.1", &f);
	free(f.h);
	if (pipe(sync)) {
		printf("FAIL: pipe: %s\n", strerror(errno));
		exit(1);
	}
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < MAPS; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
				_exit(1);
		(void)!write(sync[1], "m", 1);
		pause();
		_exit(0);
	}
	close(sync[1]);
	char c;
	CHECK(read(sync[0], &c, 1) == 1, "the child could not map the page %d times", MAPS);
	close(sync[0]);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	snprintf(want, sizeof(want), "no rpal process has pid %d", (int)pid);
	char *argv[] = { "/usr/bin/env", "timeout", "15", (char *)rpal, "stat", pidarg, NULL };
	CHECK(!runcmd(argv, &o) && o.status == 1 && strstr(o.buf[1], want),
	      "rpal stat %s: status %d (124: it ran 15 s), stderr '%s'", pidarg, o.status, o.buf[1]);
	out_free(&o);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(fd);
	forge_clean(sub);
}

/* A process whose runtime directory is not ours: rpal stat PID does not
 * list it, and says which directory to name with --dir. */
static void elsewhere(const char *rpal)
{
	char other[300], pidarg[16], want[400];
	struct out o;
	int ctl;
	pid_t pid;

	printf("stat: a pid not found names the runtime directory where its page is\n");
	snprintf(other, sizeof(other), "%s/elsewhere", dir);
	mkdir(other, 0700);
	setenv("RPAL_RUNTIME_DIR", other, 1);
	pid = child("stat-elsewhere", 1, 8, 0, &ctl);
	setenv("RPAL_RUNTIME_DIR", dir, 1);
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	char *argv[] = { (char *)rpal, "stat", pidarg, NULL };
	snprintf(want, sizeof(want), "--dir names:\n  %s\n", other);
	CHECK(!runcmd(argv, &o) && o.status == 1 && strstr(o.buf[1], want),
	      "rpal stat %s: status %d, stderr does not say %s:\n%s", pidarg, o.status, want, o.buf[1]);
	out_free(&o);
	child_end(pid, ctl);
}

/* Map a page of our own at deep/A.../B.../<suffix's components>; the
 * offset in our maps line where suffix starts, or -1. */
static long map_deep(const char *deep, int pad, const char *suffix, void **m)
{
	char comp[256], line[8192], *copy = strdup(suffix), *save = NULL;
	int fd, nfd, ok = copy != NULL;
	long at = -1;
	FILE *f;

	snprintf(line, sizeof(line), "rm -rf '%s'", deep);
	(void)!system(line);
	mkdir(deep, 0700);
	fd = open(deep, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; ok && i < 17; i++) {
		memset(comp, i < 16 ? 'A' : 'B', i < 16 ? 250 : (size_t)pad);
		comp[i < 16 ? 250 : pad] = '\0';
		ok = mkdirat(fd, comp, 0700) == 0 && (nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0;
		close(fd);
		fd = ok ? nfd : -1;
	}
	/* The suffix's directories, then its file: a page of our pid. */
	for (char *c = strtok_r(copy, "/", &save), *next; ok && c; c = next) {
		next = strtok_r(NULL, "/", &save);
		if (!next) {
			struct forged_page pg = forge((uint32_t)getpid(), 0, 1);

			nfd = openat(fd, c, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
			ok = nfd >= 0 && write(nfd, pg.h, pg.len) == (ssize_t)pg.len &&
			     (*m = mmap(NULL, pg.len, PROT_READ, MAP_SHARED, nfd, 0)) != MAP_FAILED;
			free(pg.h);
		} else {
			ok = mkdirat(fd, c, 0700) == 0 && (nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0;
		}
		close(fd);
		fd = nfd;
	}
	close(fd);
	free(copy);
	f = ok ? fopen("/proc/self/maps", "re") : NULL;
	while (f && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line), k = strlen(suffix);

		if (n > k + 1 && !strncmp(line + n - k - 1, suffix, k))
			at = (long)(n - k - 1);
	}
	if (f)
		fclose(f);
	return at;
}

/* rpal stat PID reads the maps of PID, whose paths PID chose.  A line too
 * long for its buffer, whose tail is the path of a link to a FIFO, does not
 * make it open that FIFO (or anything but a page the process maps). */
static void long_maps_line(const char *rpal)
{
	enum { LINE = 4200 };   /* snap_page_dir's buffer: its fgets reads 4199 */
	char evil[300], fifo[300], deep[300], suffix[400], pidarg[16];
	int ready[2], ino;
	struct out o;
	pid_t pid;

	printf("stat: rpal stat PID opens no FIFO named by the tail of a maps line too long for it\n");
	snprintf(evil, sizeof(evil), "%s/evil", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(deep, sizeof(deep), "%s/deep", dir);
	snprintf(suffix, sizeof(suffix), "%s/stat.0", evil);
	mkdir(evil, 0700);
	unlink(suffix);
	unlink(fifo);
	CHECK(mkfifo(fifo, 0600) == 0 && symlink(fifo, suffix) == 0, "mkfifo, symlink: %s", strerror(errno));
	CHECK(pipe(ready) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		void *m = NULL;
		long at = map_deep(deep, 100, suffix, &m);
		/* Move the suffix to the second fgets chunk, 5 bytes of B in. */
		int pad = 100 + (LINE - 1 + 5) - (int)at;

		if (at < 0 || pad < 1 || pad > 250 || map_deep(deep, pad, suffix, &m) != LINE - 1 + 5)
			_exit(1);
		(void)!write(ready[1], "r", 1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char r;
	if (read(ready[0], &r, 1) != 1) {
		printf("stat:   SKIP this case: no mapping at the line length wanted\n");
		waitpid(pid, NULL, 0);
		close(ready[0]);
		return;
	}
	close(ready[0]);
	ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	CHECK(ino >= 0 && inotify_add_watch(ino, fifo, IN_OPEN) >= 0, "inotify: %s", strerror(errno));
	snprintf(pidarg, sizeof(pidarg), "%d", (int)pid);
	char *argv[] = { (char *)rpal, "stat", pidarg, NULL };
	CHECK(!runcmd(argv, &o) && o.status == 1, "rpal stat %s: status %d", pidarg, o.status);
	char ev[256];
	CHECK(read(ino, ev, sizeof(ev)) < 0 && errno == EAGAIN, "rpal stat %s opened %s", pidarg, fifo);
	close(ino);
	out_free(&o);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	unlink(suffix);
	unlink(fifo);
	rmdir(evil);
	forge_clean(deep);
}

/* A SOCK_SEQPACKET listener at <runtime dir>/host-NAME.sock, where rpal
 * ps looks for host NAME. */
static int host_impostor(const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if ((size_t)snprintf(a.sun_path, sizeof(a.sun_path), "%.80s/host-%s.sock", dir, name) >= sizeof(a.sun_path)) {
		printf("FAIL: the runtime directory's name is too long for a socket\n");
		exit(1);
	}
	unlink(a.sun_path);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0) {
		printf("FAIL: cannot listen at %s\n", a.sun_path);
		exit(1);
	}
	return l;
}

static void ps_impostor(const char *rpal)
{
	static const char reply[] = "PID  PROGRAM\n1    \033]0;title\007 \xc2\x9b" "31m \x9b" "2J caf\xc3\xa9\tok\n";
	int fake = host_impostor("fake"), mute = host_impostor("mute");
	struct timespec t0, t1;
	struct out o;
	pid_t pid;

	printf("ps: what a socket that took a host's name answers cannot drive the terminal\n");
	runcmd((char *[]){ (char *)rpal, "ps", "--help", NULL }, &o);
	if (o.status == 1 && o.buf[1] && strstr(o.buf[1], "without hosted mode")) {
		printf("ps:   SKIP these cases: this rpal has no hosted mode\n");
		out_free(&o);
		close(fake);
		close(mute);
		return;
	}
	out_free(&o);
	pid = fork();
	if (pid == 0) {
		char req[16];
		int c = accept(fake, NULL, NULL);

		if (c >= 0 && recv(c, req, sizeof(req), 0) > 0)
			(void)!send(c, reply, sizeof(reply), 0);
		_exit(0);
	}
	runcmd((char *[]){ (char *)rpal, "ps", "fake", NULL }, &o);
	waitpid(pid, NULL, 0);
	CHECK(o.status == 0 && o.buf[0] && strstr(o.buf[0], "caf\xc3\xa9\tok"), "rpal ps fake: status %d, \"%s\"",
	      o.status, o.buf[0] ? o.buf[0] : "");
	for (size_t i = 0; o.buf[0] && i < o.len[0]; i++) {
		unsigned char c = (unsigned char)o.buf[0][i];

		CHECK((c >= 0x20 && c != 0x7f && c != 0x9b && !(c == 0xc2 && (unsigned char)o.buf[0][i + 1] < 0xa0)) ||
		      c == '\n' || c == '\t', "byte %#x at %zu of rpal ps's output", c, i);
	}
	out_free(&o);

	printf("ps: nor hold rpal ps up by never answering\n");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	runcmd((char *[]){ (char *)rpal, "ps", "mute", NULL }, &o);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(o.status == 2 && o.buf[1] && strstr(o.buf[1], "did not answer"), "rpal ps mute: status %d, \"%s\"",
	      o.status, o.buf[1] ? o.buf[1] : "");
	CHECK(t1.tv_sec - t0.tv_sec < 10, "rpal ps mute took %ld s", (long)(t1.tv_sec - t0.tv_sec));
	out_free(&o);
	close(fake);
	close(mute);
}

int main(int argc, char **argv)
{
	const char *env = getenv("RPAL_RUNTIME_DIR");

	if (argc < 2 || !env) {
		fprintf(stderr, "usage: RPAL_RUNTIME_DIR=DIR stat RPAL [top] | stat pair SECONDS\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s", env);
	mkdir(dir, 0700);
	if (!strcmp(argv[1], "pair")) {
		int ctl;
		pid_t pid = child("stat-pair", 0, 0, argc > 2 ? atof(argv[2]) : 10, &ctl);

		printf("%d\n", (int)pid);
		fflush(stdout);
		waitpid(pid, NULL, 0);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[2], "top"))
		top_batch(argv[1]);
	else {
		exact(argv[1]);
		unmatched(argv[1]);
		costs(argv[1]);
		gone(argv[1]);
		listening(argv[1]);
		queues(argv[1]);
		names(argv[1]);
		growing(argv[1]);
		forged(argv[1]);
		odd_dir(argv[1]);
		dir_order(argv[1]);
		unlisted(argv[1]);
		start_before_epoch(argv[1]);
		zero_names(argv[1]);
		one_pair(argv[1]);
		twice(argv[1]);
		many_listeners(argv[1]);
		linked_dirs(argv[1]);
		same_pid_two_dirs(argv[1]);
		foreign_dirs(argv[1]);
		many_maps(argv[1]);
		elsewhere(argv[1]);
		long_maps_line(argv[1]);
		ps_impostor(argv[1]);
	}
	if (fails)
		printf("%d check%s failed\n", fails, fails == 1 ? "" : "s");
	else
		printf("PASS: rpal %s\n", argc > 2 ? "top" : "stat");
	return fails ? 1 : 0;
}
