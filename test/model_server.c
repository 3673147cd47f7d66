/* SPDX-License-Identifier: MIT */
/*
 * Description: the model server, examples/echo_server (the program the
 * README tells newcomers to copy), keeps answering a well-behaved client
 * promptly while hostile clients try to make it wait: (a) one floods
 * requests and never reads the replies, (b) one takes the replies with
 * rpal_recv_msg() and never releases them (the server's buffer quota runs
 * out), (c) one sends a burst and is stopped with SIGSTOP.  Every round
 * trip of the good client must take under a second and come back intact.
 * Once the hostile clients are killed the server must drop their
 * connections and still serve; a client that shuts down writing still gets
 * every reply, then end of stream; SIGTERM stops the server.
 *
 *   model_server <path of echo_server> [abc]   (which hostile clients; default all)
 */
#include <sys/mman.h>
#include <sys/prctl.h>
#include "helpers.h"

#define SERVICE "model"
#define ROUNDS 200
#define STALL_NS 1000000000ull          /* a round trip this long is a stall */
#define GIVE_UP_MS 5000                 /* how long a stalled round trip is waited for */

/* Progress of the hostile clients, written by them, read by the parent. */
struct progress {
	volatile long flood_sent;       /* (a) requests sent */
	volatile long held;             /* (b) replies received and never released */
	volatile long held_bufs;        /* (b) ... of which buffer messages */
	volatile long burst_sent;       /* (c) requests sent before it asks to be stopped */
	volatile int burst_done;
	volatile int connected;         /* hostile clients connected */
	volatile int go;                /* set once all are: then they misbehave */
};
static struct progress *pg;

static pid_t parent, server;
static pid_t hostile[3];

/* Whatever way the test ends, no child outlives it. */
static void kill_children(void)
{
	if (getpid() != parent)
		return;
	for (int i = 0; i < 3; i++)
		if (hostile[i] > 0)
			kill(hostile[i], SIGKILL);
	if (server > 0)
		kill(server, SIGKILL);
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL: model_server timed out\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(T_EXIT_FAIL);
	kill_children();
	_exit(T_EXIT_FAIL);
}

static void fill(char *b, size_t len, unsigned long tag)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (char)('a' + (tag * 7 + i) % 26);
	snprintf(b, len < 16 ? len : 16, "%lu", tag);
}

static int connect_model(void)
{
	return (int)t_ok(rpal_connect(SERVICE, NULL, 0));
}

/* A hostile client connects, then waits until every other one has, so that
 * a server that blocks on the first cannot keep the others out. */
static int connect_hostile(void)
{
	int fd = connect_model();

	__atomic_add_fetch(&pg->connected, 1, __ATOMIC_SEQ_CST);
	while (!pg->go)
		usleep(1000);
	return fd;
}

/* (a) Sends, mixing inline and buffer messages, and never reads.  Once the
 * server stops reading it, its own sends wait: that is the backpressure. */
static void flooder(void)
{
	static char big[4096];
	int fd = connect_hostile();

	memset(big, 'f', sizeof(big));
	for (long i = 0;; i++) {
		if (rpal_send(fd, big, i & 1 ? sizeof(big) : 32, 0) < 0)
			_exit(1);
		pg->flood_sent = i + 1;
	}
}

/* (b) Requests of 64 B (buffer messages both ways); replies are received
 * zero-copy and never released, so the server's quota on this connection
 * runs out. */
static void holder(void)
{
	static struct rpal_msg held[1024];
	char req[64];
	int fd = connect_hostile();

	memset(req, 'h', sizeof(req));
	for (;;) {
		int sent = rpal_send(fd, req, sizeof(req), RPAL_NONBLOCK) == (ssize_t)sizeof(req);
		int got = pg->held < 1024 && rpal_recv_msg(fd, &held[pg->held], 1, RPAL_NONBLOCK) == 1;
		if (got) {
			pg->held_bufs += !!(held[pg->held].flags & RPAL_MSG_BUF);
			pg->held++;
		}
		if (!sent && !got)
			usleep(1000);
	}
}

/* (c) A burst of 4 KiB requests, more than the rings and the server's
 * queue hold, with no reply read; then the parent stops it. */
static void burster(void)
{
	static char big[4096];
	int fd = connect_hostile(), idle = 0;

	memset(big, 'b', sizeof(big));
	while (pg->burst_sent < 1000 && idle < 100) {
		if (rpal_send(fd, big, sizeof(big), RPAL_NONBLOCK) == (ssize_t)sizeof(big)) {
			pg->burst_sent++;
			idle = 0;
		} else {
			idle++;
			usleep(1000);
		}
	}
	pg->burst_done = 1;
	for (;;)
		pause();
}

