/* SPDX-License-Identifier: MIT */
/*
 * Description: an idle process burns no CPU once the spin budget is spent.
 * A peer blocked in rpal_recv(), and one blocked in rpal_epoll_wait() on an
 * rpal-only set, are not woken even once in a second of silence (counted by
 * their voluntary context switches), and still wake for the next message.
 *
 * And a waiter never spins for a peer that runs on its own CPU, whichever
 * call sent (rpal_send, rpal_send_batch, rpal_send_buf): it yields the CPU
 * to it instead.  With the spin policy, a budget of a second and both
 * processes on one CPU, a spinner would keep its peer from running until
 * the scheduler preempts it, a millisecond or more of CPU per message; the
 * two processes must use far less for all the messages (their CPU time,
 * from /proc/PID/schedstat).
 */
#include <sched.h>
#include <sys/uio.h>

#include "helpers.h"

#define SAME_CPU_TRIPS 50
#define SAME_CPU_MAX_NS (25 * 1000000L)   /* a spinner needs 50 ms at least */

/* Nanoseconds the main thread of pid has run (schedstat); -1 if unknown. */
static long cpu_ns(pid_t pid)
{
	char path[64];
	long long ns = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &ns) != 1)
		ns = -1;
	fclose(f);
	return (long)ns;
}

enum send_kind { SEND_COPY, SEND_BATCH, SEND_BUF, SEND_KINDS };
static const char *const send_names[SEND_KINDS] = { "rpal_send", "rpal_send_batch", "rpal_send_buf" };

static void send_by(int fd, enum send_kind k, const char *msg, size_t len)
{
	struct iovec iov = { (void *)msg, len };
	void *buf;

	switch (k) {
	case SEND_COPY:
		t_ok(rpal_send(fd, msg, len, 0));
		break;
	case SEND_BATCH:
		t_check(rpal_send_batch(fd, &iov, 1, 0) == 1, "rpal_send_batch");
		break;
	case SEND_BUF:
		buf = rpal_buf_alloc(len);
		t_check(buf, "rpal_buf_alloc");
		memcpy(buf, msg, len);
		t_ok(rpal_send_buf(fd, buf, len, 0));
		break;
	default:
		break;
	}
}

static void init_spinning(void)
{
	struct rpal_config cfg;

	rpal_config_default(&cfg);
	cfg.spin_us = 1000000;
	cfg.wait_policy = RPAL_WAIT_POLICY_SPIN;
	t_ok(rpal_init(&cfg));
}

/* Echo with kind k until the peer closes; zero-copy buffers are released. */
static void same_cpu_child(enum send_kind k)
{
	int fd = t_ok(rpal_connect("idle-cpu", NULL, 0));
	struct rpal_msg m;

	for (;;) {
		int n = rpal_recv_msg(fd, &m, 1, 0);
		if (n <= 0)
			_exit(0);
		send_by(fd, k, m.data, m.len);
		rpal_msg_release(fd, &m, 1);
	}
}

static void same_cpu_no_spin(void)
{
	cpu_set_t one;
	int lfd, cpu = sched_getcpu();

	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	t_check(sched_setaffinity(0, sizeof(one), &one) == 0, "pin to CPU %d", cpu);
	if (cpu_ns(getpid()) < 0)
		t_skip("no /proc/PID/schedstat: cannot tell a spinning waiter from a sleeping one");
	rpal_fini();
	init_spinning();
	lfd = t_ok(rpal_listen("idle-cpu", NULL));
	for (enum send_kind k = 0; k < SEND_KINDS; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			init_spinning();
			same_cpu_child(k);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		long mine = 0, its = 0;
		for (int i = 0; i < SAME_CPU_TRIPS; i++) {
			char b[64];
			send_by(fd, k, "ping", 4);
			t_check(rpal_recv(fd, b, sizeof(b), 0) == 4, "echo %d by %s", i, send_names[k]);
			if (i == 0) {   /* from here on each side has the other's CPU in its hint */
				mine = cpu_ns(getpid());
				its = cpu_ns(pid);
			}
		}
		mine = cpu_ns(getpid()) - mine;
		its = cpu_ns(pid) - its;
		printf("%s, both on CPU %d, spin budget 1 s: %d round trips took %ld + %ld us of CPU\n",
		       send_names[k], cpu, SAME_CPU_TRIPS - 1, mine / 1000, its / 1000);
		t_check(mine + its < SAME_CPU_MAX_NS,
			"%s: %ld us of CPU for %d round trips: a waiter spun for a peer on its own CPU",
			send_names[k], (mine + its) / 1000, SAME_CPU_TRIPS - 1);
		rpal_close(fd);
		t_wait_ok(pid, "same-CPU peer");
	}
	rpal_close(lfd);
}

static void child(int use_epoll)
{
	int fd = t_ok(rpal_connect("idle", NULL, 0)), ep = -1;
	char b[16];

	if (use_epoll) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		ep = rpal_epoll_create(0);
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "add");
	}
	for (;;) {
		if (use_epoll) {
			struct epoll_event e;
			t_check(rpal_epoll_wait(ep, &e, 1, -1) == 1, "wait");
		}
		long n = rpal_recv(fd, b, sizeof(b), 0);
		if (n <= 0)
			_exit(0);
		t_ok(rpal_send(fd, b, (size_t)n, 0));
	}
}

int main(void)
{
	int lfd;

	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("idle", NULL));
	for (int use_epoll = 0; use_epoll < 2; use_epoll++) {
		char b[16];
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			child(use_epoll);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		t_ok(rpal_send(fd, "hi", 2, 0));
		t_check(rpal_recv(fd, b, sizeof(b), 0) == 2, "first echo");
		usleep(500000);         /* past the spin budget and the futex period */
		long before = t_proc_status(pid, "voluntary_ctxt_switches");
		sleep(1);
		long after = t_proc_status(pid, "voluntary_ctxt_switches");
		printf("%s: %ld wake-ups in 1 s of silence\n", use_epoll ? "rpal_epoll_wait" : "rpal_recv", after - before);
		t_check(before >= 0 && after - before <= 1, "%s woke %ld times while idle",
			use_epoll ? "rpal_epoll_wait" : "rpal_recv", after - before);
		t_ok(rpal_send(fd, "again", 5, 0));
		t_check(rpal_recv(fd, b, sizeof(b), 0) == 5, "echo after the idle second");
		rpal_close(fd);
		t_wait_ok(pid, "idle peer");
	}
	rpal_close(lfd);
	if (!t_skip_emulated("a waiter and its peer on one CPU", "peers forked from here on hang now and then"))
		same_cpu_no_spin();
	printf("PASS\n");
	return 0;
}
