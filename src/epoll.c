/* SPDX-License-Identifier: MIT */
/*
 * epoll.c - one wait for rpal connections and ordinary descriptors.
 *
 * The descriptor the user sees (U) is a real epoll set holding the user's
 * ordinary descriptors with the user's own data.  A private top set (T)
 * holds U plus, per registered connection, its doorbell, socket and pidfd,
 * each tagged with our own data.  Keeping the two apart means the user's
 * data never has to be told from ours.
 *
 * rpal_epoll_wait() first looks at the rings in user space and returns what
 * is ready with no system call.  Ordinary descriptors are polled when the
 * rings have nothing, and at least every RPAL_EPOLL_FAIR calls when they
 * always have something.  With nothing ready it spins for the adaptive
 * budget, then advertises sleep on every connection and blocks on T.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "epoll.h"

/* ------------------------------------------------------------------ wait */

/*
 * The events of one registration that are due now; 0 if none.
 * Level-triggered: the current state.  Edge-triggered (as for sockets): IN
 * when messages arrived since the last report, OUT when the consumer moved
 * since the last report, each hang-up bit once; all once after ADD or MOD.
 */
static RPAL_HOT uint32_t reg_events(struct rpal_ep_reg *r)
{
	struct rpal_conn *c = r->c;
	uint32_t want = r->events, ev = 0, hup = 0, state;
	bool et = want & EPOLLET;

	if (r->disabled)
		return 0;
	state = peer_update(c);
	if (conn_err(c))
		hup |= EPOLLERR | EPOLLHUP;
	if (conn_dead(c))
		hup |= EPOLLHUP | EPOLLRDHUP;
	/* Either side's shutdown ends what we read. */
	if ((state & RPAL_STATE_SHUT_WR) || load_relaxed(&c->shut_rd))
		hup |= EPOLLRDHUP;

	if (want & IN_BITS) {
		if (!et) {
			if (ring_readable(c))
				ev |= IN_BITS;
		} else {
			/* An edge is a message we had not seen published.
			 * One look at the head: another thread may consume. */
			uint64_t head = ring_head(c);

			if (r->in_seen < head)
				r->in_seen = head;
			if (ring_published(c, r->in_seen) || (r->fresh && ring_readable(c))) {
				ev |= IN_BITS;
				while (ring_published(c, r->in_seen))
					r->in_seen++;
			}
		}
	}
	/* A peer that only shut down writing still reads: stay writable. */
	if ((want & OUT_BITS) && !conn_dead(c) && !conn_err(c) && !(state & RPAL_STATE_CLOSED) &&
	    !load_relaxed(&c->shut_wr)) {
		acks_drain(c);
		uint64_t mark;

		if (send_ready(c, &mark)) {
			if (!et || r->fresh || mark != r->out_mark)
				ev |= OUT_BITS;
			r->out_mark = mark;
		}
	} else if ((want & OUT_BITS) && ((state & RPAL_STATE_CLOSED) || load_relaxed(&c->shut_wr)) &&
		   !conn_dead(c) && !conn_err(c)) {
		/* We shut down writing, or the peer reading (it keeps its
		 * socket: no hang-up comes).  A send fails at once (EPIPE), so
		 * report it ready, as a socket does (a peer that closed hangs
		 * up soon: then EPOLLHUP instead). */
		if (!et || r->fresh || r->out_mark != UINT64_MAX)
			ev |= OUT_BITS;
		r->out_mark = UINT64_MAX;
	}
	if (hup) {
		uint32_t news = et && !r->fresh ? hup & ~r->hup_seen : hup;
		/* End of stream and errors are readable, as on a socket. */
		if (news)
			ev |= hup | IN_BITS;
		r->hup_seen |= hup;
	}
	r->fresh = false;
	/* Report only what was asked for; HUP and ERR always (as epoll does). */
	ev &= want | EPOLLHUP | EPOLLERR;
	if (ev && (want & EPOLLONESHOT))
		r->disabled = true;
	return ev;
}

/* Messages received so far on the set's connections, by any thread: how
 * many each wait brings tells the adaptive spin what a sleep gathers. */
