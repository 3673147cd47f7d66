/* SPDX-License-Identifier: MIT */
/*
 * Description: an orderly close loses nothing.  A peer that sends and at
 * once closes and exits still delivers every message (inline and buffer),
 * then end of stream; a server that closes right after accepting gives the
 * client a working connection that reads end of stream; and once both
 * sides are done, nothing of the other stays mapped or allocated.  A peer
 * that never closes its end cannot fill our arena with the blocks of the
 * connections we closed: the oldest go before their time.
 */
#include <sys/epoll.h>
#include <sys/prctl.h>

#include "helpers.h"

#define N 200   /* fits the ring: the sender exits before we read */
#define LINGER_N 100    /* connection blocks: about three times a 1 MiB arena */

/* In a forked child: a server of service with room for a few dozen
 * connection blocks (a 1 MiB arena), its listener's descriptor; 'l' is
 * written to ready once it listens.  It dies with the test. */
static int small_server(const char *service, int ready)
{
	struct rpal_config cfg;
	int l;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rpal_fini();
	rpal_config_default(&cfg);
	cfg.arena_size = 1 << 20;
	t_ok(rpal_init(&cfg));
	l = (int)t_ok(rpal_listen(service, NULL));
	(void)!write(ready, "l", 1);
	return l;
}

