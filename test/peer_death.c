/* SPDX-License-Identifier: MIT */
/*
 * Description: kill -9 of a peer at random moments, repeated, in both
 * roles.  The victim streams inline and buffer messages and holds some of
 * ours; each round the survivor must see the hang-up within a second, keep
 * a second (steady) connection working, and afterwards hold no descriptor,
 * mapping or buffer of the dead peer; then a new peer connects.
 */
#include "helpers.h"

static int ep;

/* Abstract names are global: two runs at once (peer_death, peer_death_mpk) must not meet. */
static char srv_name[64];

static void victim_client(void)
{
	static char big[5000];
	struct rpal_msg held[16];
	int fd = t_ok(rpal_connect("death", NULL, 0)), nheld = 0;
	uint64_t seed = (uint64_t)getpid();

	for (long i = 0;; i++) {
		size_t len = 1 + t_rand(&seed) % sizeof(big);
		struct rpal_msg m;
		if (rpal_send(fd, big, len, 0) < 0)
			_exit(0);
		if (rpal_recv_msg(fd, &m, 1, RPAL_NONBLOCK) == 1) {
			if (nheld == 16) {      /* hold the last 16, like a slow consumer */
				rpal_msg_release(fd, held, 1);
				memmove(held, held + 1, 15 * sizeof(held[0]));
				nheld--;
			}
			held[nheld++] = m;
			held[nheld - 1].data = NULL;    /* copies are not for reading */
		}
	}
}

static void steady_client(int rounds_fd)
{
	int fd = t_ok(rpal_connect("death", NULL, 0));
	char b[16];
	long n = 0;

	for (;;) {
		char c;
		if (read(rounds_fd, &c, 1) != 1 || c == 'q')
			break;
		t_ok(rpal_send(fd, "ping", 4, 0));
		t_check(rpal_recv(fd, b, sizeof(b), 0) == 4 && !memcmp(b, "pong", 4), "steady: no pong");
		n++;
	}
	t_ok(rpal_close(fd));
	_exit(n > 0 ? 0 : 1);
}

/* Serve until the victim's hang-up; returns ms from kill to HUP. */
static double serve_round(int lfd, int steady, pid_t victim, int vfd, uint64_t kill_at)
{
	static char big[5000];
	struct rpal_msg m[16];
	uint64_t killed = 0;

	for (;;) {
		struct epoll_event ev[4];
		int n = rpal_epoll_wait(ep, ev, 4, 5);
		t_check(n >= 0, "rpal_epoll_wait: %s", strerror(errno));
		if (!killed && t_now_ns() >= kill_at) {
			kill(victim, SIGKILL);
			killed = t_now_ns();
		}
		for (int i = 0; i < n; i++) {
			int fd = (int)ev[i].data.u64;
			if (fd == steady) {
				char b[16];
				if (rpal_recv(fd, b, sizeof(b), RPAL_NONBLOCK) == 4)
					t_ok(rpal_send(fd, "pong", 4, 0));
				continue;
			}
			if (fd == lfd)
				continue;
			int k = rpal_recv_msg(fd, m, 16, RPAL_NONBLOCK);
			for (int j = 0; j < k; j++)
				rpal_send(fd, big, m[j].len, RPAL_NONBLOCK);   /* echo a buffer back */
			if (k > 0)
				rpal_msg_release(fd, m, (unsigned)k);
			if (ev[i].events & EPOLLHUP) {
				t_check(killed, "hang-up before the kill");
				/* What it published before dying is still delivered
				 * (at most a ring's worth), then the reset. */
				int left = 0;
				while ((k = rpal_recv_msg(fd, m, 16, RPAL_NONBLOCK)) > 0) {
					left += k;
					rpal_msg_release(fd, m, (unsigned)k);
				}
				t_check(left <= (int)RPAL_DEFAULT_RING_ENTRIES, "%d messages after the hang-up", left);
				t_check(k == -ECONNRESET, "dead peer: got %d, want ECONNRESET", k);
				t_ok(rpal_close(fd));
				return (double)(t_now_ns() - killed) / 1e6;
			}
		}
		t_check(!killed || t_now_ns() - killed < 1000000000ull, "no hang-up within 1 s of kill -9");
	}
}

