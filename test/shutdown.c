/* SPDX-License-Identifier: MIT */
/*
 * Description: rpal_shutdown() in each direction.  SHUT_RD wakes every
 * thread of ours blocked on the connection (a receive, a set on futexes,
 * a set in epoll_wait with an ordinary descriptor, a receive on a peer
 * without a wake page), delivers what was queued, then end of stream; the
 * peer's sends, blocked ones too, fail with EPIPE while ours still arrive.
 * SHUT_RDWR does both; any other how is EINVAL.  A peer that puts its
 * wake page word back after our bump cannot keep a receive asleep.  End
 * of stream is final: a slot published after it is not delivered.
 */
#include <sys/prctl.h>
#include <sys/socket.h>

#include "rawpeer.h"

struct blocked {
	int fd, ep;
	int zerocopy;
	long ret;
	struct epoll_event ev;
	_Atomic int done;
};

static void *recv_blocked(void *arg)
{
	struct blocked *b = arg;
	char buf[64];

	if (b->zerocopy) {
		struct rpal_msg m;
		b->ret = rpal_recv_msg(b->fd, &m, 1, 0);
	} else {
		b->ret = rpal_recv(b->fd, buf, sizeof(buf), 0);
	}
	atomic_store(&b->done, 1);
	return NULL;
}

/* A receiver that closes the connection as soon as it reads end of stream. */
static void *recv_then_close(void *arg)
{
	struct blocked *b = arg;
	char buf[64];

	b->ret = rpal_recv(b->fd, buf, sizeof(buf), 0);
	rpal_close(b->fd);
	atomic_store(&b->done, 1);
	return NULL;
}

static void *wait_blocked(void *arg)
{
	struct blocked *b = arg;

	b->ret = rpal_epoll_wait(b->ep, &b->ev, 1, -1);
	atomic_store(&b->done, 1);
	return NULL;
}

static void *send_blocked(void *arg)
{
	struct blocked *b = arg;

	b->ret = rpal_send(b->fd, "full", 4, 0);
	atomic_store(&b->done, 1);
	return NULL;
}

/* The peer's part in a race on our wake page word: in a signal handler of
 * our blocked receiver (so it is out of its futex, or not yet in it), wait
 * for rpal_shutdown()'s bump of the word, then put the word back. */
static _Atomic uint32_t *undo_word;
static _Atomic int undo_seen;

static __attribute__((unused)) void undo_bump(int sig)
{
	uint32_t seq = atomic_load(undo_word);
	uint64_t t0 = t_now_ns();

	(void)sig;
	atomic_store(&undo_seen, 1);
	while (atomic_load(undo_word) == seq && t_now_ns() - t0 < 2000000000ull)
		;
	atomic_store(undo_word, seq);
	atomic_store(&undo_seen, 2);
}

/* Start fn on b, check that it blocks, shut fd down for reading, and
 * check that fn returns within a second (else fail, leaving it blocked). */
static void shut_while_blocked(void *(*fn)(void *), struct blocked *b, int fd, int how, const char *what)
{
	pthread_t th;

	t_check(pthread_create(&th, NULL, fn, b) == 0, "pthread_create");
	usleep(100000);
	t_check(!atomic_load(&b->done), "%s returned %ld before the shutdown", what, b->ret);
	uint64_t t0 = t_now_ns();
	t_ok(rpal_shutdown(fd, how));
	while (!atomic_load(&b->done) && t_now_ns() - t0 < 1000000000ull)
		usleep(1000);
	t_check(atomic_load(&b->done), "%s still blocked a second after the shutdown", what);
	pthread_join(th, NULL);
}

