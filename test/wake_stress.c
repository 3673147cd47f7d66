/* SPDX-License-Identifier: MIT */
/*
 * Description: no lost wake-up.  Two processes ping-pong with no spinning,
 * so every message finds its consumer asleep; the test fails if it hangs
 * (watchdog) or if the two sides slept fewer times in all than there were
 * round trips (1,000,000 by default).  Both sides pinned to one CPU, where a
 * hand-off costs a few microseconds.
 *
 * Then the other direction of the handshake, room: on the smallest ring (8
 * slots) a sender sends bursts of up to three rings' worth, so it keeps
 * finding the ring full and sleeping for room, while the receiver drains
 * the ring at an uneven pace, runs it empty and sleeps itself.  A receiver
 * looks for a sender waiting for room only every quarter ring it consumes
 * (docs/PROTOCOL.md, section 6): the test fails if a sender sleeps through
 * the room it waits for (watchdog), if a message is lost or out of order,
 * or if the sender never slept for room (the path was not taken).
 */
#include <sched.h>

#include "helpers.h"

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof(s), &s);
}

/* A cheap generator: the pace only has to be uneven, not random. */
static uint32_t next_rand(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Now and then, let the other side run for a while. */
static void pause_sometimes(uint32_t *x)
{
	uint32_t r = next_rand(x) % 16;

	if (r == 0)
		usleep(next_rand(x) % 50);
	else if (r < 4)
		sched_yield();
}

static void room_wakes(long msgs)
{
	struct rpal_config cfg;
	struct rpal_conn_stats st;
	uint64_t room_sleeps = 0;
	int p[2], fd;
	pid_t pid;
	char c;

	printf("room: %ld messages in bursts of up to 24 over an 8-slot ring, no spinning, "
	       "receiver on another CPU where there is one\n", msgs);
	rpal_config_default(&cfg);
	cfg.spin_us = 0;
	cfg.ring_entries = 8;
	t_check(pipe(p) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		uint32_t x = 2463534242u;
		uint64_t v, want = 0;
		ssize_t n;

		pin(sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0);  /* in parallel where it can */
		t_ok(rpal_init(&cfg));
		int lfd = t_ok(rpal_listen("room", NULL));
		(void)!write(p[1], "r", 1);
		fd = t_ok(rpal_accept(lfd, 0));
		while ((n = rpal_recv(fd, &v, sizeof(v), 0)) > 0) {
			t_check(v == want, "receiver got %lu, want %lu", (unsigned long)v, (unsigned long)want);
			want++;
			pause_sometimes(&x);
		}
		t_check(n == 0, "receiver: %s", rpal_strerror((int)n));
		t_ok(rpal_conn_stats(fd, &st));
		printf("receiver: %lu messages, slept %lu times for them, woke the sender %lu times\n",
		       (unsigned long)st.msgs_received, (unsigned long)st.rx_sleeps, (unsigned long)st.room_wakeups);
		exit(0);
	}
	pin(0);
	alarm(120);             /* a sender that sleeps through its room hangs */
	t_ok(rpal_init(&cfg));
	close(p[1]);
	t_check(read(p[0], &c, 1) == 1, "receiver did not start");
	fd = t_ok(rpal_connect("room", NULL, 0));
	uint32_t x = 88172645u;
	for (long i = 0; i < msgs;) {
		long burst = 1 + (long)(next_rand(&x) % 24);

		for (; burst > 0 && i < msgs; burst--, i++) {
			uint64_t v = (uint64_t)i;
			t_ok(rpal_send(fd, &v, sizeof(v), 0));
		}
		pause_sometimes(&x);
	}
	t_ok(rpal_conn_stats(fd, &st));
	room_sleeps = st.tx_sleeps;
	printf("sender: %lu messages, met a full ring %lu times, slept %lu times for room\n",
	       (unsigned long)st.msgs_sent, (unsigned long)st.ring_full, (unsigned long)room_sleeps);
	rpal_close(fd);
	t_wait_ok(pid, "receiver");
	t_check(room_sleeps > 0, "the sender never slept for room: the test did not exercise the room wake-up");
	rpal_fini();
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : t_scaled(1000000), i;
	uint64_t server_sleeps = 0;
	int q[2];
	struct rpal_config cfg;
	struct rpal_conn_info ci;
	int p[2], fd;
	pid_t pid;
	char c;

	rpal_config_default(&cfg);
	cfg.spin_us = 0;        /* always sleep */
	t_check(pipe(p) == 0 && pipe(q) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		long n;
		uint64_t v, want = 0;
		pin(0);
		t_ok(rpal_init(&cfg));
		int lfd = t_ok(rpal_listen("wake", NULL));
		(void)!write(p[1], "r", 1);
		fd = t_ok(rpal_accept(lfd, 0));
		while ((n = rpal_recv(fd, &v, sizeof(v), 0)) > 0) {
			t_check(v == want, "server got %lu, want %lu", (unsigned long)v, (unsigned long)want);
			want++;
			t_ok(rpal_send(fd, &v, sizeof(v), 0));
		}
		t_check(n == 0, "server: %s", rpal_strerror((int)n));
		t_ok(rpal_conn_info(fd, &ci));
		printf("server: %lu messages, slept %lu times, rang %lu times\n", (unsigned long)ci.rx_msgs,
		       (unsigned long)ci.sleeps, (unsigned long)ci.wakeups);
		(void)!write(q[1], &ci.sleeps, sizeof(ci.sleeps));
		exit(0);
	}
	pin(0);
	alarm(240);             /* a lost wake-up hangs (sleeps have no timeout): fail loudly */
	t_ok(rpal_init(&cfg));
	close(p[1]);            /* a server that dies early reads as EOF, not a hang */
	close(q[1]);
	t_check(read(p[0], &c, 1) == 1, "server did not start");
	fd = t_ok(rpal_connect("wake", NULL, 0));
	for (i = 0; i < rounds; i++) {
		uint64_t v = (uint64_t)i, r = ~0ull;
		t_ok(rpal_send(fd, &v, sizeof(v), 0));
		t_check(t_ok(rpal_recv(fd, &r, sizeof(r), 0)) == sizeof(r) && r == v, "echo %ld", i);
	}
	t_ok(rpal_conn_info(fd, &ci));
	printf("client: %ld round trips, slept %lu times, rang %lu times\n", rounds, (unsigned long)ci.sleeps,
	       (unsigned long)ci.wakeups);
	rpal_close(fd);
	t_check(read(q[0], &server_sleeps, sizeof(server_sleeps)) == sizeof(server_sleeps), "server's count");
	t_wait_ok(pid, "server");
	t_check(ci.sleeps + server_sleeps >= (uint64_t)rounds, "only %lu sleeps in all for %ld round trips",
		(unsigned long)(ci.sleeps + server_sleeps), rounds);
	rpal_fini();
	room_wakes(rounds / 4);
	printf("PASS: %lu sleep/wake alternations, and room woken for every full ring, no hang\n",
	       (unsigned long)(ci.sleeps + server_sleeps));
	return 0;
}
