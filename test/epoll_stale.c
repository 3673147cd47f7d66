/* SPDX-License-Identifier: MIT */
/*
 * Description: a thread asleep in rpal_epoll_wait() (on the kernel's epoll
 * set: the set also holds a pipe) wakes with connection Y's hang-up; before
 * it takes the set's lock again, another thread takes Y out, adds a healthy
 * connection X (whose registration may get Y's freed address) and closes
 * Y.  The stale event must not touch X: X keeps its queued message and its
 * peer, and the waiter reports nothing for it.  The waiter's pause is made
 * by wrapping epoll_wait(2) (-Wl,--wrap), and glibc's malloc is run without
 * its per-thread cache so that the freed address is handed out again.
 */
#include <pthread.h>
#include <semaphore.h>
#include <sys/epoll.h>

#include "helpers.h"
#include "internal.h"
#include "epoll.h"

int __real_epoll_wait(int fd, struct epoll_event *ev, int max, int timeout);

static __thread bool paused_thread;
static sem_t changed;           /* posted once the other thread changed the set */
static _Atomic bool woke;       /* the waiter has its events, not the lock */

int __wrap_epoll_wait(int fd, struct epoll_event *ev, int max, int timeout)
{
	int n = __real_epoll_wait(fd, ev, max, timeout);

	if (paused_thread && n > 0 && timeout != 0) {
		struct timespec ts;

		atomic_store(&woke, true);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 5;
		sem_timedwait(&changed, &ts);
	}
	return n;
}

static int lfd;

static void *accept_one(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)rpal_accept(lfd, 0);
}

static void pair(int *a, int *b)
{
	pthread_t th;
	void *r;

	t_check(pthread_create(&th, NULL, accept_one, NULL) == 0, "pthread_create");
	*a = (int)t_ok(rpal_connect("stale", NULL, 0));
	pthread_join(th, &r);
	*b = (int)t_ok((intptr_t)r);
}

struct wait_arg {
	int ep, n;
	struct epoll_event ev[8];
};

static void *waiter(void *arg)
{
	struct wait_arg *w = arg;

	paused_thread = true;
	w->n = rpal_epoll_wait(w->ep, w->ev, 8, 3000);
	return NULL;
}

int main(int argc, char **argv)
{
	static char msg[2000], got[2000];
	struct epoll_event e = { .events = EPOLLIN };
	struct wait_arg w = { 0 };
	int xa, xb, ya, yb, pp[2];
	pthread_t th;
	void *ry, *rx;

	(void)argc;
	if (!getenv("GLIBC_TUNABLES")) {
		setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
		t_execv("/proc/self/exe", argv);
	}
	sem_init(&changed, 0, 0);
	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("stale", NULL));
	pair(&xa, &xb);
	pair(&ya, &yb);
	memset(msg, 'A', sizeof(msg));
	t_ok(rpal_send(xa, msg, sizeof(msg), 0));      /* a buffer message X has not read */
	w.ep = rpal_epoll_create(0);
	t_check(w.ep >= 0 && pipe(pp) == 0, "setup");
	e.data.u64 = 99;
	t_check(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, pp[0], &e) == 0, "add the pipe");
	e.events = EPOLLIN | EPOLLRDHUP;
	e.data.u64 = 1;
	t_check(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, yb, &e) == 0, "add Y");
	ry = ((struct rpal_conn *)obj_get(yb))->reg;

	printf("a stale hang-up of a connection taken out of the set while the waiter was between epoll_wait and the lock\n");
	t_check(pthread_create(&th, NULL, waiter, &w) == 0, "pthread_create");
	usleep(100000);
	rpal_close(ya);                 /* Y's peer hangs up: the waiter wakes for it */
	t_check(t_eventually(atomic_load(&woke), 2000), "the waiter did not wake");
	t_check(rpal_epoll_ctl(w.ep, EPOLL_CTL_DEL, yb, NULL) == 0, "take Y out");
	e.events = EPOLLIN;
	e.data.u64 = 2;
	t_check(rpal_epoll_ctl(w.ep, EPOLL_CTL_ADD, xb, &e) == 0, "add X");
	rx = ((struct rpal_conn *)obj_get(xb))->reg;
	rpal_close(yb);
	printf("  Y's registration was at %p, X's is at %p%s\n", ry, rx,
	       ry == rx ? " (the same)" : " (not the same: the stale event could not have hit X anyway)");
	sem_post(&changed);
	pthread_join(th, NULL);
	for (int i = 0; i < w.n; i++) {
		printf("  the waiter got data %llu, events %#x\n", (unsigned long long)w.ev[i].data.u64,
		       w.ev[i].events);
		t_check(!(w.ev[i].data.u64 == 2 && (w.ev[i].events & (EPOLLHUP | EPOLLERR))),
			"X was reported hung up");
	}
	long n = rpal_recv(xb, got, sizeof(got), RPAL_NONBLOCK);
	t_check(n == (long)sizeof(got) && got[0] == 'A' && got[sizeof(got) - 1] == 'A',
		"X's queued message: %ld (%s)", n, n < 0 ? rpal_strerror((int)n) : "bytes");
	t_ok(rpal_send(xb, "ok", 2, 0));
	t_check(rpal_recv(xa, got, sizeof(got), 0) == 2, "X's peer");
	printf("PASS\n");
	return 0;
}