int main(void)
{
	static char big[8192];
	struct rpal_stats st0, st;
	char buf[8192];
	int lfd, fd, i;
	pid_t pid;

	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("close", NULL));
	t_ok(rpal_stats(&st0));

	printf("a peer sends %d messages, closes and exits at once\n", N);
	pid = fork();
	if (pid == 0) {
		rpal_fini();
		t_ok(rpal_init(NULL));
		int c = t_ok(rpal_connect("close", NULL, 0));
		for (i = 0; i < N; i++) {
			size_t len = i % 3 == 0 ? sizeof(big) : 16;
			memset(big, i & 0xff, len);
			t_ok(rpal_send(c, big, len, 0));
		}
		t_ok(rpal_close(c));
		rpal_fini();
		_exit(0);
	}
	fd = t_ok(rpal_accept(lfd, 0));
	t_wait_ok(pid, "sender");
	for (i = 0; i < N; i++) {
		size_t len = i % 3 == 0 ? sizeof(big) : 16;
		long n = rpal_recv(fd, buf, sizeof(buf), 0);
		t_check(n == (long)len, "message %d after the sender left: %ld (%s)", i, n, rpal_strerror((int)n));
		t_check(buf[0] == (char)(i & 0xff) && buf[len - 1] == (char)(i & 0xff), "message %d corrupted", i);
	}
	t_check(rpal_recv(fd, buf, sizeof(buf), 0) == 0, "end of stream after the last message");
	t_ok(rpal_close(fd));

	printf("a server that closes right after accepting\n");
	pid = fork();
	if (pid == 0) {
		rpal_fini();
		t_ok(rpal_init(NULL));
		int c = rpal_connect("close", NULL, 0);
		t_check(c >= 0, "connect: %s", rpal_strerror(c));
		t_check(rpal_recv(c, buf, sizeof(buf), 0) == 0, "end of stream");
		t_check(rpal_send(c, "x", 1, 0) == -EPIPE, "send to a closed peer: EPIPE");
		t_ok(rpal_close(c));
		_exit(0);
	}
	fd = t_ok(rpal_accept(lfd, 0));
	t_ok(rpal_close(fd));
	t_wait_ok(pid, "client");

	printf("one connection's close leaves the same peer's other connections alone\n");
	{
		int p[2];
		t_check(pipe(p) == 0, "pipe");
		pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			int c1 = t_ok(rpal_connect("close", NULL, 0));
			int c2 = t_ok(rpal_connect("close", NULL, 0));
			t_ok(rpal_close(c1));
			char x;
			t_check(read(p[0], &x, 1) == 1, "go");          /* the server saw the hang-up */
			int c3 = t_ok(rpal_connect("close", NULL, 0));  /* same process, same arena */
			t_ok(rpal_send(c2, "two", 3, 0));
			t_ok(rpal_send(c3, "three", 5, 0));
			t_check(read(p[0], &x, 1) == 1, "go");          /* the server closed the third */
			t_ok(rpal_send(c2, "again", 5, 0));
			t_check(rpal_recv(c2, buf, sizeof(buf), 0) == 0, "end");
			_exit(0);
		}
		int s1 = t_ok(rpal_accept(lfd, 0)), s2 = t_ok(rpal_accept(lfd, 0));
		t_check(rpal_recv(s1, buf, sizeof(buf), 0) == 0, "first: end of stream");
		struct rpal_conn_info ci;
		t_check(t_eventually((rpal_conn_info(s1, &ci), !ci.peer_alive), 1000), "hang-up of the first not seen");
		t_ok(rpal_close(s1));
		(void)!write(p[1], "g", 1);
		int s3 = t_ok(rpal_accept(lfd, 0));
		t_check(rpal_recv(s2, buf, sizeof(buf), 0) == 3 && !memcmp(buf, "two", 3), "second connection broken");
		t_check(rpal_recv(s3, buf, sizeof(buf), 0) == 5 && !memcmp(buf, "three", 5), "third connection broken");
		/* The newest goes first: the mapping the second still uses must stay. */
		rpal_close(s3);
		(void)!write(p[1], "g", 1);
		t_check(rpal_recv(s2, buf, sizeof(buf), 0) == 5 && !memcmp(buf, "again", 5), "second broken after third closed");
		rpal_close(s2);
		t_wait_ok(pid, "peer with several connections");
		close(p[0]);
		close(p[1]);
	}

	printf("a non-blocking sender on a full ring sees the peer's death\n");
	{
		pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			t_ok(rpal_connect("close", NULL, 0));
			pause();                /* never reads */
			_exit(0);
		}
		fd = t_ok(rpal_accept(lfd, 0));
		while (rpal_send(fd, "x", 1, RPAL_NONBLOCK) == 1)
			;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		uint64_t t0 = t_now_ns();
		long r;
		while ((r = rpal_send(fd, "x", 1, RPAL_NONBLOCK)) == -EAGAIN && t_now_ns() - t0 < 1000000000ull)
			usleep(100);
		t_check(r == -ECONNRESET, "non-blocking send to a dead peer: %ld (%s)", r, rpal_strerror((int)r));
		rpal_close(fd);
	}

	printf("a peer that never closes its end cannot fill our arena with lingering blocks (%d connections)\n",
	       LINGER_N);
	{
		int go[2], conns[LINGER_N];

		t_check(pipe(go) == 0, "pipe");
		pid = fork();
		if (pid == 0) {
			/* Answers each connection and closes it at once. */
			char b;
			int l = small_server("close-linger", go[1]);
			for (int k = 0; k < LINGER_N; k++) {
				int a = (int)t_ok(rpal_accept(l, 0));
				t_ok(rpal_send(a, "bye", 3, 0));
				t_ok(rpal_close(a));
			}
			(void)!read(go[0], &b, 1);
			_exit(0);
		}
		t_check(read(go[0], buf, 1) == 1, "the server's start");
		for (i = 0; i < LINGER_N; i++) {
			long r = rpal_connect("close-linger", NULL, 0);
			t_check(r >= 0, "connection %d of a peer that closes none: %ld (%s)", i, r, rpal_strerror((int)r));
			conns[i] = (int)r;
		}
		/* The newest reads the answer, then end of stream; the oldest,
		 * whose block went first with its answer unread, an error. */
		t_check(rpal_recv(conns[LINGER_N - 1], buf, sizeof(buf), 0) == 3 && !memcmp(buf, "bye", 3),
			"the newest connection's answer");
		t_check(rpal_recv(conns[LINGER_N - 1], buf, sizeof(buf), 0) == 0, "the newest connection's end");
		long r = rpal_recv(conns[0], buf, sizeof(buf), 0);
		printf("  the oldest connection: %ld (%s)\n", r, r < 0 ? rpal_strerror((int)r) : "end of stream");
		t_check(r == -EPROTO, "the oldest connection lost its answer without an error");
		(void)!write(go[1], "q", 1);
		t_wait_ok(pid, "the server");
		for (i = 0; i < LINGER_N; i++)
			rpal_close(conns[i]);
		close(go[0]);
		close(go[1]);
	}

	printf("the block freed early, reused by a live connection, is never taken for an end of stream\n");
	for (int use_set = 0; use_set < 2; use_set++) {
		int go[2], first, more[LINGER_N], nmore = 0;
		long r;

		t_check(pipe(go) == 0, "pipe");
		pid = fork();
		if (pid == 0) {
			/* Answers and closes the first connection only. */
			char b;
			int l = small_server("close-reuse", go[1]);
			int a = (int)t_ok(rpal_accept(l, 0));
			t_ok(rpal_send(a, "bye", 3, 0));
			t_ok(rpal_close(a));
			(void)!write(go[1], "c", 1);
			while (rpal_accept(l, 0) >= 0 || errno == EINTR)
				;       /* until the room runs out */
			(void)!read(go[0], &b, 1);
			_exit(0);
		}
		t_check(read(go[0], buf, 1) == 1, "the server's start");
		first = (int)t_ok(rpal_connect("close-reuse", NULL, 0));
		t_check(read(go[0], buf, 1) == 1, "the server's close");
		if (use_set) {
			/* A set sees the close before the block goes. */
			int ep = (int)t_ok(rpal_epoll_create(0));
			struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
			t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, first, &ev) == 0, "add");
			t_check(rpal_epoll_wait(ep, &ev, 1, 2000) == 1 && (ev.events & EPOLLRDHUP), "the close not seen");
			rpal_close(ep);
		}
		while (nmore < LINGER_N && (r = rpal_connect("close-reuse", NULL, 0)) >= 0)
			more[nmore++] = (int)r;
		r = rpal_recv(first, buf, sizeof(buf), 0);
		printf("  %s: %d more connections, then the first: %ld (%s)\n", use_set ? "seen closed first" : "not seen",
		       nmore, r, r < 0 ? rpal_strerror((int)r) : r ? "its answer" : "end of stream");
		t_check(r == -EPROTO || (r == 3 && !memcmp(buf, "bye", 3)),
			"the first connection lost its answer without an error: %ld", r);
		(void)!write(go[1], "q", 1);
		t_wait_ok(pid, "the server");
		rpal_close(first);
		while (nmore)
			rpal_close(more[--nmore]);
		close(go[0]);
		close(go[1]);
	}

	t_check(t_eventually((rpal_stats(&st), st.nr_peers_mapped == 0 && st.arena_used == st0.arena_used), 2000),
		"left behind: %u peers mapped, arena %zu (was %zu)", st.nr_peers_mapped, st.arena_used, st0.arena_used);
	rpal_close(lfd);
	printf("PASS\n");
	return 0;
}
