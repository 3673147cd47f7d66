/* SPDX-License-Identifier: MIT */
/*
 * epoll_set.c - an rpal epoll set's life: rpal_epoll_create(), the
 * registration of connections and ordinary descriptors (rpal_epoll_ctl()),
 * a connection that goes, and the set's end.  How a set is laid out, and
 * how it waits, is told in epoll.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "epoll.h"

RPAL_EXPORT int rpal_epoll_create(int flags)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct rpal_ep *ep;
	int ret;

	if ((ret = rpal_ensure_init()) != 0) {
		errno = -ret;
		return -1;
	}
	ep = calloc(1, sizeof(*ep));
	if (!ep) {
		errno = ENOMEM;
		return -1;
	}
	ep->obj.kind = OBJ_EPOLL;
	lock_init(&ep->lock);
	spin_init(&ep->spin, rpal_g.cfg.spin_us, rpal_g.cfg.wait_policy);
	ep->fd = epoll_create1(flags);
	ep->top = epoll_create1(EPOLL_CLOEXEC);
	ep->kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ev.data.u64 = TAG_USER;
	if (ep->fd < 0 || ep->top < 0 || ep->kick < 0 || epoll_ctl(ep->top, EPOLL_CTL_ADD, ep->fd, &ev) < 0)
		goto fail;
	/* Hosted mode: local senders switch into a waiter parked here. */
	ep->rcv = call_rcv_create(ep->top);
	ep->biased = ep->rcv && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
	ev.events = EPOLLIN | EPOLLET;  /* private to us: edges, never read */
	ev.data.u64 = TAG_KICK;
	if (epoll_ctl(ep->top, EPOLL_CTL_ADD, ep->kick, &ev) < 0)
		goto fail;
	/* While the set holds no descriptor added through rpal_epoll_ctl(),
	 * it may sleep on futexes: the watcher looks at U meanwhile. */
	if (watch_add(ep->fd, EPOLLIN, WATCH_SET | (uint32_t)ep->fd) < 0)
		goto fail;
	pthread_mutex_lock(&rpal_g.lock);
	ret = obj_set(ep->fd, &ep->obj);
	pthread_mutex_unlock(&rpal_g.lock);
	if (ret) {
		errno = -ret;
		goto fail;
	}
	return ep->fd;
fail:
	ret = errno;
	if (ep->fd >= 0)
		close(ep->fd);
	if (ep->top >= 0)
		close(ep->top);
	if (ep->kick >= 0)
		close(ep->kick);
	free(ep);
	errno = ret;
	return -1;
}

/* Registration ids: 1 up, never 0 (no cookie), never reused. */
static _Atomic uint64_t next_reg_id = 1;

static int internal_ctl(struct rpal_ep *ep, int op, struct rpal_ep_reg *r)
{
	struct epoll_event ev;
	const struct { int fd; uint32_t events; unsigned tag; } fds[] = {
		{ r->c->doorbell, EPOLLIN | EPOLLET, TAG_BELL },
		{ r->c->fd, EPOLLRDHUP | EPOLLET, TAG_SOCK },
		{ r->c->pidfd, EPOLLIN | EPOLLET, TAG_PIDFD },
	};
	unsigned i;

	for (i = 0; i < 3; i++) {
		ev.events = fds[i].events;
		ev.data.u64 = r->id << TAG_BITS | fds[i].tag;
		if (epoll_ctl(ep->top, op, fds[i].fd, &ev) < 0 && op != EPOLL_CTL_DEL) {
			int e = errno;
			while (i--)
				epoll_ctl(ep->top, EPOLL_CTL_DEL, fds[i].fd, NULL);
			return -e;
		}
	}
	return 0;
}

static void reg_arm(struct rpal_ep_reg *r, const struct epoll_event *ev)
{
	r->events = ev->events;
	r->data = ev->data;
	r->disabled = false;
	r->fresh = true;
	r->hup_seen = 0;
}

