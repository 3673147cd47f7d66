/* SPDX-License-Identifier: MIT */
/*
 * notify.c - spin, then sleep; wake a peer only when it said it sleeps.
 *
 * The sleep/wake handshake is a Dekker pair on two locations in two arenas:
 *
 *   waiter (my arena):  waiting |= bit;  MB (W0);  re-check the ring;  sleep
 *   peer   (its arena): publish;         MB (W1);  if (waiting & bit) ring doorbell
 *
 * With both barriers, at least one side sees the other's store: either the
 * waiter finds the message and does not sleep, or the peer sees the bit and
 * rings.  The doorbell is a Unix stream socket pair (see wire.h): rung with
 * a send that nothing the peer does to the end it shares with us can make
 * block (see doorbell_write); registered edge-triggered in epoll sets, and
 * drained before the next sleep.  The waiting word counts sleeps, so the
 * peer rings once per sleep however many messages it publishes meanwhile.
 *
 * Several of our threads may sleep on one connection at once (two epoll
 * waiters, or one plus a blocking send or receive), so sleepers are counted
 * by kind (c->wait_count) and a flag is cleared only when no sleeper needs
 * it: the first to wake must not take the others' advertisement with it.
 * Only a thread about to sleep on the doorbell drains it, so no futex
 * sleeper swallows a byte rung for a doorbell sleeper.
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Set once futex_waitv() says ENOSYS: sleep on the doorbell instead. */
static _Atomic bool no_futex_waitv;

/*
 * One byte into the peer's doorbell socket.  The send must never block,
 * whatever the peer does: it shares the open file with us and could clear
 * O_NONBLOCK on it and fill its buffer, so MSG_DONTWAIT makes this one send
 * non-blocking whatever the file says.  A peer that died has closed its
 * end: the send fails with EPIPE, and MSG_NOSIGNAL keeps it from raising
 * SIGPIPE, which would kill an application that does not ignore it.
 *
 * Why a socket and not a pipe: every pipe operation takes the pipe's mutex,
 * which a peer holding the write end can keep for as long as it likes (a
 * splice() from an idle socket into the pipe waits with it held), and a
 * ring or a drain would then hang, unkillable.  A Unix stream socket holds
 * no lock across a wait that the peer could start.
 */
