/* SPDX-License-Identifier: MIT */
/*
 * epoll.h - an rpal epoll set, shared by epoll_set.c (create, ctl,
 * destroy) and epoll.c (wait).  Private to those two.
 */
#ifndef RPAL_EPOLL_H
#define RPAL_EPOLL_H

#include <linux/membarrier.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define RPAL_EPOLL_FAIR   16u      /* calls between kernel polls while rpal is busy */
#define FUTEX_SLEEP_MAX   127u     /* connections a futex_waitv sleep covers (+ kick) */
#define SPIN_KERNEL_POLL  1024u    /* spin iterations between kernel polls */

enum { TAG_USER = 0, TAG_BELL = 1, TAG_SOCK = 2, TAG_PIDFD = 3, TAG_KICK = 4, TAG_MASK = 7, TAG_BITS = 3 };

struct rpal_ep_reg {
	/* Never reused (a process-wide count): what T's events and a hosted
	 * call's cookie name, since a freed registration's address may be
	 * another's by the time they are read. */
	uint64_t id;
	struct rpal_conn *c;
	struct rpal_ep *ep;
	uint32_t events;        /* as registered */
	epoll_data_t data;
	bool disabled;          /* EPOLLONESHOT fired */
	uint64_t in_seen;       /* EPOLLET: messages seen published so far */
	uint64_t out_mark;      /* EPOLLET: peer head at the last EPOLLOUT */
	uint32_t hup_seen;      /* EPOLLET: hang-up bits already reported */
	bool fresh;             /* EPOLLET: report current state once */
	uint32_t sleeping;      /* RPAL_WAIT_* the set's sleepers advertised */
};

struct rpal_ep {
	struct rpal_obj obj;    /* OBJ_EPOLL */
	int fd;                 /* U */
	int top;                /* T */
	int kick;               /* eventfd in T: wakes a sleeper after rpal_epoll_ctl() */
	_Atomic uint32_t kick_seq; /* the same, for a futex sleeper; the watcher's too */
	/* A set of one connection sleeps on that connection's word alone
	 * (futex_sleep): odd while a sleeper has claimed that, and the word. */
	_Atomic uint32_t lone_gen;
	_Atomic(_Atomic uint32_t *) lone_word;
	_Atomic unsigned nuser; /* ordinary descriptors added through rpal_epoll_ctl() */
	struct rpal_lock lock;
	struct rpal_ep_reg **regs;
	unsigned nregs, cap;
	unsigned rr;            /* round-robin start among connections */
	unsigned since_kernel;  /* calls since ordinary descriptors were polled */
	unsigned sleepers;      /* waiters between sleep_begin() and sleep_end() */
	bool advertised;        /* some registration's sleeping is set */
	struct rpal_spin spin;
	unsigned sleeps;        /* counted so that a sample is timed for the adaptive policy */
	struct rpal_host_rcv *rcv; /* hosted mode: where a waiter parks (call.c) */
	bool parking;           /* the waiter is in park_wait() */
	_Atomic unsigned long park_owner; /* the thread (pthread_t) that parks here; 0: none yet */
	/* Hosted mode: the park owner's rpal_epoll_wait() may go without
	 * lock (see owner_take); biased: membarrier makes that safe. */
	bool biased;
	_Atomic uint32_t owner_in; /* the owner is in rpal_epoll_wait() without lock */
	_Atomic uint32_t others;   /* threads other than the owner that hold or want lock */
	uint32_t watch_seen;    /* watch_seq when T was last harvested before a futex sleep */
	bool top_quiet;         /* the last look at T found nothing ready ... */
	uint32_t quiet_seq;     /* ... and watch_seq was this just before it */
};

#define IN_BITS  (EPOLLIN | EPOLLRPALIN)
#define OUT_BITS (EPOLLOUT | EPOLLRPALOUT)

static inline struct rpal_ep *ep_get(int epfd)
{
	return (struct rpal_ep *)obj_get_kind(epfd, OBJ_EPOLL);
}

/*
 * Who may touch a set's registrations.  Normally whoever holds ep->lock.
 * In hosted mode a call into a parked receiver should cost no lock
 * operation, so the thread that parks in the set (the owner: the receiver,
 * whichever thread it runs on) takes the set without the lock while nobody
 * else needs it.  That is an asymmetric Dekker pair:
 *
 *   owner:  owner_in = 1;  compiler barrier;  if (others) fall back to lock
 *   others: lock;  others++;  membarrier();  wait until !owner_in
 *
 * membarrier() runs a full barrier on every thread of the process, so
 * either the owner sees others, or the other thread sees owner_in.  Others
 * (rpal_epoll_ctl and rpal_close from another thread, a second waiter) pay
 * a few microseconds; the owner pays a store and a load.  The owner is
 * never in the set without lock for long: it leaves before it parks.
 */
static inline bool set_is_owner(struct rpal_ep *ep)
{
	unsigned long o = load_relaxed(&ep->park_owner);

	return o && pthread_equal((pthread_t)o, pthread_self());
}

/* Take the set for the owner; true if without lock. */
static inline bool owner_take(struct rpal_ep *ep)
{
	if (ep->biased) {
		store_relaxed(&ep->owner_in, 1);
		atomic_signal_fence(memory_order_seq_cst);      /* the others' membarrier orders it */
		if (likely(!load_acquire(&ep->others)))
			return true;
		store_release(&ep->owner_in, 0);
	}
	lock_take(&ep->lock);
	return false;
}

static inline void owner_give(struct rpal_ep *ep, bool fast)
{
	if (fast)
		store_release(&ep->owner_in, 0);
	else
		lock_give(&ep->lock);
}

/* Take the set for anyone else (under lock, with the owner out). */
static inline bool other_take(struct rpal_ep *ep)
{
	bool counted = ep->biased && !set_is_owner(ep);

	lock_take(&ep->lock);
	if (counted) {
		atomic_fetch_add(&ep->others, 1);
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		while (load_acquire(&ep->owner_in))
			sched_yield();
	}
	return counted;
}

static inline void other_give(struct rpal_ep *ep, bool counted)
{
	if (counted)
		atomic_fetch_sub(&ep->others, 1);
	lock_give(&ep->lock);
}

/* epoll_set.c */
void reg_remove(struct rpal_ep *ep, struct rpal_ep_reg *r);

#endif /* RPAL_EPOLL_H */