int main(void)
{
	char buf[64];
	int a, b, lfd;

	t_ok(rpal_init(NULL));
	lfd = t_self_pair("shut", &a, &b);

	printf("how other than SHUT_RD, SHUT_WR, SHUT_RDWR: EINVAL\n");
	t_check(rpal_shutdown(b, 42) == -EINVAL, "how 42");

	printf("a blocking receive wakes with end of stream when its own side shuts down reading\n");
	{
		struct blocked r = { .fd = b };
		shut_while_blocked(recv_blocked, &r, b, SHUT_RD, "rpal_recv");
		t_check(r.ret == 0, "rpal_recv after SHUT_RD: %ld (%s), not end of stream", r.ret,
			rpal_strerror((int)r.ret));
	}
	printf("and stays at end of stream, blocking or not; a second SHUT_RD is harmless\n");
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "a later blocking receive");
	t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == 0, "a later non-blocking receive");
	t_ok(rpal_shutdown(b, SHUT_RD));

	printf("the peer's sends fail with EPIPE; ours still arrive\n");
	long r = rpal_send(a, "late", 4, 0);
	t_check(r == -EPIPE, "the peer's send after our SHUT_RD: %ld (%s)", r, rpal_strerror((int)r));
	t_ok(rpal_send(b, "back", 4, 0));
	t_check(rpal_recv(a, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "back", 4), "our message after SHUT_RD");
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("what was queued before SHUT_RD is delivered, then end of stream\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut2", &a, &b);
	for (int i = 0; i < 3; i++)
		t_ok(rpal_send(a, &i, sizeof(i), 0));
	t_ok(rpal_shutdown(b, SHUT_RD));
	for (int i = 0; i < 3; i++) {
		int v = -1;
		t_check(rpal_recv(b, &v, sizeof(v), 0) == sizeof(v) && v == i, "queued message %d", i);
	}
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "end of stream after the queued messages");
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("a receive of messages in place (rpal_recv_msg) wakes too\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut3", &a, &b);
	{
		struct blocked m = { .fd = b, .zerocopy = 1 };
		shut_while_blocked(recv_blocked, &m, b, SHUT_RD, "rpal_recv_msg");
		t_check(m.ret == 0, "rpal_recv_msg after SHUT_RD: %ld", m.ret);
	}
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("a peer blocked sending on a full ring wakes with EPIPE\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut4", &a, &b);
	{
		int n = 0;
		while (rpal_send(a, "fill", 4, RPAL_NONBLOCK) == 4)
			n++;
		t_check(n > 0, "the ring took nothing");
		struct blocked s = { .fd = a };
		shut_while_blocked(send_blocked, &s, b, SHUT_RD, "the peer's blocked rpal_send");
		t_check(s.ret == -EPIPE, "the peer's blocked send: %ld (%s)", s.ret, rpal_strerror((int)s.ret));
		for (int i = 0; i < n; i++)
			t_check(rpal_recv(b, buf, sizeof(buf), 0) == 4, "queued message %d of %d", i, n);
		t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "end of stream after the full ring");
	}
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	for (int how = SHUT_RD; how <= SHUT_RDWR; how += SHUT_RDWR - SHUT_RD) {
		printf("a peer asleep in a set for EPOLLOUT on a full ring wakes with EPOLLOUT at %s; its send fails with EPIPE\n",
		       how == SHUT_RD ? "SHUT_RD" : "SHUT_RDWR");
		t_ok(rpal_close(lfd));
		lfd = t_self_pair(how == SHUT_RD ? "shut4b" : "shut4c", &a, &b);
		while (rpal_send(a, "fill", 4, RPAL_NONBLOCK) == 4)
			;
		struct blocked w = { .ep = t_ok(rpal_epoll_create(0)) };
		struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.u64 = 6 };
		t_ok(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, a, &ev));
		struct epoll_event first;
		t_check(rpal_epoll_wait(w.ep, &first, 1, 0) == 0, "EPOLLOUT on a full ring");
		shut_while_blocked(wait_blocked, &w, b, how, "the peer's rpal_epoll_wait for EPOLLOUT");
		t_check(w.ret == 1 && w.ev.data.u64 == 6 && (w.ev.events & EPOLLOUT), "rpal_epoll_wait returned %ld, events %#x",
			w.ret, w.ev.events);
		t_check(rpal_send(a, "x", 1, RPAL_NONBLOCK) == -EPIPE, "the send it reported");
		t_check(rpal_epoll_wait(w.ep, &first, 1, 0) == 0, "EPOLLOUT reported once (edge-triggered)");
		t_ok(rpal_close(w.ep));
		t_ok(rpal_close(a));
		t_ok(rpal_close(b));
	}

	printf("our own set asleep for EPOLLOUT on a full ring wakes with EPOLLOUT when we shut down writing\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut4d", &a, &b);
	{
		while (rpal_send(a, "fill", 4, RPAL_NONBLOCK) == 4)
			;
		struct blocked w = { .ep = t_ok(rpal_epoll_create(0)) };
		struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 5 };
		t_ok(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, a, &ev));
		shut_while_blocked(wait_blocked, &w, a, SHUT_WR, "our rpal_epoll_wait for EPOLLOUT");
		t_check(w.ret == 1 && w.ev.data.u64 == 5 && (w.ev.events & EPOLLOUT), "rpal_epoll_wait returned %ld, events %#x",
			w.ret, w.ev.events);
		t_check(rpal_send(a, "x", 1, RPAL_NONBLOCK) == -EPIPE, "the send it reported");
		t_ok(rpal_close(w.ep));
	}
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("a thread asleep in an rpal-only set wakes with EPOLLIN | EPOLLRDHUP\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut5", &a, &b);
	{
		struct blocked w = { .ep = t_ok(rpal_epoll_create(0)) };
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 7 };
		t_ok(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, b, &ev));
		shut_while_blocked(wait_blocked, &w, b, SHUT_RD, "rpal_epoll_wait (futexes)");
		t_check(w.ret == 1 && w.ev.data.u64 == 7 && (w.ev.events & EPOLLIN) && (w.ev.events & EPOLLRDHUP),
			"rpal_epoll_wait returned %ld, events %#x", w.ret, w.ev.events);
		t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == 0, "the receive it reported");
		t_ok(rpal_close(w.ep));
	}
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("a thread asleep in a set that also holds a pipe (in epoll_wait) wakes the same way\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut6", &a, &b);
	{
		int p[2];
		t_check(pipe(p) == 0, "pipe");
		struct blocked w = { .ep = t_ok(rpal_epoll_create(0)) };
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 8 };
		struct epoll_event pev = { .events = EPOLLIN, .data.u64 = 9 };
		t_ok(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, b, &ev));
		t_ok(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, p[0], &pev));
		shut_while_blocked(wait_blocked, &w, b, SHUT_RD, "rpal_epoll_wait (epoll_wait)");
		t_check(w.ret == 1 && w.ev.data.u64 == 8 && (w.ev.events & EPOLLRDHUP),
			"rpal_epoll_wait returned %ld, data %llu, events %#x", w.ret,
			(unsigned long long)w.ev.data.u64, w.ev.events);
		t_ok(rpal_close(w.ep));
		close(p[0]);
		close(p[1]);
	}
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));

	printf("SHUT_RDWR: the peer reads end of stream and its sends fail; we read end of stream\n");
	t_ok(rpal_close(lfd));
	lfd = t_self_pair("shut7", &a, &b);
	t_ok(rpal_shutdown(b, SHUT_RDWR));
	t_check(rpal_recv(a, buf, sizeof(buf), 0) == 0, "the peer's receive");
	t_check(rpal_send(a, "x", 1, 0) == -EPIPE, "the peer's send");
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "our receive");
	t_check(rpal_send(b, "x", 1, 0) == -EPIPE, "our send");
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));
	t_ok(rpal_close(lfd));

	printf("end of stream is final: what the peer publishes after it is not delivered\n");
	for (int own = 0; own < 2; own++) {
		lfd = t_self_pair("shut8", &a, &b);
		struct rpal_conn *ca = conn_of(a);
		struct rpal_msg m;

		t_ok(rpal_send(a, "last", 4, 0));
		t_ok(rpal_shutdown(own ? b : a, own ? SHUT_RD : SHUT_WR));
		t_check(rpal_recv(b, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "last", 4), "the last message");
		t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "end of stream");
		/* A hostile peer: the slot after the end, as its next send would
		 * have published it. */
		raw_publish(ca, (uint32_t)ca->tail + 1, 4, RPAL_SLOT_INLINE, 0);
		long n = rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK);
		t_check(n == 0, "%s: a receive after end of stream got %ld (%s)", own ? "our SHUT_RD" : "its SHUT_WR",
			n, n < 0 ? rpal_strerror((int)n) : "a message");
		t_check(rpal_recv(b, buf, sizeof(buf), 0) == 0, "a blocking receive after end of stream");
		t_check(rpal_recv_msg(b, &m, 1, RPAL_NONBLOCK) == 0, "rpal_recv_msg after end of stream");
		t_ok(rpal_close(a));
		t_ok(rpal_close(b));
		t_ok(rpal_close(lfd));
	}

	printf("a receiver that closes on end of stream at once, while rpal_shutdown() still runs (%ld times)\n",
	       t_scaled(200));
	lfd = t_ok(rpal_listen("shut9", NULL));
	for (long i = 0; i < t_scaled(200); i++) {
		pthread_t th;
		void *acc;

		t_check(pthread_create(&th, NULL, t_accept_one, &lfd) == 0, "pthread_create");
		a = t_ok(rpal_connect("shut9", NULL, 0));
		pthread_join(th, &acc);
		b = (int)(intptr_t)acc;
		t_check(b >= 0, "accept");
		struct blocked rc = { .fd = b };
		t_check(pthread_create(&th, NULL, recv_then_close, &rc) == 0, "pthread_create");
		if (i & 1)
			usleep(200);    /* half of them asleep by now */
		t_ok(rpal_shutdown(b, SHUT_RD));
		pthread_join(th, NULL);
		t_check(rc.ret == 0, "round %ld: the receive returned %ld", i, rc.ret);
		t_ok(rpal_close(a));
	}
	t_ok(rpal_close(lfd));

	printf("a receive wakes on SHUT_RD although the peer puts its wake page word back after our bump\n");
