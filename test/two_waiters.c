/* SPDX-License-Identifier: MIT */
/*
 * Description: two threads wait on one connection at once: a reader blocked
 * in rpal_recv(), and a writer in rpal_epoll_wait() for EPOLLOUT with the
 * connection's ring full (its set holds an eventfd too, so it sleeps in the
 * kernel's epoll on the doorbell; the reader sleeps on a futex).  Each must
 * wake for its own event, whatever the other's sleeps do to the shared
 * sleep advertisement: the reader receives every message within 2 s, the
 * writer sees no EPOLLOUT while the ring is full and sees it within 2 s once
 * the peer reads.  Run as is and under old_kernel (no futex_waitv).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "helpers.h"

#define MESSAGES 20000

static int reader_fd, ep;
static _Atomic long received = -1;
static _Atomic bool peer_reads;

static void *reader(void *p)
{
	(void)p;
	for (long i = 0; i < MESSAGES; i++) {
		long v;
		ssize_t n = rpal_recv(reader_fd, &v, sizeof(v), 0);
		t_check(n == sizeof(v), "rpal_recv: %zd (%s)", n, n < 0 ? rpal_strerror((int)n) : "short");
		t_check(v == i, "message %ld carries %ld", i, v);
		atomic_store(&received, i);
	}
	return NULL;
}

/* Wait for EPOLLOUT, which may come only once the peer reads: no timeout,
 * so a lost wake-up leaves this thread asleep. */
static void *writer(void *p)
{
	struct epoll_event ev;
	int n = rpal_epoll_wait(ep, &ev, 1, -1);

	(void)p;
	t_check(n == 1, "rpal_epoll_wait: %d (%s)", n, strerror(errno));
	t_check(ev.data.u64 == 2 && (ev.events & EPOLLOUT), "event %#x for %llu", ev.events,
		(unsigned long long)ev.data.u64);
	t_check(atomic_load(&peer_reads), "EPOLLOUT with the ring still full");
	return NULL;
}

int main(void)
{
	pthread_t rt, wt;
	int lfd, peer, efd, sent_full = 0;
	char fill[64] = { 0 };

	struct rpal_config cfg;

	rpal_config_default(&cfg);
	cfg.spin_us = 0;        /* every wait a sleep: the case under test */
	t_ok(rpal_init(&cfg));
	lfd = t_self_pair("self", &peer, &reader_fd);

	/* Fill the reader's side's outgoing ring: the peer never reads it. */
	ssize_t r;
	while ((r = rpal_send(reader_fd, fill, sizeof(fill), RPAL_NONBLOCK)) == (ssize_t)sizeof(fill))
		sent_full++;
	t_check(r == -EAGAIN, "filling the ring: %s", rpal_strerror((int)r));

	ep = t_ok(rpal_epoll_create(0));
	efd = eventfd(0, EFD_CLOEXEC);
	t_check(efd >= 0, "eventfd: %s", strerror(errno));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
	t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev));
	ev = (struct epoll_event){ .events = EPOLLOUT, .data.u64 = 2 };
	t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, reader_fd, &ev));

	printf("%d messages to a reader blocked in rpal_recv(), a writer waiting for EPOLLOUT on the same "
	       "connection (ring full after %d sends)\n", MESSAGES, sent_full);
	t_check(pthread_create(&rt, NULL, reader, NULL) == 0, "pthread_create");
	t_check(pthread_create(&wt, NULL, writer, NULL) == 0, "pthread_create");
	for (long i = 0; i < MESSAGES; i++) {
		uint64_t t0 = t_now_ns();
		t_ok(rpal_send(peer, &i, sizeof(i), 0));
		while (atomic_load(&received) < i) {
			t_check(t_now_ns() - t0 < 2000000000ull,
				"message %ld not received in 2 s: the reader missed its wake-up", i);
			sched_yield();
		}
	}
	pthread_join(rt, NULL);
	printf("all received; the peer now reads the full ring\n");
	atomic_store(&peer_reads, true);
	for (int i = 0; i < sent_full; i++) {
		char b[sizeof(fill)];
		t_check(t_ok(rpal_recv(peer, b, sizeof(b), RPAL_NONBLOCK)) == sizeof(b), "short message");
	}
	uint64_t t0 = t_now_ns();
	while (pthread_tryjoin_np(wt, NULL) != 0) {
		t_check(t_now_ns() - t0 < 2000000000ull, "no EPOLLOUT in 2 s after the peer read the ring");
		usleep(1000);
	}
	printf("the writer saw EPOLLOUT\n");
	t_ok(rpal_close(ep));
	t_ok(rpal_close(peer));
	t_ok(rpal_close(reader_fd));
	t_ok(rpal_close(lfd));
	close(efd);
	printf("PASS\n");
	return 0;
}