static pid_t spawn(void (*fn)(void))
{
	pid_t pid = fork();

	t_check(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn();
		_exit(0);
	}
	return pid;
}

/* Start the server with its stdout on a pipe; return once it says it serves. */
static void start_server(const char *path)
{
	char line[256], want[128];
	int p[2];
	FILE *f;

	t_check(pipe(p) == 0, "pipe");
	server = fork();
	t_check(server >= 0, "fork: %s", strerror(errno));
	if (server == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		char *args[] = { (char *)path, SERVICE, NULL };

		t_execv(path, args);
		fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	f = fdopen(p[0], "r");
	t_check(f && fgets(line, sizeof(line), f), "no output from %s", path);
	snprintf(want, sizeof(want), "echo_server: serving \"%s\"\n", SERVICE);
	t_check(!strcmp(line, want), "server said \"%s\", want \"%s\"", line, want);
	/* f stays open: a write to a pipe nobody reads would kill the server (SIGPIPE). */
}

static int count_fds(pid_t pid)
{
	char path[64];
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
		n += access(path, F_OK) == 0;
	}
	return n;
}

/* CPU time of a process in ms (utime + stime). */
static long cpu_ms(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * rounds round trips of len bytes on fd, each checked; fails on a wrong
 * reply or one that takes STALL_NS or more (waiting up to GIVE_UP_MS to say
 * how long).  An rpal epoll set gives the receive its timeout.
 */
static void round_trips(int fd, size_t len, int rounds, const char *when)
{
	static char out[4096], in[8192];
	static uint64_t ns[ROUNDS];
	unsigned long tag0 = (unsigned long)t_now_ns();
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = rpal_epoll_create(0);

	t_check(ep >= 0 && rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll: %s", strerror(errno));

	for (int i = 0; i < rounds; i++) {
		uint64_t t0 = t_now_ns(), dt;
		ssize_t n;

		fill(out, len, tag0 + (unsigned long)i);
		t_check(t_ok(rpal_send(fd, out, len, 0)) == (ssize_t)len, "short send");
		for (;;) {
			struct epoll_event got;
			n = rpal_recv(fd, in, sizeof(in), RPAL_NONBLOCK);
			if (n != -EAGAIN)
				break;
			dt = t_now_ns() - t0;
			if (dt >= (uint64_t)GIVE_UP_MS * 1000000)
				t_fail("%s: round trip %d of %zu B: no reply in %d ms: the server is stalled",
				       when, i, len, GIVE_UP_MS);
			rpal_epoll_wait(ep, &got, 1, (int)(GIVE_UP_MS - dt / 1000000));
		}
		dt = t_now_ns() - t0;
		t_check(n == (ssize_t)len, "%s: round trip %d of %zu B: reply of %zd (%s)", when, i, len, n,
			n < 0 ? rpal_strerror((int)n) : "wrong length");
		t_check(!memcmp(in, out, len), "%s: round trip %d of %zu B: reply differs", when, i, len);
		t_check(dt < STALL_NS, "%s: round trip %d of %zu B took %.3f s: the server stalled",
			when, i, len, dt / 1e9);
		ns[i] = dt;
	}
	t_ok(rpal_close(ep));
	if (rounds < 10)
		return;
	qsort(ns, (size_t)rounds, sizeof(ns[0]), cmp_u64);
	printf("  %d round trips of %zu B: median %.1f us, max %.1f us\n", rounds, len,
	       ns[rounds / 2] / 1e3, ns[rounds - 1] / 1e3);
}

int main(int argc, char **argv)
{
	const char *which = argc > 2 ? argv[2] : "abc";
	int fd, st, base_fds, nhostile;
	long cpu0;

	if (argc < 2) {
		fprintf(stderr, "usage: model_server <echo_server> [abc]\n");
		return T_EXIT_FAIL;
	}
	parent = getpid();
	atexit(kill_children);
	signal(SIGALRM, on_alarm);
	alarm(90);
	pg = mmap(NULL, sizeof(*pg), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	t_check(pg != MAP_FAILED, "mmap");

	printf("%s starts and prints its banner\n", argv[1]);
	start_server(argv[1]);

	/* The good client's connection first: the server's descriptors with it
	 * alone are what must be left once the hostile clients are gone. */
	fd = connect_model();
	round_trips(fd, 32, 1, "first");
	base_fds = count_fds(server);

	if (strchr(which, 'a'))
		hostile[0] = spawn(flooder);
	if (strchr(which, 'b'))
		hostile[1] = spawn(holder);
	if (strchr(which, 'c'))
		hostile[2] = spawn(burster);
	nhostile = (hostile[0] > 0) + (hostile[1] > 0) + (hostile[2] > 0);
	t_check(t_eventually(pg->connected == nhostile, 5000), "%d of %d hostile clients connected",
		pg->connected, nhostile);
	pg->go = 1;
	/* How far each gets depends on the server: checked after the round trips,
	 * so that a server that blocks fails there, saying so. */
	if (hostile[0] > 0) {
		printf("(a) a client floods requests and never reads a reply\n");
		t_eventually(pg->flood_sent >= 300, 2000);
	}
	if (hostile[1] > 0) {
		printf("(b) a client takes 64 B replies zero-copy and never releases them\n");
		t_eventually(pg->held >= 256, 2000);
	}
	if (hostile[2] > 0) {
		printf("(c) a client sends a burst of 4 KiB requests, then is stopped with SIGSTOP\n");
		t_check(t_eventually(pg->burst_done, 5000), "burst not done");
		t_check(kill(hostile[2], SIGSTOP) == 0, "SIGSTOP");
		t_check(waitpid(hostile[2], &st, WUNTRACED) == hostile[2] && WIFSTOPPED(st), "not stopped");
	}
	printf("  flooder sent %ld; holder holds %ld replies (%ld buffers); burst of %ld, stopped\n",
	       pg->flood_sent, pg->held, pg->held_bufs, pg->burst_sent);

	/* Waiting for EPOLLOUT must be a sleep: a server that retries at once
	 * burns a CPU for as long as a peer does not read. */
	printf("the server does not spin while they wait\n");
	cpu0 = cpu_ms(server);
	usleep(300000);
	cpu0 = cpu_ms(server) - cpu0;
	printf("  %ld ms of CPU in 300 ms\n", cpu0);
	t_check(cpu0 < 150, "the server used %ld ms of CPU in 300 ms with nothing to do", cpu0);

	printf("a well-behaved client meanwhile: every round trip under 1 s, every reply intact\n");
	round_trips(fd, 32, ROUNDS, "hostile clients active");
	round_trips(fd, 4096, ROUNDS, "hostile clients active");

	/* Only now, so that against a server that blocks the stall shows first. */
	printf("the hostile clients reached their state (the holder holds the server's whole quota)\n");
	if (hostile[0] > 0)
		t_check(pg->flood_sent >= 300, "flooder sent only %ld", pg->flood_sent);
	if (hostile[1] > 0)
		t_check(pg->held >= 256 && pg->held_bufs == pg->held, "holder holds %ld replies, %ld buffers",
			pg->held, pg->held_bufs);
	if (hostile[2] > 0)
		t_check(pg->burst_sent > 256, "burst of only %ld", pg->burst_sent);

	printf("the hostile clients are killed: the server drops their connections and still serves\n");
	for (int i = 0; i < 3; i++) {
		if (hostile[i] <= 0)
			continue;
		kill(hostile[i], SIGKILL);
		t_check(waitpid(hostile[i], &st, 0) == hostile[i], "waitpid");
		hostile[i] = 0;
	}
	t_check(t_eventually(count_fds(server) == base_fds, 5000), "the server holds %d descriptors, %d with one client",
		count_fds(server), base_fds);
	printf("  the server holds %d descriptors, as it did with one client\n", base_fds);
	{
		int other = connect_model();
		round_trips(other, 32, 1, "a new connection");
		t_ok(rpal_close(other));
	}
	round_trips(fd, 32, ROUNDS, "after the kill");
	round_trips(fd, 4096, ROUNDS, "after the kill");

	printf("a client that sends 300 requests unread, then shuts down writing, gets 300 replies and end of stream\n");
	{
		static char out[4096], in[4096];
		int hc = connect_model();
		for (int i = 0; i < 300; i++) {
			fill(out, sizeof(out), (unsigned long)i);
			t_ok(rpal_send(hc, out, sizeof(out), 0));
		}
		t_ok(rpal_shutdown(hc, SHUT_WR));
		for (int i = 0; i < 300; i++) {
			fill(out, sizeof(out), (unsigned long)i);
			t_check(t_ok(rpal_recv(hc, in, sizeof(in), 0)) == (ssize_t)sizeof(in) &&
				!memcmp(in, out, sizeof(in)), "half-closed: reply %d wrong", i);
		}
		t_check(rpal_recv(hc, in, sizeof(in), 0) == 0, "half-closed: no end of stream");
		t_ok(rpal_close(hc));
	}

	printf("SIGTERM stops the server (it was still running)\n");
	t_check(waitpid(server, &st, WNOHANG) == 0, "the server exited early");
	t_ok(rpal_close(fd));
	kill(server, SIGTERM);
	t_check(waitpid(server, &st, 0) == server, "waitpid(server)");
	t_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "server: %s %d", WIFEXITED(st) ? "exited" : "signal",
		WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	server = 0;
	printf("PASS\n");
	return T_EXIT_PASS;
}