#if defined(__SANITIZE_THREAD__)
	/* TSan runs a signal handler only once the thread is out of its
	 * system call: the peer's part cannot be played there. */
	printf("  not under TSan (it defers signal handlers)\n");
#else
	{
		int a2, b2, l2 = t_self_pair("shut9", &a2, &b2);
		struct blocked rb = { .fd = b2 };
		struct sigaction sa = { .sa_handler = undo_bump, .sa_flags = SA_RESTART };
		pthread_t th;

		undo_word = conn_of(b2)->wake_mine;
		t_check(undo_word, "no wake page between two librpal processes");
		t_check(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
		t_check(pthread_create(&th, NULL, recv_blocked, &rb) == 0, "pthread_create");
		usleep(100000);
		t_check(!atomic_load(&rb.done), "rpal_recv returned %ld before the shutdown", rb.ret);
		/* Restarted after the handler, its FUTEX_WAIT finds the word it
		 * sampled: only a wake-up once it is queued there ends it. */
		pthread_kill(th, SIGUSR1);
		uint64_t t0 = t_now_ns();
		while (!atomic_load(&undo_seen) && t_now_ns() - t0 < 2000000000ull)
			usleep(100);
		t_check(atomic_load(&undo_seen), "the receiver's signal handler did not run");
		t0 = t_now_ns();
		t_ok(rpal_shutdown(b2, SHUT_RD));
		while (!atomic_load(&rb.done) && t_now_ns() - t0 < 1000000000ull)
			usleep(1000);
		t_check(atomic_load(&undo_seen) == 2, "the word was never bumped");
		t_check(atomic_load(&rb.done), "rpal_recv still blocked 1 s after SHUT_RD");
		pthread_join(th, NULL);
		t_check(rb.ret == 0, "rpal_recv after SHUT_RD: %ld (%s)", rb.ret, rpal_strerror((int)rb.ret));
		signal(SIGUSR1, SIG_DFL);
		t_ok(rpal_close(a2));
		t_ok(rpal_close(b2));
		t_ok(rpal_close(l2));
	}
#endif

	printf("a receive from a peer without a wake page (as the Go package is) wakes too\n");
	{
		unsigned myslot;
		int ready[2];
		char c;
		t_ok(rpal_self(&myslot, NULL, NULL));
		lfd = t_ok(rpal_listen("shut8", NULL));
		t_check(pipe(ready) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			char why[128] = "";
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			rpal_fini();
			t_ok(rpal_init(NULL));
			int s = raw_hello("shut8", RAW_NONE, myslot);
			t_check(raw_answer(s, why, sizeof(why)) == 0, "raw client refused: %s", why);
			(void)!write(ready[1], "k", 1);
			pause();
			_exit(0);
		}
		int fd;
		do
			fd = rpal_accept(lfd, RPAL_NONBLOCK);
		while (fd == -EAGAIN);
		t_check(fd >= 0, "raw client refused: %s", rpal_strerror(fd));
		t_check(read(ready[0], &c, 1) == 1, "the raw client did not get its welcome");
		struct blocked rr = { .fd = fd };
		shut_while_blocked(recv_blocked, &rr, fd, SHUT_RD, "rpal_recv (no wake page)");
		t_check(rr.ret == 0, "rpal_recv after SHUT_RD: %ld (%s)", rr.ret, rpal_strerror((int)rr.ret));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		t_ok(rpal_close(fd));
		t_ok(rpal_close(lfd));
		close(ready[0]);
		close(ready[1]);
	}
	rpal_fini();
	printf("PASS\n");
	return T_EXIT_PASS;
}
