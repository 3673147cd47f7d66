/* SPDX-License-Identifier: MIT */
/*
 * buf_freed: a message copied out of the peer's buffer while the peer
 * frees that buffer is refused (EPROTO), never returned as if whole.
 *
 * memcpy is wrapped (-Wl,--wrap=memcpy) so that rpal_recv's copy of a
 * 64 KiB message stops half way while the peer frees the buffer and its
 * memory is written again; then the copy goes on.  Two ways to free it:
 *  1. A closed peer keeps our connection's block and the buffers we hold
 *     until we close too, unless it runs short of room: it closes, takes
 *     connections until its 1 MiB arena is full (which frees our block)
 *     and fills what it can allocate with 'B'.
 *  2. A peer that cannot keep its block at its close (no descriptor left
 *     for the lingering copy of its socket) frees it at once; arena_free
 *     is wrapped there too, so that the buffer is written again, as
 *     another of its threads could, before the close has finished.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "helpers.h"

#define BIG (64u << 10)
#define MAX_MORE 200

void *__real_memcpy(void *dst, const void *src, size_t n);
long __real_arena_free(void *p);

static int at_fd_limit;         /* the second way */
static _Atomic int armed;       /* ours: the copy to interrupt */
static char *peer_msg;          /* the peer's: the buffer to reuse in its close */
static int to_peer[2], from_peer[2];
static int more[MAX_MORE], nmore;

/* The first half of rpal_recv's copy of the big message, then the peer's
 * free and reuse, then the rest. */
void *__wrap_memcpy(void *dst, const void *src, size_t n)
{
	char b;

	if (n != BIG || !atomic_exchange(&armed, 0))
		return __real_memcpy(dst, src, n);
	__real_memcpy(dst, src, n / 2);
	(void)!write(to_peer[1], "c", 1);
	if (!at_fd_limit) {
		/* Its arena fills up with connection blocks: the last ones find
		 * room only by freeing ours. */
		while (nmore < MAX_MORE) {
			long r = rpal_connect("buf-freed", NULL, 0);
			if (r < 0)
				break;
			more[nmore++] = (int)r;
		}
		(void)!write(to_peer[1], "f", 1);
	}
	t_check(read(from_peer[0], &b, 1) == 1, "the peer's reuse");
	t_check(b == 'o', "the peer did not reuse the buffer's memory (%c): nothing to test", b);
	return __real_memcpy((char *)dst + n / 2, (const char *)src + n / 2, n - n / 2);
}

/* In the peer, the second way: the message's buffer, once freed, is
 * written again, and the close waits until our copy is done. */
long __wrap_arena_free(void *p)
{
	long r = __real_arena_free(p);
	char b;

	if (p && p == peer_msg) {
		peer_msg = NULL;
		memset((char *)p + BIG / 2, 'B', BIG / 2);
		(void)!write(from_peer[1], "o", 1);
		(void)!read(to_peer[0], &b, 1);
	}
	return r;
}

static void peer(void)
{
	struct rpal_config cfg;
	char b, *msg, *p;
	int l, a;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rpal_fini();
	rpal_config_default(&cfg);
	cfg.arena_size = 1 << 20;
	t_ok(rpal_init(&cfg));
	l = (int)t_ok(rpal_listen("buf-freed", NULL));
	(void)!write(from_peer[1], "l", 1);
	a = (int)t_ok(rpal_accept(l, 0));
	msg = rpal_buf_alloc(BIG);
	t_check(msg != NULL, "rpal_buf_alloc");
	memset(msg, 'A', BIG);
	t_ok(rpal_send_buf(a, msg, BIG, 0));
	t_check(read(to_peer[0], &b, 1) == 1, "the client's copy");
	if (at_fd_limit) {
		struct rlimit rl = { 64, 64 };
		t_check(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
		while (open("/dev/null", O_RDONLY) >= 0)
			;
		peer_msg = msg;
		rpal_close(a);
		pause();
	}
	t_ok(rpal_close(a));
	/* Take the client's connections until it can make no more. */
	for (;;) {
		struct pollfd pfd = { .fd = to_peer[0], .events = POLLIN };
		if (rpal_accept(l, RPAL_NONBLOCK) < 0 && poll(&pfd, 1, 1) == 1)
			break;
	}
	t_check(read(to_peer[0], &b, 1) == 1 && b == 'f', "the client's flood");
	while ((p = rpal_buf_alloc(4096)))
		memset(p, 'B', 4096);
	/* Whether the second half of our old message changed. */
	b = 'n';
	for (size_t i = BIG / 2; i < BIG; i++)
		if (msg[i] != 'A')
			b = 'o';
	(void)!write(from_peer[1], &b, 1);
	pause();
}

static void one_case(void)
{
	static char buf[BIG];
	size_t bad = 0;
	pid_t pid;
	char b;
	long r;

	t_check(pipe(to_peer) == 0 && pipe(from_peer) == 0, "pipe");
	pid = fork();
	if (pid == 0)
		peer();
	t_check(read(from_peer[0], &b, 1) == 1, "the peer's start");
	int c = (int)t_ok(rpal_connect("buf-freed", NULL, 0));

	printf("a 64 KiB message whose buffer the peer frees and reuses while we copy it, %s\n",
	       at_fd_limit ? "closing with no descriptor to spare" : "short of room after its close");
	atomic_store(&armed, 1);
	r = rpal_recv(c, buf, sizeof(buf), 0);
	t_check(!atomic_load(&armed), "rpal_recv did not copy the message with memcpy");
	if (r == BIG)
		for (size_t i = 0; i < BIG; i++)
			bad += buf[i] != 'A';
	printf("  rpal_recv: %ld (%s), %zu bytes not the message's\n", r,
	       r < 0 ? rpal_strerror((int)r) : "a message", bad);
	t_check(r == -EPROTO, "rpal_recv returned %ld with %zu bytes of other memory", r, bad);
	t_check(rpal_recv(c, buf, sizeof(buf), RPAL_NONBLOCK) == -EPROTO, "the error is not sticky");

	(void)!write(to_peer[1], "v", 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	rpal_close(c);
	while (nmore)
		rpal_close(more[--nmore]);
	close(to_peer[0]);
	close(to_peer[1]);
	close(from_peer[0]);
	close(from_peer[1]);
}

int main(void)
{
	t_ok(rpal_init(NULL));
	one_case();
	at_fd_limit = 1;
	one_case();
	printf("PASS\n");
	return 0;
}
