/* SPDX-License-Identifier: MIT */
/*
 * watch.c - the watcher thread: turns "a peer hung up or died" (and "an
 * ordinary descriptor of an rpal-only epoll set is ready") into a futex
 * wake-up.
 *
 * Futex sleepers (notify.c, epoll.c) wait on two words with futex_waitv():
 * the peer's wake_seq and our watch_seq; or, on a connection with a wake
 * page, a blocking receive waits on its word alone, which this thread bumps
 * for that connection's socket and pidfd.  A dead peer bumps no wake_seq, so
 * without this thread they would need a timeout, which costs an hrtimer on
 * every sleep and wakes idle processes.  The thread sleeps in epoll_wait on
 * every connection's socket and pidfd: it costs nothing while nothing
 * happens, and on any event bumps watch_seq and wakes every futex sleeper,
 * each of which then looks at its own connections.  Deaths are rare, so the
 * herd is not a concern.
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
#define WATCH_CONN 2ull     /* + a connection's descriptor */

static struct {
	pthread_mutex_t lock;
	bool started;
	pthread_t thread;
	int epfd;
	int stopfd;
} watch = { .lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .stopfd = -1 };

_Atomic uint32_t watch_seq;

static void *watcher(void *arg)
{
	struct epoll_event ev[16];

	(void)arg;
	for (;;) {
		int n = epoll_wait(watch.epfd, ev, 16, -1), i;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return NULL;
		for (i = 0; i < n; i++)
			if (ev[i].data.u64 == WATCH_STOP)
				return NULL;
		/* watch_seq first: a sleeper samples its word, then watch_seq,
		 * so it either polls its peer or finds its word bumped. */
		atomic_fetch_add(&watch_seq, 1);
		/* A connection with a wake page: its blocking receiver waits on
		 * its word alone.  Found by descriptor under rpal_g.lock, so
		 * not after rpal_close() unmapped it (a reused descriptor
		 * gets a spurious wake-up at worst). */
		pthread_mutex_lock(&rpal_g.lock);
		for (i = 0; i < n; i++) {
			struct rpal_conn *c;

			if (ev[i].data.u64 < WATCH_CONN)
				continue;
			c = obj_get((int)(ev[i].data.u64 - WATCH_CONN));
			if (c && c->kind == OBJ_CONN && c->wake_mine) {
				atomic_fetch_add(c->wake_mine, 1);
				syscall(SYS_futex, c->wake_mine, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
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
	sigset_t all, old;
	int ret;

	if (watch.started)
		return 0;
	watch.epfd = epoll_create1(EPOLL_CLOEXEC);
	watch.stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (watch.epfd < 0 || watch.stopfd < 0 || epoll_ctl(watch.epfd, EPOLL_CTL_ADD, watch.stopfd, &ev) < 0) {
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
	watch.epfd = watch.stopfd = -1;
	return rpal_fail(-ret, "cannot start the watcher thread");
}

/* Watch fd (edge-triggered) for events; starts the thread on first use.
 * conn: the connection (its descriptor) whose wake page word to bump too,
 * or -1. */
int watch_add_conn(int fd, uint32_t events, int conn)
{
	struct epoll_event ev = { .events = events | EPOLLET,
				  .data.u64 = conn >= 0 ? WATCH_CONN + (uint64_t)conn : 0 };
	int ret;

	pthread_mutex_lock(&watch.lock);
	ret = watch_start_locked();
	if (!ret && epoll_ctl(watch.epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
		ret = rpal_fail(errno, "cannot watch descriptor %d", fd);
	pthread_mutex_unlock(&watch.lock);
	return ret;
}

int watch_add(int fd, uint32_t events)
{
	return watch_add_conn(fd, events, -1);
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
	watch.epfd = watch.stopfd = -1;
	watch.started = false;
	pthread_mutex_unlock(&watch.lock);
}

/* A forked child has no watcher thread: forget the parent's. */
void watch_forget_child(void)
{
	pthread_mutex_init(&watch.lock, NULL);
	if (watch.started) {
		close(watch.epfd);
		close(watch.stopfd);
	}
	watch.epfd = watch.stopfd = -1;
	watch.started = false;
}
