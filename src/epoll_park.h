/* SPDX-License-Identifier: MIT */
/*
 * epoll_park.h - hosted mode's part of rpal_epoll_wait(): with nothing
 * ready, the set's receiver parks (call.c) instead of sleeping, and a local
 * sender switches into it.  Included by epoll.c in the hosted build only,
 * after the helpers it uses: inline, because every frame between the
 * public call and the switch costs a mispredicted return on each side of
 * the call (see notify_rx in internal.h).
 */
#ifndef RPAL_EPOLL_PARK_H
#define RPAL_EPOLL_PARK_H

#include <x86intrin.h>

#include "rpal_host.h"
#include "hosted.h"

int call_park_own(struct rpal_host_rcv *r);

/* The registration a call's cookie (its id) names, if it is still one of
 * ours.  The cookie is a hint: compared with each live registration's. */
static struct rpal_ep_reg *reg_of_cookie(struct rpal_ep *ep, uint64_t cookie)
{
	return cookie ? reg_by_id(ep, cookie) : NULL;
}

/* Is the set's receiver running on a sender's thread (in an RPAL call)? */
static inline bool call_borrowed(const struct rpal_host_rcv *r)
{
	return r->sender != NULL;
}

/*
 * Park the set's receiver (call.c); returns RESUME_* when something resumes
 * it.  On a borrower's thread, switch straight back to the sender, which
 * publishes PARKED: here, not in call.c, as a return between the switch and
 * rpal_epoll_wait() would be mispredicted on every call (see notify_rx).
 */
static inline int park(struct rpal_host_rcv *r, uint64_t deadline)
{
	struct rpal_host_sender *s = r->sender;

	r->deadline_ns = deadline;
	if (!s)
		return call_park_own(r);
	hosted_switch_wrfs((hosted_ctx *)&r->ctx, (hosted_ctx *)&s->ctx);
	/* A timed call starts here: its time is counted from this read,
	 * which costs less here than before the sender's switch, where
	 * wrfsbase follows it. */
	if (r->timed)
		r->run_tsc = __rdtsc();
	return r->reason;
}

/*
 * Hosted mode: nothing is ready, so park (call.c).  A local sender runs us on
 * its thread; our own thread resumes us for descriptors, other processes'
 * messages, the deadline or a signal.  The set is held (*fast: without lock);
 * given up while parked.
 */
static int park_wait(struct rpal_ep *ep, struct epoll_event *events, int max, uint64_t deadline, bool *fast)
{
	struct rpal_ep_reg *r;
	bool slept;
	int n, why;

	ep->parking = true;
	for (;;) {
		/*
		 * Each pass follows a scan (ep_wait's, or the last pass's).  The
		 * re-check pairs with a sleep advertised to other processes;
		 * a local sender that publishes meanwhile makes us rescan
		 * before we park (RCV_PENDING), so with none advertised there
		 * is nothing to re-check.
		 */
		slept = sleep_begin(ep, false, true);
		if (slept && (n = scan(ep, events, max)) != 0) {
			sleep_end(ep);
			break;
		}
		owner_give(ep, *fast);
		why = park(ep->rcv, deadline);
		*fast = owner_take(ep);
		mpk_all_sync();         /* maybe a borrower's thread, or a new key */
		sleep_end(ep);
		/* A call names its connection: the event is there.  Others
		 * wait for the next rpal_epoll_wait(), which scans them all
		 * before it parks again. */
		if (why == RESUME_CALL && (r = reg_of_cookie(ep, ep->rcv->cookie)) != NULL) {
			uint32_t ev = reg_events(r);

			if (ev) {
				events[0].events = ev;
				events[0].data = r->data;
				n = 1;
				break;
			}
		}
		n = 0;
		/* On a borrower's thread a syscall would hand us back to our
		 * own: its idle loop watches the descriptors meanwhile. */
		if (why != RESUME_CALL && !call_borrowed(ep->rcv)) {
			n = kernel_wait(ep, events, max, 0);
			if (n < 0)
				break;
		}
		n += scan(ep, events + n, max - n);
		if (n)
			break;
		if (why == RESUME_EINTR) {
			n = -EINTR;
			break;
		}
		if (deadline != UINT64_MAX && now_ns() >= deadline)
			break;
	}
	ep->parking = false;
	return n;
}

#endif /* RPAL_EPOLL_PARK_H */
