/* SPDX-License-Identifier: MIT */
/*
 * watch.c - the watcher thread: turns "a peer hung up or died" (and "an
 * ordinary descriptor of an rpal-only epoll set is ready") into a futex
 * wake-up.
 *
 * A dead peer bumps no futex word, so without this thread futex sleepers
 * would need a timeout, which costs an hrtimer on every sleep and wakes
 * idle processes.  The thread sleeps in epoll_wait on every connection's
 * socket and pidfd, and on the user descriptor of every rpal-only epoll
 * set: it costs nothing while nothing happens.  On an event it bumps
 * watch_seq, then wakes whoever the event concerns:
 *   - a blocking send or receive on a connection with a wake page waits on
 *     its word alone: the watcher bumps that word;
 *   - an epoll set waits on its private kick_seq and its connections'
 *     words: the watcher bumps the kick_seq of the connection's set, or of
 *     the set whose descriptor it is (one word fewer per futex_waitv, which
 *     costs about 300 cycles per word on every wake-up);
 *   - anyone else (a receive without a wake page) waits on watch_seq too.
 * Deaths are rare, so the herd on watch_seq is not a concern.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define WATCH_STOP 1ull
#define WATCH_KICK 2ull
/* How often lingering blocks are checked against their deadline. */
#define LINGER_POLL_MS 500

static struct {
	pthread_mutex_t lock;
	bool started;
	pthread_t thread;
	int epfd;
	int stopfd;
	int kickfd;                  /* a block started to linger */
	_Atomic bool lingering;      /* some may be: poll their deadlines */
} watch = { .lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .stopfd = -1, .kickfd = -1 };

_Atomic uint32_t watch_seq;

/*
 * Wake our threads asleep on c: those on its wake page word, and its set's
 * on futexes (and, with kernel, in epoll_wait too: a set with ordinary
 * descriptors sleeps there, and only the watched descriptors' own events
 * reach it).  rpal_g.lock held: a set frees c only after obj_clear().
 *
 * The peer can write the wake page word too, and put it back after our
 * bump: a sleeper that sampled it and was not yet queued in FUTEX_WAIT
 * (a signal handler can hold it there) would then sleep through this
 * wake-up.  So for the sleepers that must leave (leave: bit 0 those
 * receiving, bit 1 those sending; they will not sleep again), bump and
 * wake until they are out: once queued, FUTEX_WAKE reaches them whatever
 * the word holds.
 */
