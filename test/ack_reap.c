/* SPDX-License-Identifier: MIT */
/*
 * Description: a buffer the peer released comes back to the allocation
 * that needs it, whichever connection the release came on and though
 * nothing was sent on that connection since.  Buffers of a quarter of the
 * arena plus a byte take half of it each (blocks are powers of two), so a
 * second one fits only once the first is back.  A peer on two connections
 * releases a zero-copy buffer on A and a copied message on B; after each,
 * rpal_buf_alloc() and a copying rpal_send() on the other connection must
 * find the room.
 */
#include <sys/prctl.h>

#include "helpers.h"

static char service[64];

/* Receive one message on fd, release it, say so with a small one. */
static void release_one(int fd)
{
	struct rpal_msg m;

	t_check(rpal_recv_msg(fd, &m, 1, 0) == 1, "peer: receive");
	t_ok(rpal_msg_release(fd, &m, 1));
	t_ok(rpal_send(fd, "released", 8, 0));
}

static void peer(void)
{
	int a, b;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rpal_fini();
	t_ok(rpal_init(NULL));
	a = (int)t_ok(rpal_connect(service, NULL, 0));
	b = (int)t_ok(rpal_connect(service, NULL, 0));
	release_one(a);
	release_one(b);
	release_one(a);
	_exit(0);
}

static void wait_released(int fd)
{
	char b[16];

	t_check(rpal_recv(fd, b, sizeof(b), 0) == 8 && !memcmp(b, "released", 8), "the peer's word");
}

int main(void)
{
	struct rpal_stats st0, st;
	size_t len;
	int lfd, a, b;
	char *copy;
	void *buf;
	pid_t pid;

	snprintf(service, sizeof(service), "reap-%d", (int)getpid());
	lfd = t_ok(rpal_listen(service, NULL));
	t_ok(rpal_stats(&st0));
	len = st0.arena_size / 4 + 1;
	if ((pid = fork()) == 0)
		peer();
	a = t_ok(rpal_accept(lfd, 0));
	b = t_ok(rpal_accept(lfd, 0));
	copy = malloc(len);
	t_check(copy, "malloc");
	memset(copy, 'c', len);

	printf("%zu-byte buffers, half of a %zu MiB arena each\n", len, st0.arena_size >> 20);
	buf = rpal_buf_alloc(len);
	t_check(buf, "first buffer");
	t_check(!rpal_buf_alloc(len), "a second buffer fits beside the first: the test proves nothing");
	memset(buf, 'z', len);
	t_ok(rpal_send_buf(a, buf, len, 0));
	wait_released(a);

	printf("released on A: a copying send on B finds the room\n");
	t_ok(rpal_send(b, copy, len, 0));
	wait_released(b);

	printf("released on B: rpal_buf_alloc() finds the room\n");
	buf = rpal_buf_alloc(len);
	t_check(buf, "rpal_buf_alloc(%zu) after the peer released what it held", len);
	t_ok(rpal_send_buf(a, buf, len, 0));
	wait_released(a);

	t_wait_ok(pid, "peer");
	rpal_close(a);
	rpal_close(b);
	rpal_close(lfd);
	t_check(t_eventually((rpal_stats(&st), st.arena_used == st0.arena_used), 2000),
		"arena use %zu, was %zu", st.arena_used, st0.arena_used);
	free(copy);
	printf("PASS\n");
	return T_EXIT_PASS;
}
