/* SPDX-License-Identifier: MIT */
/*
 * Description: an idle process burns no CPU once the spin budget is spent.
 * A peer blocked in rpal_recv(), and one blocked in rpal_epoll_wait() on an
 * rpal-only set, are not woken even once in a second of silence (counted by
 * their voluntary context switches), and still wake for the next message.
 */
#include "helpers.h"

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
	printf("PASS\n");
	return 0;
}