static void conn_wake_locked(struct rpal_conn *c, bool kernel, unsigned leave)
{
	struct rpal_ep *ep;

	for (unsigned n = 0; c->wake_mine; n++) {
		if (n)
			sched_yield();
		atomic_fetch_add(c->wake_mine, 1);
		syscall(SYS_futex, c->wake_mine, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		if (!((leave & 1) && atomic_load(&c->asleep_mine[0])) && !((leave & 2) && atomic_load(&c->asleep_mine[1])))
			break;
	}
	if ((ep = load_acquire(&c->set)) != NULL) {
		if (kernel)
			ep_kick(ep);
		else
			epoll_wake_futex(ep);
	}
}

/*
 * Something of ours changed on c that its sleepers must look at (we shut
 * down reading): wake them all, wherever they sleep.  Only sleepers with
 * neither a wake page nor a set wait on watch_seq, and they wake the
 * whole process's like them: it is bumped only for a connection that has
 * them.  rpal_g.lock held.
 */
void watch_wake_conn(struct rpal_conn *c)
{
	conn_wake_locked(c, true, 1);   /* receivers return once the ring is empty */
	if (!c->wake_mine) {
		atomic_fetch_add(&watch_seq, 1);
		syscall(SYS_futex, &watch_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	}
	if (c->shut_kick >= 0)
		(void)!eventfd_write(c->shut_kick, 1);
}

static void *watcher(void *arg)
{
	struct epoll_event ev[16];

	(void)arg;
	for (;;) {
		int n = epoll_wait(watch.epfd, ev, 16, load_relaxed(&watch.lingering) ? LINGER_POLL_MS : -1), i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return NULL;
		bool kicked = false, news = false;

		for (i = 0; i < n; i++) {
			if (ev[i].data.u64 == WATCH_STOP)
				return NULL;
			if (ev[i].data.u64 == WATCH_KICK)
				kicked = true;
			else
				news = true;
		}
		/* The kick is level-triggered: read whenever it is reported,
		 * or a kick that found nothing left to linger (its peer let go
		 * first) would be reported, and watch_seq bumped, for ever. */
		if (kicked)
			(void)!eventfd_read(watch.kickfd, &(eventfd_t){ 0 });
		/* A lingering block is freed as soon as its peer lets go, or
		 * when its time is up, not at the application's next call: an
		 * idle server would keep it, and the peer's slot, for ever. */
		if (kicked || load_relaxed(&watch.lingering))
			store_relaxed(&watch.lingering, linger_sweep(false));
		/* Only hang-ups and deaths concern the sleepers. */
		if (!news)
			continue;
		/* watch_seq first: a sleeper samples its word, then watch_seq,
		 * so it either polls its peer or finds its word bumped. */
		atomic_fetch_add(&watch_seq, 1);
		/* Connections and sets are found by descriptor under
		 * rpal_g.lock, so not after rpal_close() unmapped or freed
		 * them (a reused descriptor gets a spurious wake-up at worst). */
		pthread_mutex_lock(&rpal_g.lock);
		for (i = 0; i < n; i++) {
			uint64_t who = ev[i].data.u64 & ~(uint64_t)UINT32_MAX;
			struct rpal_obj *o = obj_get((int)(uint32_t)ev[i].data.u64);
			struct rpal_conn *c = (struct rpal_conn *)o;

			if (!o)
				continue;
			if (who == WATCH_CONN && o->kind == OBJ_CONN) {
				/* The event may be an earlier connection's on the
				 * same descriptor: what it says is looked at again. */
				unsigned leave = 0;

				if (conn_hung_up(c)) {
					leave = 3;      /* everyone: it is gone */
					atomic_store(&c->hung_up, true);
					/* A local peer is checked without a system
					 * call (conn_poll_peer): say it here. */
					if (c->local)
						store_release(&c->local_gone, true);
					/* Seen now, by whoever reads the statistics
					 * page, not only after the application's
					 * next call. */
					atomic_fetch_or_explicit(&c->st->status, RPAL_STAT_PEER_GONE,
								 memory_order_relaxed);
				}
				conn_wake_locked(c, false, leave);
			} else if (who == WATCH_SET && o->kind == OBJ_EPOLL) {
				epoll_wake_futex((struct rpal_ep *)o);
			}
		}
		pthread_mutex_unlock(&rpal_g.lock);
		syscall(SYS_futex, &watch_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	}
}

/* Start the thread once; 0 or -errno.  Signals stay with the application's threads. */
static int watch_start_locked(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = WATCH_STOP };
	struct epoll_event kick = { .events = EPOLLIN, .data.u64 = WATCH_KICK };
	sigset_t all, old;
	int ret;

	if (watch.started)
		return 0;
	watch.epfd = epoll_create1(EPOLL_CLOEXEC);
	watch.stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	watch.kickfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (watch.epfd < 0 || watch.stopfd < 0 || watch.kickfd < 0 ||
	    epoll_ctl(watch.epfd, EPOLL_CTL_ADD, watch.stopfd, &ev) < 0 ||
	    epoll_ctl(watch.epfd, EPOLL_CTL_ADD, watch.kickfd, &kick) < 0) {
		ret = -errno;
		goto fail;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&watch.thread, NULL, watcher, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		goto fail;
	watch.started = true;
	return 0;
fail:
	if (watch.epfd >= 0)
		close(watch.epfd);
	if (watch.stopfd >= 0)
		close(watch.stopfd);
	if (watch.kickfd >= 0)
		close(watch.kickfd);
	watch.epfd = watch.stopfd = watch.kickfd = -1;
	return rpal_fail(-ret, "cannot start the watcher thread");
}

/* Watch fd (edge-triggered) for events; starts the thread on first use.
 * who: WATCH_CONN or WATCH_SET with the descriptor of the connection or
 * set to wake. */
int watch_add(int fd, uint32_t events, uint64_t who)
{
	struct epoll_event ev = { .events = events | EPOLLET, .data.u64 = who };
	int ret;

	pthread_mutex_lock(&watch.lock);
	ret = watch_start_locked();
	if (!ret && epoll_ctl(watch.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
		ret = rpal_fail(errno, "cannot watch descriptor %d", fd);
	pthread_mutex_unlock(&watch.lock);
	return ret;
}

/*
 * A closed connection's block lingers on sock (a private copy of its
 * socket): wake the watcher so that it frees the block when the peer hangs
 * up, or at its deadline.  Without the watcher the application's next call
 * sweeps.
 */
void watch_linger(int sock)
{
	struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLET, .data.u64 = WATCH_KICK };

	pthread_mutex_lock(&watch.lock);
	if (!watch_start_locked()) {
		epoll_ctl(watch.epfd, EPOLL_CTL_ADD, sock, &ev);
		store_relaxed(&watch.lingering, true);
		(void)!eventfd_write(watch.kickfd, 1);
	}
	pthread_mutex_unlock(&watch.lock);
}

void watch_del(int fd)
{
	pthread_mutex_lock(&watch.lock);
	if (watch.started)
		epoll_ctl(watch.epfd, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_unlock(&watch.lock);
}

/* rpal_fini(): stop and join the thread. */
void watch_stop(void)
{
	pthread_t th;
	bool started;

	pthread_mutex_lock(&watch.lock);
	started = watch.started;
	th = watch.thread;
	if (started)
		(void)!eventfd_write(watch.stopfd, 1);
	pthread_mutex_unlock(&watch.lock);
	if (!started)
		return;
	/* Not under watch.lock: the thread may wait for rpal_g.lock, whose
	 * holder (a handshake) may wait for watch.lock. */
	pthread_join(th, NULL);
	pthread_mutex_lock(&watch.lock);
	close(watch.epfd);
	close(watch.stopfd);
	close(watch.kickfd);
	watch.epfd = watch.stopfd = watch.kickfd = -1;
	watch.started = false;
	store_relaxed(&watch.lingering, false);
	pthread_mutex_unlock(&watch.lock);
}

/* A forked child has no watcher thread: forget the parent's. */
void watch_forget_child(void)
{
	pthread_mutex_init(&watch.lock, NULL);
	if (watch.started) {
		close(watch.epfd);
		close(watch.stopfd);
		close(watch.kickfd);
	}
	watch.epfd = watch.stopfd = watch.kickfd = -1;
	watch.started = false;
	store_relaxed(&watch.lingering, false);
}
