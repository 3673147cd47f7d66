/* SPDX-License-Identifier: MIT */
/*
 * Description: the peer's death ends a blocking receive at once, however
 * our threads meet it.  With every thread on one CPU and librpal's lock
 * held, the peer is killed; one thread's non-blocking receive notes the
 * watcher's news and waits for the lock to mark the peer gone; a second
 * thread's blocking receive finds the news noted and sleeps without
 * polling the peer.  When the lock is let go the watcher, first in line,
 * must end that sleep with a wake-up or two, not keep waking a receiver
 * that goes back to sleep (counted on the wake page word it bumps).
 */
#include "rawpeer.h"

struct recv_thread {
	int fd, flags;
	long ret;
	_Atomic int done;
};

static void *recv_one(void *arg)
{
	struct recv_thread *t = arg;
	char buf[16];

	t->ret = rpal_recv(t->fd, buf, sizeof(buf), t->flags);
	atomic_store(&t->done, 1);
	return NULL;
}

/* Until cond holds, or ms pass; whether it held. */
#define WAIT_FOR(cond, ms) ({ \
	uint64_t _end = t_now_ns() + (uint64_t)(ms) * 1000000; \
	while (!(cond) && t_now_ns() < _end) \
		usleep(200); \
	(cond); })

int main(void)
{
	int rounds = 5, lfd;
	cpu_set_t one;

	/* Its peers are forked while our threads sleep in futexes, and such
	 * a child of qemu-user 10.0 now and then hangs in the emulator's own
	 * futex before it runs: the test would hang with it. */
	if (t_emulator())
		t_skip("a peer forked here now and then hangs in the emulator");

	/* One CPU for all our threads (the watcher, made later, inherits
	 * it): a woken receiver runs only when the waker lets it. */
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
	t_check(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("dwake", NULL));
	printf("%d rounds: a peer killed while librpal's lock is held; one receive waits for the lock, one sleeps\n",
	       rounds);
	for (int r = 0; r < rounds; r++) {
		int ready[2], fd;
		char c;

		t_check(pipe(ready) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			t_ok(rpal_connect("dwake", NULL, 0));
			(void)!write(ready[1], "k", 1);
			pause();
			_exit(0);
		}
		do
			fd = rpal_accept(lfd, RPAL_NONBLOCK);
		while (fd == -EAGAIN);
		t_check(fd >= 0, "accept: %s", rpal_strerror(fd));
		t_check(read(ready[0], &c, 1) == 1, "the client did not connect");
		close(ready[0]);
		close(ready[1]);
		struct rpal_conn *conn = conn_of(fd);
		if (!conn->wake_mine)
			t_skip("no wake page");

		struct recv_thread a = { .fd = fd, .flags = RPAL_NONBLOCK }, b = { .fd = fd };
		uint32_t seq = atomic_load(&watch_seq), word;
		pthread_t ta, tb;

		pthread_mutex_lock(&rpal_g.lock);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		/* The watcher has the news and waits for the lock. */
		t_check(WAIT_FOR(atomic_load(&watch_seq) != seq, 2000), "round %d: the watcher saw no death", r);
		/* A notes it and waits for the lock to mark the peer gone. */
		t_check(pthread_create(&ta, NULL, recv_one, &a) == 0, "pthread_create");
		usleep(20000);
		t_check(!atomic_load(&a.done), "round %d: the non-blocking receive returned %ld with the lock held", r,
			a.ret);
		/* B finds the news noted, and sleeps. */
		t_check(pthread_create(&tb, NULL, recv_one, &b) == 0, "pthread_create");
		t_check(WAIT_FOR(atomic_load(&conn->asleep_mine[0]) == 1, 2000), "round %d: the receive did not sleep", r);
		usleep(20000);
		word = atomic_load(conn->wake_mine);
		pthread_mutex_unlock(&rpal_g.lock);

		bool woke = WAIT_FOR(atomic_load(&a.done) && atomic_load(&b.done), 5000);
		t_check(woke, "round %d: 5 s after the death, the non-blocking receive %s, the blocking one %s", r,
			atomic_load(&a.done) ? "returned" : "is still waiting",
			atomic_load(&b.done) ? "returned" : "still sleeps");
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		uint32_t wakes = atomic_load(conn->wake_mine) - word;
		printf("  round %d: %u wake-up%s\n", r, wakes, wakes == 1 ? "" : "s");
		t_check(wakes <= 32, "round %d: the watcher woke the receiver %u times", r, wakes);
		t_check(b.ret == -ECONNRESET, "round %d: the blocking receive returned %ld (%s)", r, b.ret,
			rpal_strerror((int)b.ret));
		t_check(a.ret == -ECONNRESET || a.ret == -EAGAIN, "round %d: the non-blocking receive returned %ld (%s)",
			r, a.ret, rpal_strerror((int)a.ret));
		t_ok(rpal_close(fd));
	}
	struct rpal_stats st;
	t_ok(rpal_stats(&st));
	t_check(st.nr_conns == 0 && st.nr_peers_mapped == 0, "%u connections, %u peers left", st.nr_conns,
		st.nr_peers_mapped);
	t_ok(rpal_close(lfd));
	rpal_fini();
	printf("PASS\n");
	return T_EXIT_PASS;
}
