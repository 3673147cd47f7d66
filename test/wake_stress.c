/* SPDX-License-Identifier: MIT */
/*
 * Description: no lost wake-up.  Two processes ping-pong with no spinning,
 * so every message finds its consumer asleep; the test fails if it hangs
 * (watchdog) or if the two sides slept fewer times in all than there were
 * round trips (1,000,000 by default).  Both sides pinned to one CPU, where a
 * hand-off costs a few microseconds.
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
	printf("PASS: %lu sleep/wake alternations, no hang\n", (unsigned long)(ci.sleeps + server_sleeps));
	return 0;
}