static void doorbell_write(int fd)
{
	static const char zero;

	(void)!send(fd, &zero, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Ring once per sleep of the peer, on the futex, the doorbell, or both if
 * it has sleepers on each.  EAGAIN means the socket is full: the peer has
 * unread bytes, hence an edge, and will wake anyway.  False: this sleep
 * was rung already.  count: the statistics page's counter of the calling
 * side (one writer). */
static RPAL_HOT bool ring_doorbell(struct rpal_conn *c, uint64_t w, uint32_t futex_bit, uint32_t bell_bit,
			  _Atomic uint64_t *last, _Atomic uint64_t *count)
{
	if (w == load_relaxed(last))
		return false;
	store_relaxed(last, w);
	/* A sample of wake-ups is timed: what a sleep costs its waker. */
	uint64_t t0 = spin_cost_sample(load_relaxed(count)) ? now_ns() : 0;

	if (w & futex_bit) {
		/* Change the word it waits on, then wake: a FUTEX_WAIT that
		 * comes later sees the change and does not sleep. */
		_Atomic uint32_t *word = c->wake_peer ? c->wake_peer : &c->me->wake_seq;

		/* Asked for (a sleeper that learns its wake-up latency): when
		 * we rang, stored before the bump that it wakes to. */
		if (c->wake_peer && !load_relaxed(wake_rung(word)))
			store_relaxed(wake_rung(word), t0 ? t0 : now_ns());
		atomic_fetch_add(word, 1);
		syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	if (!(w & futex_bit) || (w & bell_bit))
		doorbell_write(c->peer_doorbell);
	if (t0)
		spin_note_wake(now_ns() - t0);
	stat_inc(count);
	return true;
}

/* The consumer advertised a sleep (w: its waiting word): wake it. */
RPAL_HOT void notify_wake_rx(struct rpal_conn *c, uint64_t w)
{
	if (!ring_doorbell(c, w, RPAL_WAIT_RX_FUTEX, RPAL_WAIT_RX_BELL, &c->last_rung_rx, &c->st->tx.wakeups))
		stat_inc(&c->st->tx.wakeups_avoided);
}

/*
 * Empty my doorbell before advertising a new sleep.  An honest peer rings
 * once per sleep, so a few bytes at most wait here; a peer that floods it
 * must not keep us reading forever, so reads stop after 16 KiB and the
 * doorbell stays marked for the next sleep to drain.  Leftover bytes cost
 * no wake-up: every ring into a socket is a new edge.
 */
void doorbell_drain(struct rpal_conn *c)
{
	char buf[4096];
	int i;

	/* Our end is ours alone, non-blocking: a plain read where it refuses
	 * passed descriptors.  Before 6.16 what a peer passed comes out here
	 * and is closed without blocking (peer_recv). */
	bool plain = load_relaxed(&bells_refuse_fds);

	store_relaxed(&c->bell_dirty, false);
	for (i = 0; i < 4; i++) {
		ssize_t n = plain ? read(c->doorbell, buf, sizeof(buf)) : peer_recv(c->doorbell, buf, sizeof(buf));

		if (n == 0)     /* see the poll() in conn_wait() */
			store_relaxed(&c->bell_eof, true);
		if (n != (ssize_t)sizeof(buf))
			return;
	}
	store_relaxed(&c->bell_dirty, true);
}

/*
 * Sleepers are counted by kind, 16 bits each in c->wait_count, in the
 * order of the kind flags: RX on the futex, TX on the futex, RX on the
 * doorbell, TX on the doorbell.  Every sleep sets one kind flag beside its
 * direction's flag, so a direction has sleepers exactly when one of its two
 * kinds does.  Straight-line bit arithmetic: both run on every sleep.
 */
#define WAIT_KIND_FIRST 2       /* bit of RPAL_WAIT_RX_FUTEX, the first kind */
_Static_assert(RPAL_WAIT_RX_FUTEX == 1u << WAIT_KIND_FIRST && RPAL_WAIT_TX_FUTEX == 2u << WAIT_KIND_FIRST &&
	       RPAL_WAIT_RX_BELL == 4u << WAIT_KIND_FIRST && RPAL_WAIT_TX_BELL == 8u << WAIT_KIND_FIRST,
	       "the kind flags are four bits in a row, RX and TX alternating");

/* One sleeper of each kind in bits, as counted in wait_count. */
static uint64_t wait_units(uint32_t bits)
{
	uint64_t k = (bits >> WAIT_KIND_FIRST) & 0xf;

	return (k & 1) | (k & 2) << 15 | (k & 4) << 30 | (k & 8) << 45;
}

/* The flags of the kinds, and directions, that have no sleeper in count. */
static uint32_t wait_unused(uint64_t count)
{
	uint32_t busy = (uint32_t)((count & 0xffff) != 0) | (uint32_t)((count >> 16 & 0xffff) != 0) << 1 |
			(uint32_t)((count >> 32 & 0xffff) != 0) << 2 | (uint32_t)((count >> 48) != 0) << 3;
	uint32_t unused = (~busy & 0xf) << WAIT_KIND_FIRST;

	if (!(busy & 5))        /* neither RX kind */
		unused |= RPAL_WAIT_RX;
	if (!(busy & 10))       /* neither TX kind */
		unused |= RPAL_WAIT_TX;
	return unused;
}

/* Advertise a sleep on bits (a direction and its kind, counted until
 * wait_end()); the RMW, with smp_mb_after_rmw(), is barrier W0.  Bits 0 only counts a new
 * sleep of flags already advertised, so the peer rings again. */
RPAL_HOT void wait_begin(struct rpal_conn *c, uint32_t bits)
{
	uint64_t w, nw;

	/* Count before the flags: see wait_end(). */
	if (bits)
		atomic_fetch_add(&c->wait_count, wait_units(bits));
	/* One locked instruction: count the sleep and set the bits. */
	w = load_relaxed(&c->me->waiting);
	do
		nw = (w + RPAL_WAIT_EPOCH) | bits;
	while (!atomic_compare_exchange_weak(&c->me->waiting, &w, nw));
	smp_mb_after_rmw();
}

/*
 * End the sleep wait_begin(c, bits) advertised.  A flag is cleared only if
 * no sleeper needs it when the word is swapped: a sleeper that counts
 * itself in after our look changes the word (its sleep count), so our swap
 * fails and we look again; one that counts itself in after our swap sets
 * the flag after we cleared it.
 */
RPAL_HOT void wait_end(struct rpal_conn *c, uint32_t bits)
{
	uint64_t w, before;
	uint32_t clear;

	before = atomic_fetch_sub(&c->wait_count, wait_units(bits));
	/* Every kind we end was counted: else we borrowed from its neighbour. */
	assert(!(bits & wait_unused(before) & ~(uint32_t)(RPAL_WAIT_RX | RPAL_WAIT_TX)));
	(void)before;
	w = atomic_load(&c->me->waiting);
	do {
		clear = bits & wait_unused(atomic_load(&c->wait_count));
		if (!clear)
			return;
	} while (!atomic_compare_exchange_weak(&c->me->waiting, &w, w & ~(uint64_t)clear));
}

/* notify_peer_tx(), when it is time to look. */
RPAL_HOT void notify_peer_tx_now(struct rpal_conn *c)
{
	uint64_t w;

	c->rx_checked = c->rx_head;
	smp_mb();       /* W1 for the TX direction */
	w = load_relaxed(&c->pb->waiting);
	if (unlikely(w & RPAL_WAIT_TX))
		ring_doorbell(c, w, RPAL_WAIT_TX_FUTEX, RPAL_WAIT_TX_BELL, &c->last_rung_tx, &c->st->rx.wakeups);
}

/*
 * We shut down reading: the peer's senders asleep on a full ring must wake
 * to see it.  Any thread may call this, so the ring is not deduplicated
 * against the consumer's last (a spare wake-up at worst).
 */
void notify_peer_tx_closed(struct rpal_conn *c)
{
	uint64_t w;
	_Atomic uint64_t never = UINT64_MAX;

	smp_mb();       /* W1: our state store before the load of its flag */
	w = load_relaxed(&c->pb->waiting);
	if (w & RPAL_WAIT_TX)
		ring_doorbell(c, w, RPAL_WAIT_TX_FUTEX, RPAL_WAIT_TX_BELL, &never, &c->st->rx.wakeups);
}

/*
 * Whether the peer still sleeps the sleep we last woke it from.  What we
 * wait for next then comes from a thread the scheduler has yet to run,
 * tens of µs away across CPUs on a VM: that part of a wait is the peer's
 * wake-up, not its pace: the adaptive policy may spin it out
 * (spin_waking) and time the wait from when the peer runs.  A peer can
 * fake this state, and gain at most a spin of spin_us per wait by it.
 */
RPAL_HOT bool peer_waking(const struct rpal_conn *c)
{
	uint64_t w = load_relaxed(&c->pb->waiting);

	return (w & (RPAL_WAIT_RX | RPAL_WAIT_TX)) &&
	       (w == load_relaxed(&c->last_rung_rx) || w == load_relaxed(&c->last_rung_tx));
}

/*
 * Whether c's sleepers wait in poll(): no wake page to sleep on, and a
 * kernel without futex_waitv() (an empty wait is EINVAL where it exists).
 * Asked when the connection is made, so that it gets a descriptor those
 * sleepers can be woken through (c->shut_kick).
 */
bool conn_sleeps_in_poll(const struct rpal_conn *c)
{
	if (c->wake_mine)
		return false;
	if (!load_relaxed(&no_futex_waitv) && futex_waitv(NULL, 0, NULL) < 0 && errno == ENOSYS)
		store_relaxed(&no_futex_waitv, true);
	return load_relaxed(&no_futex_waitv);
}

static RPAL_HOT bool wait_done(struct rpal_conn *c, unsigned what)
{
	if (conn_dead(c) || conn_err(c) || load_acquire(&c->hung_up))
		return true;
	if (what & WANT_RX)
		return ring_readable(c) || load_relaxed(&c->shut_rd) || (peer_update(c) & RPAL_STATE_SHUT_WR);
	if (peer_update(c) & RPAL_STATE_CLOSED)
		return true;
	if ((what & WANT_SLOT) && ring_reserve(c))
		return false;
	if (what & WANT_QUOTA) {
		acks_drain(c);
		if (!quota_ok(c, load_relaxed(&c->want_bytes), false))
			return false;
	}
	return true;
}

/* Leaving a wait: a peer the watcher saw hang up is marked gone here (its
 * flag ended the wait), so the caller finds it so. */
static RPAL_HOT int wait_left(struct rpal_conn *c)
{
	if (unlikely(load_acquire(&c->hung_up)) && !conn_dead(c))
		conn_poll_peer(c);
	return 0;
}

/*
 * Wait until what (WANT_*) holds, the peer dies or shuts down.  Spins up to
 * the adaptive budget, then sleeps on the doorbell, the socket and the pidfd.
 */
RPAL_HOT int conn_wait(struct rpal_conn *c, uint32_t what, int flags)
{
	uint32_t bit = (what & WANT_RX) ? RPAL_WAIT_RX : RPAL_WAIT_TX;
	struct rpal_spin *spin = (what & WANT_RX) ? &c->rx_spin : &c->tx_spin;
	_Atomic uint64_t *sleeps = (what & WANT_RX) ? &c->st->rx.sleeps : &c->st->tx.sleeps;
	_Atomic uint64_t *spun = (what & WANT_RX) ? &c->st->rx.spin_tsc : &c->st->tx.spin_tsc;
	uint64_t t0, tsc0, budget;
	unsigned i;

	if (wait_done(c, what))
		return wait_left(c);
	if (flags & RPAL_NONBLOCK)
		return -EAGAIN;

	budget = spin_budget(spin, (what & WANT_RX) ? ring_head(c) : c->tail);
	/* Spinning for a thread on our own CPU only keeps it from running:
	 * hand it the CPU instead (see spin_wait_yields). */
	bool yield = false;
	if (budget) {
		uint32_t me = cpu_note((what & WANT_RX) ? &c->me->rx_cpu : &c->me->tx_cpu);
		uint32_t it = load_relaxed((what & WANT_RX) ? &c->pb->tx_cpu : &c->pb->rx_cpu);
		yield = it == me;
	}
	/* A peer on our CPU usually has what we wait for by the time the
	 * first yield comes back: that wait cost one system call and no
	 * clock read.  Only a wait that outlasts it is timed. */
	if (yield) {
		sched_yield();
		if (wait_done(c, what)) {
			spin_caught_at_once(spin);
			return wait_left(c);
		}
	}
	/* The clock only to time a spin, or a sleep the adaptive policy
	 * learns from: a sleep at once under RPAL_WAIT_POLICY_SLEEP needs none.
	 * The statistics count the spin in counter cycles (arch.h), a read of
	 * which costs half of now_ns(); read first, so that the count covers
	 * all the time the budget measured. */
	tsc0 = budget ? cycles_now() : 0;
	t0 = budget || spin->policy == RPAL_WAIT_POLICY_ADAPTIVE ? now_ns() : 0;
	/* A peer we woke is on its way: spin that out (up to the ceiling)
	 * before the budget, which counts from when it runs, where that
	 * pays (spin_waking). */
	bool woke = !yield && peer_waking(c);
	bool waking = spin->policy == RPAL_WAIT_POLICY_ADAPTIVE && spin_waking(spin, woke, budget);
	bool learn = true;
	enum wait_pace pace = yield ? PACE_OURS : woke ? PACE_WAKING : PACE_PEER;
	for (i = 1; budget; i++) {
		if (yield)
			sched_yield();
		else
			cpu_relax();
		if (wait_done(c, what)) {
			stat_add_shared(spun, cycles_now() - tsc0);
			spin_caught(spin, waking ? now_ns() : t0, waking ? PACE_WAKING : pace);
			return wait_left(c);
		}
		if (!yield && (i & 63))
			continue;
		uint64_t now = now_ns();
		if (waking && !peer_waking(c)) {
			waking = false;
			pace = PACE_PEER;       /* timed from when it runs */
			t0 = now;
		} else if (waking ? now - t0 > spin->max_ns : now - t0 > budget) {
			/* A wake-up that outlasts the ceiling says nothing of
			 * the peer's pace: not learnt. */
			learn = !waking;
			stat_add_shared(spun, cycles_now() - tsc0);
			break;
		}
	}

	/*
	 * Sleep on futexes: the cheapest wake-up there is.  We wait on the
	 * peer's wake_seq, sampled before we advertise the sleep, so a wake that
	 * lands before our wait makes it return at once; and on watch_seq, which
	 * the watcher thread bumps when a peer hangs up or dies.  No timeout:
	 * an idle connection costs nothing.  A connection with a wake page
	 * needs only FUTEX_WAIT on its word.  Without futex_waitv (Linux <
	 * 5.16) the others sleep in poll() on the doorbell, the socket and the
	 * pidfd: a doorbell byte drained by the connection's epoll set could
	 * leave such a sleeper waiting, which a futex sleeper never is.
	 */
	for (;;) {
		bool futex = c->wake_mine || !load_relaxed(&no_futex_waitv);
		uint32_t bits = bit | (bit == RPAL_WAIT_RX ? (futex ? RPAL_WAIT_RX_FUTEX : RPAL_WAIT_RX_BELL)
							   : (futex ? RPAL_WAIT_TX_FUTEX : RPAL_WAIT_TX_BELL));
		const _Atomic uint32_t *word = c->wake_mine ? c->wake_mine : &c->pb->wake_seq;
		uint32_t seq = load_acquire(word), wseq = load_acquire(&watch_seq);

		/* A bump we have not looked at may be this peer's death, and
		 * it came before our sample: the futex would not return. */
		if (futex && wseq != load_relaxed(&c->watch_seen)) {
			store_relaxed(&c->watch_seen, wseq);
			conn_poll_peer(c);
		}
		if (!futex && load_relaxed(&c->bell_dirty))
			doorbell_drain(c);
		/* Sampled before the look below: a shutdown after that look
		 * finds this sleeper on its kick (rpal_shutdown writes it after
		 * setting shut_rd). */
		int shut_kick = load_relaxed(&c->shut_rd) ? -1 : c->shut_kick;
		/* Counted before the look below, uncounted once out of the
		 * futex: see conn_wake_locked(). */
		_Atomic uint32_t *asleep = futex && c->wake_mine ? &c->asleep_mine[bit != RPAL_WAIT_RX] : NULL;
		if (asleep)
			atomic_fetch_add(asleep, 1);
		/* The adaptive policy prices a sleep's wake-up latency too. */
		bool lat = asleep && spin->policy == RPAL_WAIT_POLICY_ADAPTIVE;
		if (lat)
			rung_ask(c->wake_mine);
		wait_begin(c, bits);
		if (wait_done(c, what)) {
			wait_end(c, bits);
			if (asleep)
				atomic_fetch_sub(asleep, 1);
			break;
		}
		/* A sample of sleeps is timed in CPU, what one costs the
		 * sleeper, where the adaptive policy learns from it. */
		uint64_t cpu0 = spin->policy == RPAL_WAIT_POLICY_ADAPTIVE &&
				spin_cost_sample(load_relaxed(sleeps)) ? thread_cpu_ns() : 0;
		/* An epoll waiter may count a sleep on this connection too. */
		stat_add_shared(sleeps, 1);
		if (futex && c->wake_mine) {
			/* Our word of the wake page: the peer bumps it to wake
			 * us, and so does the watcher when the peer dies. */
			syscall(SYS_futex, (uint32_t *)c->wake_mine, FUTEX_WAIT, seq, NULL, NULL, 0);
			atomic_fetch_sub(asleep, 1);
			if (lat && learn) {
				uint64_t now = now_ns(), rung = rung_within(c->wake_mine, t0, now);
				const _Atomic uint32_t *hint = bit == RPAL_WAIT_RX ? &c->pb->tx_cpu : &c->pb->rx_cpu;

				if (rung)
					spin_note_wake_lat(spin, t0, rung, now, pace, cpu_apart(load_relaxed(hint)));
			}
			if (load_acquire(&watch_seq) != wseq)
				conn_poll_peer(c);
		} else if (futex) {
			struct futex_waitv wv[2] = { fwv(word, seq, true), fwv(&watch_seq, wseq, false) };
			if (futex_waitv(wv, 2, NULL) < 0 && errno == ENOSYS)
				store_relaxed(&no_futex_waitv, true);
			if (load_acquire(&watch_seq) != wseq)
				conn_poll_peer(c);
		} else {
			/* A doorbell at end of file (its peer end closed or
			 * shut down) is readable for ever: poll() would spin. */
			struct pollfd pfd[4] = {
				{ .fd = load_relaxed(&c->bell_eof) ? -1 : c->doorbell, .events = POLLIN },
				{ .fd = c->fd, .events = POLLRDHUP },
				{ .fd = c->pidfd, .events = POLLIN },
				{ .fd = shut_kick, .events = POLLIN },
			};
			if (poll(pfd, 4, -1) > 0) {
				if (pfd[0].revents & POLLIN)
					store_relaxed(&c->bell_dirty, true);
				if ((pfd[1].revents & (POLLHUP | POLLRDHUP | POLLERR)) || (pfd[2].revents & POLLIN))
					conn_mark_dead(c, pfd[2].revents & POLLIN);
			}
		}
		if (cpu0)
			spin_note_sleep_cpu(thread_cpu_ns() - cpu0);
		wait_end(c, bits);
		if (wait_done(c, what))
			break;
	}
	if (t0 && learn)
		spin_update(spin, now_ns() - t0);
	return wait_left(c);
}
