/* SPDX-License-Identifier: MIT */
/*
 * puppet.h - a peer process driven by one-letter commands over a pipe, so a
 * test can make it send, read, shut down or die at exactly the right time.
 */
#ifndef RPAL_TEST_PUPPET_H
#define RPAL_TEST_PUPPET_H

#include "helpers.h"

struct puppet {
	pid_t pid;
	int cmd;        /* we write commands */
	int ack;        /* it answers one byte per command */
};

/* Commands: 's' send one 32-byte message; 'S' send 200; 'r' read all
 * queued; 'w' shutdown(SHUT_WR); 'c' rpal_close; 'q' exit. */
static void puppet_loop(const char *service, int cmd, int ack)
{
	int fd = t_ok(rpal_connect(service, NULL, 0));
	char c, buf[64];
	uint64_t n = 0;

	(void)!write(ack, "k", 1);
	while (read(cmd, &c, 1) == 1) {
		switch (c) {
		case 's':
			memcpy(buf, &n, sizeof(n));
			n++;
			t_ok(rpal_send(fd, buf, 32, 0));
			break;
		case 'S':
			for (int i = 0; i < 200; i++) {
				memcpy(buf, &n, sizeof(n));
				n++;
				t_ok(rpal_send(fd, buf, 32, 0));
			}
			break;
		case 'r':
			while (rpal_recv(fd, buf, sizeof(buf), RPAL_NONBLOCK) > 0)
				;
			break;
		case 'w':
			t_ok(rpal_shutdown(fd, SHUT_WR));
			break;
		case 'c':
			t_ok(rpal_close(fd));
			break;
		case 'q':
			exit(0);
		}
		(void)!write(ack, "k", 1);
	}
	exit(0);
}

/* Start a puppet connected to service; the caller accepts its connection. */
static struct puppet puppet_start(const char *service)
{
	struct puppet p;
	int a[2], b[2];
	char c;

	t_check(pipe(a) == 0 && pipe(b) == 0, "pipe");
	p.pid = fork();
	if (p.pid == 0) {
		close(a[1]);
		close(b[0]);
		rpal_fini();
		t_ok(rpal_init(NULL));
		puppet_loop(service, a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	p.cmd = a[1];
	p.ack = b[0];
	(void)c;
	return p;
}

/* Wait until the puppet connected (call after accepting). */
static void puppet_ready(struct puppet *p)
{
	char c;

	t_check(read(p->ack, &c, 1) == 1, "puppet did not connect");
}

static void puppet_do(struct puppet *p, char what)
{
	char c;

	t_check(write(p->cmd, &what, 1) == 1, "puppet command");
	t_check(read(p->ack, &c, 1) == 1, "puppet did not answer '%c'", what);
}

static void puppet_kill(struct puppet *p)
{
	kill(p->pid, SIGKILL);
	waitpid(p->pid, NULL, 0);
	close(p->cmd);
	close(p->ack);
}

#endif