static uint64_t set_received(const struct rpal_ep *ep)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < ep->nregs; i++)
		n += ring_head(ep->regs[i]->c);
	return n;
}

/* Whether a peer of the set's connections still sleeps the sleep we woke
 * it from (peer_waking). */
static RPAL_HOT bool set_peer_waking(const struct rpal_ep *ep)
{
	for (unsigned i = 0; i < ep->nregs; i++)
		if (peer_waking(ep->regs[i]->c))
			return true;
	return false;
}

/* Collect ready connections, starting from the round-robin point.  Lock held. */
static RPAL_HOT int scan(struct rpal_ep *ep, struct epoll_event *out, int max)
{
	unsigned n = ep->nregs, i, start = ep->rr, k;
	int got = 0;

	/* No division per call: rr < n unless registrations went away. */
	if (start >= n)
		start = 0;
	for (i = 0, k = start; i < n && got < max; i++) {
		struct rpal_ep_reg *r = ep->regs[k];
		uint32_t ev = reg_events(r);

		if (++k == n)
			k = 0;
		if (ev) {
			out[got].events = ev;
			out[got].data = r->data;
			got++;
		}
	}
	ep->rr = k;
	return got;
}

/* The set's registration with that id, if it is still one of ours. */
static struct rpal_ep_reg *reg_by_id(struct rpal_ep *ep, uint64_t id)
{
	unsigned i;

	for (i = 0; i < ep->nregs; i++)
		if (ep->regs[i]->id == id)
			return ep->regs[i];
	return NULL;
}

/*
 * One epoll_wait on T: note doorbells and deaths, then harvest the user's
 * ordinary descriptors if U is ready.  Lock held (dropped while blocking).
 */
static RPAL_HOT int kernel_wait(struct rpal_ep *ep, struct epoll_event *out, int max, int timeout)
{
	struct epoll_event kev[32];
	uint32_t wseq = load_acquire(&watch_seq);       /* before: a later edge bumps it (top_idle) */
	bool user = false;
	int n, i;

	if (timeout)
		lock_give(&ep->lock);
	n = epoll_wait(ep->top, kev, 32, timeout);
	int err = n < 0 ? errno : 0;    /* a contended lock_take() below can change errno */
	if (timeout) {
		lock_take(&ep->lock);
		mpk_all_sync();         /* a connection added meanwhile may have a new key */
	}
	if (n < 0)
		return -err;            /* EINTR too: rpal_epoll_wait() reports it, as epoll_wait() does */
	ep->top_quiet = n == 0;
	ep->quiet_seq = wseq;
	for (i = 0; i < n; i++) {
		unsigned tag = kev[i].data.u64 & TAG_MASK;
		struct rpal_ep_reg *r;

		if (tag == TAG_USER) {
			user = true;
			continue;
		}
		if (tag == TAG_KICK)
			continue;       /* just a rescan */
		r = reg_by_id(ep, kev[i].data.u64 >> TAG_BITS);
		if (!r)
			continue;       /* removed while we slept */
		if (tag == TAG_BELL)
			store_relaxed(&r->c->bell_dirty, true);
		else
			conn_mark_dead(r->c, tag == TAG_PIDFD);
	}
	if (!user || max <= 0)
		return 0;
	n = epoll_wait(ep->fd, out, max, 0);
	return n < 0 ? (errno == EINTR ? 0 : -errno) : n;
}

/*
 * Is T still as empty as when last looked at?  In a set of rpal connections
 * only (nuser 0), every readiness edge T can show (U's descriptors,
 * hang-ups, deaths) also reaches the watcher thread, which bumps watch_seq:
 * with none since, a poll of T would find nothing, and a syscall is saved
 * on every wait that finds the rings empty.  (Doorbells are not rung for a
 * set that sleeps on futexes; a kick asks for a scan, which follows anyway.)
 */
static bool top_idle(struct rpal_ep *ep)
{
	return ep->top_quiet && atomic_load(&ep->nuser) == 0 && load_acquire(&watch_seq) == ep->quiet_seq;
}