int main(void)
{
	/* RPAL_KILL_ROUNDS: `make soak` runs thousands. */
	long rounds = getenv("RPAL_KILL_ROUNDS") ? atol(getenv("RPAL_KILL_ROUNDS")) : t_scaled(140), r;
	struct rpal_stats st0, st;
	int lfd, steady, sp[2], fds0;
	uint64_t seed = 12345;
	double worst = 0;
	pid_t spid;

	snprintf(srv_name, sizeof(srv_name), "@death2-srv-%d", (int)getpid());
	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("death", NULL));
	ep = rpal_epoll_create(0);
	t_check(ep >= 0, "epoll");

	t_check(pipe(sp) == 0, "pipe");
	spid = fork();
	if (spid == 0) {
		close(sp[1]);
		rpal_fini();
		t_ok(rpal_init(NULL));
		steady_client(sp[0]);
	}
	close(sp[0]);
	steady = t_ok(rpal_accept(lfd, 0));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)steady };
	t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, steady, &ev) == 0, "add steady");
	t_check(write(sp[1], "p", 1) == 1, "steady ping");
	t_ok(rpal_stats(&st0));
	fds0 = t_count_fds();

	printf("%ld rounds: a streaming client killed at a random moment\n", rounds);
	for (r = 0; r < rounds; r++) {
		pid_t v = fork();
		if (v == 0) {
			close(sp[1]);
			rpal_fini();
			t_ok(rpal_init(NULL));
			victim_client();
		}
		int vfd = t_ok(rpal_accept(lfd, 0));
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.u64 = (uint64_t)vfd;
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, vfd, &ev) == 0, "add victim");
		t_check(write(sp[1], "p", 1) == 1, "steady ping");
		double ms = serve_round(lfd, steady, v, vfd, t_now_ns() + t_rand(&seed) % 20000000);
		waitpid(v, NULL, 0);
		if (ms > worst)
			worst = ms;
		t_ok(rpal_stats(&st));
		t_check(st.nr_conns == 1 && st.nr_peers_mapped == 1, "round %ld: %u conns, %u peers mapped", r,
			st.nr_conns, st.nr_peers_mapped);
		t_check(st.arena_used == st0.arena_used, "round %ld: arena %zu, was %zu", r, st.arena_used,
			st0.arena_used);
		t_check(t_count_fds() == fds0, "round %ld: %d descriptors, was %d", r, t_count_fds(), fds0);
	}
	printf("  worst kill-to-hang-up: %.1f ms\n", worst);
	t_check(write(sp[1], "q", 1) == 1, "steady quit");
	t_wait_ok(spid, "steady client (its pings were answered every round)");
	rpal_close(steady);
	rpal_close(lfd);

	printf("%ld rounds: we are the client, the server is killed mid-stream\n", rounds / 2);
	for (r = 0; r < rounds / 2; r++) {
		int l2 = t_ok(rpal_listen("death2", NULL)), p[2];
		t_check(pipe(p) == 0, "pipe");
		pid_t s = fork();
		if (s == 0) {
			static char big[3000];
			rpal_close(l2);
			rpal_fini();
			t_ok(rpal_init(NULL));
			int l = t_ok(rpal_listen(srv_name, NULL));
			(void)!write(p[1], "r", 1);
			int fd = t_ok(rpal_accept(l, 0));
			for (;;)
				if (rpal_send(fd, big, sizeof(big), 0) < 0)
					_exit(0);
		}
		rpal_close(l2);
		char c;
		t_check(read(p[0], &c, 1) == 1, "server up");
		close(p[0]);
		close(p[1]);
		t_ok(rpal_stats(&st0));
		int fd = t_ok(rpal_connect(srv_name, NULL, 0));
		struct rpal_msg held[8];
		int nh = 0;
		uint64_t kill_at = t_now_ns() + t_rand(&seed) % 10000000, killed = 0;
		long got;
		for (;;) {
			if (!killed && t_now_ns() >= kill_at) {
				kill(s, SIGKILL);
				killed = t_now_ns();
			}
			got = rpal_recv_msg(fd, held + nh, 1, RPAL_NONBLOCK);
			if (got == 1 && ++nh == 8) {
				rpal_msg_release(fd, held, 4);   /* keep some unreleased */
				memmove(held, held + 4, 4 * sizeof(held[0]));
				nh = 4;
			}
			if (got < 0 && got != -EAGAIN)
				break;
			char b[4000];
			rpal_send(fd, b, sizeof(b), RPAL_NONBLOCK);
			t_check(!killed || t_now_ns() - killed < 1000000000ull, "client: no error within 1 s of kill");
		}
		t_check(got == -ECONNRESET, "client: got %ld (%s), want ECONNRESET", got, rpal_strerror((int)got));
		waitpid(s, NULL, 0);
		t_ok(rpal_close(fd));
		t_ok(rpal_stats(&st));
		t_check(st.nr_conns == 0 && st.nr_peers_mapped == 0 && st.arena_used == st0.arena_used,
			"client round %ld: %u conns, %u peers, arena %zu (was %zu)", r, st.nr_conns,
			st.nr_peers_mapped, st.arena_used, st0.arena_used);
	}
	printf("PASS\n");
	return 0;
}