/*
 * A lone sleeper (see futex_sleep) waits on its connection's word, which
 * the peer may write too: a peer that wrote it back after our bump could
 * make the sleeper miss this wake-up.  So bump and wake until the sleeper
 * is seen awake.  It claimed the word before its last look at kick_seq and
 * does not block before its FUTEX_WAIT, and once queued there FUTEX_WAKE
 * reaches it whatever the word holds: this ends within a few tries.
 */
static void wake_lone_sleeper(struct rpal_ep *ep)
{
	uint32_t gen = atomic_load(&ep->lone_gen);
	_Atomic uint32_t *word;

	if (!(gen & 1))
		return;
	word = load_acquire(&ep->lone_word);
	for (unsigned n = 0; atomic_load(&ep->lone_gen) == gen; n++) {
		if (n)
			sched_yield();
		atomic_fetch_add(word, 1);
		syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
}

/* Caller holds ep->lock. */
void reg_remove(struct rpal_ep *ep, struct rpal_ep_reg *r)
{
	unsigned i;

	for (i = 0; i < ep->nregs; i++) {
		if (ep->regs[i] == r) {
			ep->regs[i] = ep->regs[--ep->nregs];
			spin_recount(&ep->spin);
			break;
		}
	}
	internal_ctl(ep, EPOLL_CTL_DEL, r);
	if (r->c->local) {
		store_release(&r->c->me->hosted_rcv, 0);
		store_relaxed(&r->c->me->hosted_cookie, 0);
	}
	if (r->sleeping)
		wait_end(r->c, r->sleeping);
	/* Its word may be about to be unmapped: a lone sleeper on it must
	 * be awake first. */
	wake_lone_sleeper(ep);
	r->c->reg = NULL;
	store_release(&r->c->set, NULL);
	free(r);
}

/* Wake a thread asleep on futexes in this set (the watcher, after it
 * bumped watch_seq, for an event of one of its descriptors). */
void epoll_wake_futex(struct rpal_ep *ep)
{
	atomic_fetch_add(&ep->kick_seq, 1);
	syscall(SYS_futex, &ep->kick_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	wake_lone_sleeper(ep);
}

/* Wake a thread asleep in this set, on either path. */
void ep_kick(struct rpal_ep *ep)
{
	(void)!eventfd_write(ep->kick, 1);
	epoll_wake_futex(ep);
}

static int conn_ctl(struct rpal_ep *ep, int op, struct rpal_conn *c, struct epoll_event *ev)
{
	struct rpal_ep_reg *r;
	bool counted = other_take(ep);
	int ret = 0;

	r = c->reg;
	switch (op) {
	case EPOLL_CTL_ADD:
		if (r) {
			/* One rpal set per connection. */
			ret = r->ep == ep ? rpal_fail(EEXIST, "connection %d is already in this set", c->fd)
					  : rpal_fail(EBUSY, "connection %d is in another rpal epoll set: a connection can be in one at a time",
						      c->fd);
			break;
		}
		if (ep->nregs == ep->cap) {
			unsigned cap = ep->cap ? 2 * ep->cap : 16;
			void *p = realloc(ep->regs, cap * sizeof(*ep->regs));
			if (!p) {
				ret = rpal_fail(ENOMEM, "no memory for the set's registrations");
				break;
			}
			ep->regs = p;
			ep->cap = cap;
		}
		r = calloc(1, sizeof(*r));
		if (!r) {
			ret = rpal_fail(ENOMEM, "no memory for the set's registrations");
			break;
		}
		r->id = atomic_fetch_add(&next_reg_id, 1);
		r->c = c;
		r->ep = ep;
		reg_arm(r, ev);
		ret = internal_ctl(ep, EPOLL_CTL_ADD, r);
		if (ret) {
			free(r);
			break;
		}
		ep->regs[ep->nregs++] = r;
		spin_recount(&ep->spin);
		c->reg = r;
		store_release(&c->set, ep);
		if (ep->rcv && c->local) {
			store_relaxed(&c->me->hosted_cookie, r->id);
			store_release(&c->me->hosted_rcv, (uintptr_t)ep->rcv);
		}
		break;
	case EPOLL_CTL_MOD:
	case EPOLL_CTL_DEL:
		if (!r || r->ep != ep)
			ret = rpal_fail(ENOENT, "connection %d is not in this set", c->fd);
		else if (op == EPOLL_CTL_MOD)
			reg_arm(r, ev);
		else
			reg_remove(ep, r);
		break;
	default:
		ret = rpal_fail(EINVAL, "unknown epoll_ctl operation %d", op);
	}
	other_give(ep, counted);
	/* A thread asleep in rpal_epoll_wait() must look at the new state,
	 * as epoll_ctl() wakes waiters for a descriptor that is ready. */
	if (!ret && op != EPOLL_CTL_DEL)
		ep_kick(ep);
	return ret;
}

RPAL_EXPORT int rpal_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	struct rpal_ep *ep = ep_get(epfd);
	struct rpal_conn *c = (struct rpal_conn *)obj_get_kind(fd, OBJ_CONN);
	int ret;

	if (!ep || !c) {
		ret = epoll_ctl(epfd, op, fd, event);
		if (ret) {
			/* A detail of its own, not an earlier call's. */
			int err = errno;
			rpal_fail(err, "epoll_ctl(%d, %d, %d) failed", epfd, op, fd);
			errno = err;
		}
		if (ep && !ret) {
			/* Counted so a set of rpal connections only may sleep on
			 * futexes; see ep_wait().  The count and the watch change
			 * together, or two threads could leave U unwatched. */
			lock_take(&ep->lock);
			if (op == EPOLL_CTL_ADD && atomic_fetch_add(&ep->nuser, 1) == 0)
				watch_del(ep->fd);      /* epoll sleeps see U themselves */
			else if (op == EPOLL_CTL_DEL && atomic_load(&ep->nuser) &&
				 atomic_fetch_sub(&ep->nuser, 1) == 1)
				watch_add(ep->fd, EPOLLIN, WATCH_SET | (uint32_t)ep->fd);
			lock_give(&ep->lock);
			if (op != EPOLL_CTL_DEL)
				ep_kick(ep);
		}
		return ret;
	}
	if (op != EPOLL_CTL_DEL && !event) {
		errno = -rpal_fail(EFAULT, "rpal_epoll_ctl: event is NULL");
		return -1;
	}
	ret = conn_ctl(ep, op, c, event);
	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/* Called by rpal_close() before a connection goes away. */
void epoll_conn_gone(struct rpal_conn *c)
{
	struct rpal_ep_reg *r = c->reg;
	struct rpal_ep *ep;
	bool counted;

	if (!r)
		return;
	ep = r->ep;
	counted = other_take(ep);
	reg_remove(ep, r);
	other_give(ep, counted);
}

static void epoll_destroy(struct rpal_obj *obj)
{
	struct rpal_ep *ep = (struct rpal_ep *)obj;
	bool counted = other_take(ep);

	while (ep->nregs)
		reg_remove(ep, ep->regs[0]);
	if (ep->rcv)
		call_rcv_retire(ep->rcv);
	other_give(ep, counted);
	pthread_mutex_lock(&rpal_g.lock);
	obj_clear(ep->fd);
	pthread_mutex_unlock(&rpal_g.lock);
	watch_del(ep->fd);
	close(ep->top);
	close(ep->kick);
	close(ep->fd);
	free(ep->regs);
	free(ep);
}

/* After fork: the child frees its copy; U is closed by the caller. */
static void epoll_forget_child(struct rpal_obj *obj)
{
	struct rpal_ep *ep = (struct rpal_ep *)obj;
	unsigned i;

	close(ep->top);
	close(ep->kick);
	for (i = 0; i < ep->nregs; i++)
		free(ep->regs[i]);
	free(ep->regs);
	free(ep);
}

const struct rpal_obj_ops epoll_ops = {
	.close = epoll_destroy,
	.forget_child = epoll_forget_child,
};