/*
 * Advertise a sleep on every connection we wait for; each sleep_begin()
 * needs one sleep_end().  The set's waiters share one advertisement per
 * connection, kept until the last of them leaves: each adds the flags it
 * needs and counts a new sleep, so the peer rings for it too.  parked:
 * local peers call in instead of waking us (call.c).  Returns whether it
 * advertised a sleep anywhere.
 */
static RPAL_HOT bool sleep_begin(struct rpal_ep *ep, bool futex, bool parked)
{
	bool any = false;
	unsigned i;

	ep->sleepers++;
	for (i = 0; i < ep->nregs; i++) {
		struct rpal_ep_reg *r = ep->regs[i];
		uint32_t bits = 0;

		/* A doorbell sleep (in T, where the doorbell is an edge) starts
		 * with an empty doorbell, or a full one would take every later ring. */
		if (!futex && load_relaxed(&r->c->bell_dirty))
			doorbell_drain(r->c);
		if (r->disabled || conn_dead(r->c) || conn_err(r->c) || (parked && r->c->local))
			continue;
		if (r->events & IN_BITS)
			bits |= RPAL_WAIT_RX | (futex ? RPAL_WAIT_RX_FUTEX : RPAL_WAIT_RX_BELL);
		if ((r->events & OUT_BITS) && !send_ready(r->c, NULL))
			bits |= RPAL_WAIT_TX | (futex ? RPAL_WAIT_TX_FUTEX : RPAL_WAIT_TX_BELL);
		if (bits) {
			wait_begin(r->c, bits & ~r->sleeping);
			r->sleeping |= bits;
			any = true;
		}
	}
	ep->advertised |= any;
	return any;
}

static RPAL_HOT void sleep_end(struct rpal_ep *ep)
{
	unsigned i;

	if (--ep->sleepers || !ep->advertised)
		return;
	ep->advertised = false;
	for (i = 0; i < ep->nregs; i++) {
		struct rpal_ep_reg *r = ep->regs[i];
		if (r->sleeping) {
			wait_end(r->c, r->sleeping);
			r->sleeping = 0;
			/* Another thread may count one in conn_wait(). */
			stat_add_shared(&r->c->st->rx.sleeps, 1);
		}
	}
}

/*
 * A set of one connection, ours to bump its word, may sleep on that word
 * alone: FUTEX_WAIT on one word costs less than futex_waitv() on two.  A
 * kick then reaches it through the word (wake_lone_sleeper).  One thread
 * at a time: the others wait on every word.  Lock held.
 */
static RPAL_HOT bool lone_claim(struct rpal_ep *ep)
{
	struct rpal_conn *c = ep->nregs == 1 ? ep->regs[0]->c : NULL;
	uint32_t gen = atomic_load(&ep->lone_gen);

	if (!c || !c->wake_mine || c->local || ep->rcv || (gen & 1))
		return false;
	store_release(&ep->lone_word, c->wake_mine);
	return atomic_compare_exchange_strong(&ep->lone_gen, &gen, gen + 1);
}

/* After a futex sleep that began at t0: the wake-up latency from the
 * first ring of the sleep (rung_ask() asked each wake page).  Lock held. */
static void wake_lat_learn(struct rpal_ep *ep, uint64_t t0, enum wait_pace pace)
{
	uint64_t now = now_ns(), first = 0;
	struct rpal_conn *by = NULL;

	for (unsigned i = 0; i < ep->nregs; i++) {
		struct rpal_conn *c = ep->regs[i]->c;
		uint64_t r = c->wake_mine ? rung_within(c->wake_mine, t0, now) : 0;

		if (r && (!first || r < first)) {
			first = r;
			by = c;
		}
	}
	if (first)
		spin_note_wake_lat(&ep->spin, t0, first, now, pace, cpu_apart(load_relaxed(&by->pb->tx_cpu)));
}

/*
 * A set of rpal connections only sleeps on futexes: the peers' wake_seq (or
 * our words of the connections' wake pages), sampled before advertising the
 * sleep (see notify.c), and our kick_seq, which rpal_epoll_ctl() bumps and
 * so does the watcher thread after watch_seq, for a hang-up or death of one
 * of our connections or a descriptor added to U with plain epoll_ctl() (U
 * is watched while no rpal_epoll_ctl()-added one is there).  FUTEX_WAKE is
 * cheaper than a doorbell write plus an epoll wake-up, and no timeout is
 * needed.  Returns the events it put in events[] (>= 0) or -errno; the
 * caller scans for more.  t0: when the wait began, to learn the wake-up's
 * latency from the wake pages (0: not), pace: what the wait measures.
 * Lock held (dropped while asleep).
 */
