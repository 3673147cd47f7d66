/* SPDX-License-Identifier: MIT */
/*
 * Description: an orderly close loses nothing.  A peer that sends and at
 * once closes and exits still delivers every message (inline and buffer),
 * then end of stream; a server that closes right after accepting gives the
 * client a working connection that reads end of stream; and once both
 * sides are done, nothing of the other stays mapped or allocated.
 */
#include "helpers.h"

#define N 200   /* fits the ring: the sender exits before we read */

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

	t_check(t_eventually((rpal_stats(&st), st.nr_peers_mapped == 0 && st.arena_used == st0.arena_used), 2000),
		"left behind: %u peers mapped, arena %zu (was %zu)", st.nr_peers_mapped, st.arena_used, st0.arena_used);
	rpal_close(lfd);
	printf("PASS\n");
	return 0;
}
