/* SPDX-License-Identifier: MIT */
/*
 * Description: one arena serves every connection, and peers that stop
 * reading cannot starve the others.  We fill eight stopped peers with
 * 256 KiB and 1 MiB + 16 B messages until each send says EAGAIN: each
 * holds no more than its budget (counted in allocator blocks, so 1 MiB +
 * 16 B counts 2 MiB), EPOLLOUT stays off for them (a writer that waits for
 * it does not spin), a healthy peer's 256 KiB round trips keep working and
 * a new peer can still connect.  When the stopped peers die, everything
 * they held comes back.
 */
#include <sys/prctl.h>

#include "helpers.h"

#define NR_STOPPED 8
#define MSG        (256 * 1024)
#define BIG        ((1 << 20) + 16)

static char service[64];

static int child_connect(void)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rpal_fini();
	t_ok(rpal_init(NULL));
	return (int)t_ok(rpal_connect(service, NULL, 0));
}

static void stopped_peer(int ready)
{
	child_connect();
	t_check(write(ready, "r", 1) == 1, "write");
	for (;;)
		pause();        /* never reads: everything we are sent stays held */
}

static void healthy_peer(void)
{
	int fd = child_connect();
	struct rpal_msg m;

	while (rpal_recv_msg(fd, &m, 1, 0) == 1) {
		t_ok(rpal_send(fd, m.data, m.len, 0));
		t_ok(rpal_msg_release(fd, &m, 1));
	}
	_exit(0);
}

int main(void)
{
	static char msg[BIG], back[MSG];
	struct rpal_conn_info ci;
	struct rpal_stats st0, st;
	int lfd, ep, stopped[NR_STOPPED], healthy, pfd[2];
	pid_t pids[NR_STOPPED + 2];
	uint64_t held_total = 0;

	snprintf(service, sizeof(service), "share-%d", (int)getpid());
	lfd = t_ok(rpal_listen(service, NULL));
	ep = t_ok(rpal_epoll_create(0));
	t_ok(rpal_stats(&st0));
	t_check(pipe(pfd) == 0, "pipe");
	for (int i = 0; i < NR_STOPPED; i++) {
		char c;
		if ((pids[i] = fork()) == 0)
			stopped_peer(pfd[1]);
		stopped[i] = t_ok(rpal_accept(lfd, 0));
		t_check(read(pfd[0], &c, 1) == 1, "stopped peer %d did not start", i);
	}
	if ((pids[NR_STOPPED] = fork()) == 0)
		healthy_peer();
	healthy = t_ok(rpal_accept(lfd, 0));

	printf("%d peers that never read, arena of %zu MiB: each takes what its budget and the free arena allow\n",
	       NR_STOPPED, st0.arena_size >> 20);
	memset(msg, 'm', sizeof(msg));
	for (int i = 0; i < NR_STOPPED; i++) {
		int sent = 0;
		long r;
		/* Alternate sizes: 1 MiB + 16 B takes a 2 MiB block. */
		while ((r = rpal_send(stopped[i], msg, sent % 2 ? BIG : MSG, RPAL_NONBLOCK)) > 0)
			sent++;
		t_check(r == -EAGAIN, "peer %d: send failed with %ld (%s), want EAGAIN", i, r, rpal_strerror((int)r));
		t_ok(rpal_conn_info(stopped[i], &ci));
		printf("  peer %d: %d messages, holds %" PRIu64 " KiB of a %" PRIu64 " KiB budget\n", i, sent,
		       ci.bytes_outstanding >> 10, ci.budget >> 10);
		t_check(sent > 0, "peer %d got nothing", i);
		t_check(ci.bytes_outstanding <= ci.budget, "peer %d holds more than its budget", i);
		held_total += ci.bytes_outstanding;

		struct epoll_event ev = { .events = EPOLLOUT, .data.fd = stopped[i] }, out[4];
		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, stopped[i], &ev));
		int n = rpal_epoll_wait(ep, out, 4, 20);
		t_check(n == 0, "peer %d: EPOLLOUT reported while a send would fail (%d events)", i, n);
		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_DEL, stopped[i], NULL));
	}
	t_ok(rpal_stats(&st));
	printf("  together they hold %" PRIu64 " MiB; %zu MiB of the arena is in use\n", held_total >> 20,
	       st.arena_used >> 20);
	t_check(held_total < st0.arena_size, "the stopped peers took the whole arena");

	printf("a healthy peer's 256 KiB round trips keep working\n");
	for (int k = 0; k < 50; k++) {
		memset(msg, 'a' + k % 26, MSG);
		t_ok(rpal_send(healthy, msg, MSG, 0));
		t_check(rpal_recv(healthy, back, sizeof(back), 0) == MSG && !memcmp(back, msg, MSG),
			"round trip %d", k);
	}
	printf("a new peer can still connect\n");
	if ((pids[NR_STOPPED + 1] = fork()) == 0) {
		int fd = child_connect();
		t_ok(rpal_send(fd, "hello", 5, 0));
		_exit(0);
	}
	{
		int fd = t_ok(rpal_accept(lfd, 0));
		char b[8];
		t_check(rpal_recv(fd, b, sizeof(b), 0) == 5, "the new peer's message");
		rpal_close(fd);
		t_wait_ok(pids[NR_STOPPED + 1], "new peer");
	}

	printf("the stopped peers die: everything they held comes back\n");
	for (int i = 0; i < NR_STOPPED; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	for (int i = 0; i < NR_STOPPED; i++) {
		char b[8];
		t_check(t_eventually(rpal_send(stopped[i], "x", 1, RPAL_NONBLOCK) == -ECONNRESET ||
				     rpal_recv(stopped[i], b, sizeof(b), RPAL_NONBLOCK) == -ECONNRESET, 2000),
			"peer %d's death went unseen", i);
		t_ok(rpal_close(stopped[i]));
	}
	rpal_close(healthy);
	t_wait_ok(pids[NR_STOPPED], "healthy peer");
	t_check(t_eventually((rpal_stats(&st), st.arena_used == st0.arena_used), 2000),
		"arena use %zu, was %zu", st.arena_used, st0.arena_used);
	printf("PASS\n");
	return T_EXIT_PASS;
}