static RPAL_HOT int futex_sleep(struct rpal_ep *ep, struct epoll_event *events, int max, uint64_t deadline,
			       uint64_t t0, enum wait_pace pace)
{
	/* Sized to the set (at most FUTEX_SLEEP_MAX, see the caller): a set
	 * of one takes two entries of the caller's stack instead of 3 KiB. */
	struct futex_waitv wv[ep->nregs + 1];
	/* kick_seq before watch_seq: the watcher bumps them the other way
	 * round, so an event either shows in wseq or changes kseq. */
	uint32_t kseq = atomic_load(&ep->kick_seq), wseq = atomic_load(&watch_seq);
	struct timespec ts;
	unsigned i, nw = 0;
	long r;

	/* A bump before our sample may be a death we have not harvested:
	 * the futex would not return for it. */
	if (wseq != ep->watch_seen) {
		ep->watch_seen = wseq;
		r = kernel_wait(ep, events, max, 0);
		if (r)
			return (int)r;
	}

	/*
	 * Our own word as well as the connections': a peer can write its
	 * connection's wake page word, so that word alone must not carry
	 * wake-ups for anything else (our ordinary descriptors, other
	 * connections' deaths, set changes).
	 */
	wv[nw++] = fwv(&ep->kick_seq, kseq, false);
	for (i = 0; i < ep->nregs; i++) {
		struct rpal_conn *c = ep->regs[i]->c;
		const _Atomic uint32_t *w = c->wake_mine ? c->wake_mine : &c->pb->wake_seq;

		wv[nw++] = fwv(w, load_acquire(w), true);
		if (t0 && c->wake_mine)
			rung_ask(c->wake_mine);
	}
	sleep_begin(ep, true, false);
	r = scan(ep, events, max);      /* the re-check after W0 */
	if (r) {
		sleep_end(ep);
		return (int)r;
	}
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	/* Under the lock; as in conn_wait(). */
	bool timed = ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE && spin_cost_sample(ep->sleeps++);
	bool lone = lone_claim(ep);
	lock_give(&ep->lock);
	uint64_t cpu0 = timed ? thread_cpu_ns() : 0;
	if (lone) {
		/* wv[1]: the connection's word as sampled above.  A kick from
		 * the claim on bumps that word; one before shows in kick_seq. */
		r = atomic_load(&ep->kick_seq) != kseq ? 0 :
		    syscall(SYS_futex, (uint32_t *)wv[1].uaddr, FUTEX_WAIT_BITSET, (uint32_t)wv[1].val,
			    deadline == UINT64_MAX ? NULL : &ts, NULL, FUTEX_BITSET_MATCH_ANY);
		atomic_fetch_add(&ep->lone_gen, 1);
	} else {
		r = futex_waitv(wv, nw, deadline == UINT64_MAX ? NULL : &ts);
	}
	int err = r < 0 ? errno : 0;    /* before the calls below can change it */
	if (cpu0)
		spin_note_sleep_cpu(thread_cpu_ns() - cpu0);
	lock_take(&ep->lock);
	if (t0)
		wake_lat_learn(ep, t0, pace);
	mpk_all_sync();
	sleep_end(ep);
	if (err == EINTR)
		return -EINTR;
	if (err == ENOSYS) {
		atomic_fetch_add(&ep->nuser, 1);        /* no futex_waitv: epoll from now on */
		return 0;
	}
	if (load_acquire(&watch_seq) != wseq)
		return kernel_wait(ep, events, max, 0);  /* deaths, plain-epoll_ctl descriptors */
	return 0;
}

#if RPAL_HOSTED
#include "epoll_park.h"
#else
/* No receiver parks in a set (ep->rcv is NULL): never called. */
static inline bool call_borrowed(const struct rpal_host_rcv *r) { (void)r; return false; }
static int park_wait(struct rpal_ep *ep, struct epoll_event *events, int max, uint64_t deadline, bool *fast)
{
	(void)ep; (void)events; (void)max; (void)deadline; (void)fast;
	return 0;
}
#endif

/*
 * A spin of the set, in counter cycles since tsc0, into its connections'
 * statistics (rx.spin_tsc, what rpal stat and rpal top show): an equal
 * share each, as the set spun for them all.  Atomic adds: a blocking
 * receive on one of them may count its own spin meanwhile.  Lock held.
 */
static void spin_count(struct rpal_ep *ep, uint64_t tsc0)
{
	uint64_t share = ep->nregs ? (cycles_now() - tsc0) / ep->nregs : 0;

	for (unsigned i = 0; share && i < ep->nregs; i++)
		stat_add_shared(&ep->regs[i]->c->st->rx.spin_tsc, share);
}

static RPAL_HOT int ep_wait(struct rpal_ep *ep, struct epoll_event *events, int max, int timeout, bool *fast)
{
	uint64_t t0 = 0, tsc0 = 0, deadline = UINT64_MAX, budget;
	/* Only one thread parks in a set; others wait as in connected mode.
	 * pthread_self() is the parked thread's also on a borrower's thread. */
	bool mine = ep->rcv && (!load_relaxed(&ep->park_owner) || set_is_owner(ep));
	bool borrowed = mine && call_borrowed(ep->rcv);
	int n, k;
	unsigned i;

	/* Every RPAL_EPOLL_FAIR calls the kernel goes first, so ordinary
	 * descriptors get room even when maxevents is 1.  Not on a borrower's
	 * thread: there our own thread watches them (park_wait). */
	n = 0;
	if (!borrowed && ++ep->since_kernel >= RPAL_EPOLL_FAIR && !top_idle(ep)) {
		ep->since_kernel = 0;
		n = kernel_wait(ep, events, max, 0);
		if (n < 0)
			return n;
	}
	n += scan(ep, events + n, max - n);
	if (n == 0 && ep->since_kernel && !borrowed && !top_idle(ep)) {
		ep->since_kernel = 0;
		k = kernel_wait(ep, events, max, 0);
		if (k < 0)
			return k;
		n = k ? k : scan(ep, events, max);      /* a death may have been noted */
	}
	if (n || timeout == 0)
		return n;

	/* A parked waiter reads the clock only for a deadline. */
	if (timeout > 0) {
		t0 = now_ns();
		deadline = t0 + (uint64_t)timeout * 1000000;
	}
	if (mine && !ep->parking) {
		if (!load_relaxed(&ep->park_owner))
			store_relaxed(&ep->park_owner, (unsigned long)pthread_self());
		return park_wait(ep, events, max, deadline, fast);
	}
	budget = spin_budget(&ep->spin, ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE ? set_received(ep) : 0);
	bool yield = false;
	if (budget) {
		/* Spin only if some producer runs on another CPU: one on ours
		 * cannot publish while we spin; hand it the CPU instead. */
		uint32_t me = this_cpu();
		bool other = false;
		for (i = 0; i < ep->nregs; i++) {
			struct rpal_conn *c = ep->regs[i]->c;
			cpu_note(&c->me->rx_cpu);
			if (load_relaxed(&c->pb->tx_cpu) != me)
				other = true;
		}
		yield = !other && ep->nregs;
	}
	/* As in conn_wait(): a first yield that finds something needs no clock. */
	if (yield) {
		lock_give(&ep->lock);
		sched_yield();
		lock_take(&ep->lock);
		n = scan(ep, events, max);
		if (n) {
			spin_caught_at_once(&ep->spin);
			return n;
		}
	}
	/* The clock only for a spin (and how long it paid), a sleep the
	 * adaptive policy learns from, or a deadline. */
	if ((budget || ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE) && !t0)
		t0 = now_ns();
	if (budget)
		tsc0 = cycles_now();
	/* As in conn_wait(): a peer we woke is spun out first. */
	bool woke = !yield && set_peer_waking(ep);
	bool waking = ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE && spin_waking(&ep->spin, woke, budget);
	bool learn = true;
	enum wait_pace pace = yield ? PACE_OURS : woke ? PACE_WAKING : PACE_PEER;  /* as in conn_wait() */
	for (i = 1; budget && ep->nregs; i++) {
		if (yield) {
			lock_give(&ep->lock);
			sched_yield();
			lock_take(&ep->lock);
		} else {
			cpu_relax();
		}
		if (!(i & 63)) {        /* let rpal_epoll_ctl() in now and then */
			lock_give(&ep->lock);
			lock_take(&ep->lock);
			mpk_all_sync();
		}
		n = scan(ep, events, max);
		if (!n && !(i % SPIN_KERNEL_POLL)) {
			k = kernel_wait(ep, events, max, 0);
			if (k < 0)
				return k;
			n = k ? k : scan(ep, events, max);
		}
		if (n) {
			spin_count(ep, tsc0);
			spin_caught(&ep->spin, waking ? now_ns() : t0, waking ? PACE_WAKING : pace);
			return n;
		}
		if (yield || !(i & 63)) {
			uint64_t now = now_ns();
			if (waking && !set_peer_waking(ep)) {
				waking = false;
				pace = PACE_PEER;
				t0 = now;
			} else if ((waking ? now - t0 > ep->spin.max_ns : now - t0 > budget) || now >= deadline) {
				learn = !waking;
				spin_count(ep, tsc0);
				break;
			}
		}
	}

	/* An rpal-only set sleeps on futexes; any other, in epoll. */
	for (;;) {
		uint64_t now = deadline == UINT64_MAX ? 0 : now_ns();
		int left;

		if (now >= deadline)
			return 0;
		if (atomic_load(&ep->nuser) == 0 && ep->nregs && ep->nregs <= FUTEX_SLEEP_MAX) {
			k = futex_sleep(ep, events, max, deadline,
					ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE && learn ? t0 : 0, pace);
		} else {
			left = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
			sleep_begin(ep, false, false);
			n = scan(ep, events, max);
			if (n) {
				sleep_end(ep);
				return n;
			}
			/* Timed as futex_sleep() times its sleeps: a set that
			 * also holds ordinary descriptors learns its costs too. */
			bool timed = ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE && spin_cost_sample(ep->sleeps++);
			uint64_t cpu0 = timed ? thread_cpu_ns() : 0;
			k = kernel_wait(ep, events, max, left);
			if (cpu0)
				spin_note_sleep_cpu(thread_cpu_ns() - cpu0);
			sleep_end(ep);
		}
		if (k < 0)
			return k;
		n = k + scan(ep, events + k, max - k);
		if (n) {
			if ((budget || ep->spin.policy == RPAL_WAIT_POLICY_ADAPTIVE) && learn)
				spin_update(&ep->spin, now_ns() - t0);
			return n;
		}
	}
}

RPAL_EXPORT RPAL_HOT int rpal_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	struct rpal_ep *ep = ep_get(epfd);
	bool owner, fast = false, counted = false, others;
	uint64_t keys;
	int n;

	if (!ep)
		return epoll_wait(epfd, events, maxevents, timeout);
	/* epoll_wait()'s bounds (EP_MAX_EVENTS in the kernel). */
	if (maxevents <= 0 || maxevents > (int)(INT_MAX / sizeof(struct epoll_event)) || !events) {
		errno = EINVAL;
		return -1;
	}
	owner = set_is_owner(ep);
	if (owner)
		fast = owner_take(ep);
	else
		counted = other_take(ep);
	keys = mpk_all_begin();         /* protect_peers: every peer readable in here */
	n = ep_wait(ep, events, maxevents, timeout, &fast);
	mpk_all_end(keys);
	/*
	 * Events while other threads sleep in the set: wake one to look again,
	 * as epoll does for what stays ready.  A doorbell edge woke only us, and
	 * the peer rings once per sleep count: without this, a message it
	 * published before we took the set would wait for our next call.
	 */
	others = n > 0 && ep->sleepers;
	if (owner)
		owner_give(ep, fast);
	else
		other_give(ep, counted);
	if (others)
		ep_kick(ep);
	if (n < 0) {
		errno = -n;
		return -1;
	}
	return n;
}
