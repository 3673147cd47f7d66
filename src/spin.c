/* SPDX-License-Identifier: MIT */
/*
 * spin.c - how long a waiter spins before it sleeps (rpal_config.wait_policy).
 *
 * A sleep costs the sleeper's futex wait and reschedule and the waker's
 * FUTEX_WAKE: CPU time this process measures on a sample of its sleeps and
 * wake-ups (C, a few µs to a few tens on a VM).  Adaptive waiting spins up
 * to C while most waits end within it (the ski-rental rule: a spin that
 * catches the event was cheaper than sleeping in CPU and far faster in
 * latency; one that does not at most doubled the sleep's cost).  Where
 * many waits outlast C, as on a server whose requests come either in a
 * queue or after a pause, it spins only as long as pays on the recent
 * waits: the expected cost of a spin of b is the integral of the survival
 * S(t) (the share of waits still going at t) from 0 to b, plus S(b) * C,
 * and b = 0 costs C.  With waits that end within 2 µs or last a
 * millisecond it spins about 2 µs, not the whole C; with waits all longer
 * than C, not at all.  Closed loops keep the whole C: the model counts a
 * sleep's CPU but not its wake-up latency, which a wait just beyond a
 * tight budget would add to every reply behind it.
 *
 * S is kept per bucket of doubling width (250 ns to 64 µs) as the waits
 * that reached the bucket and the waits that ended in it, halved as they
 * grow so that recent waits count most.  A wait that slept after a spin
 * of b says only that it outlasted b: the buckets beyond b learn nothing
 * from it.  Probes fill them: one wait in probe_gap spins up to C (never
 * more than spin_us), the gap doubling up to 256 while probes find nothing
 * the chosen budget would miss, so an idle connection burns one short
 * spin in 256 waits; a probe that catches what the budget would not
 * halves it (down to 8), and on a connection that was not spinning at
 * all sets it to 1, so one that turns busy spins again within a few
 * waits.  A sleep's own length says nothing more: it includes the wake-up
 * latency, tens of µs across cores on small VMs.
 *
 * Where requests overlap, a waiter that sleeps finds several messages
 * queued when it runs, and one whose spin catches the first hands them
 * over one wait each: sleeping is cheaper per message than C says, and
 * both C and the cap are scaled by the messages handled after a caught
 * wait over those handled after a sleep (averaged; see batch_cost).
 *
 * A wait that begins with the peer waking from a sleep we woke it from is
 * a case apart (spin_waking).
 *
 * A sleep also delays the message it waits for by the wake-up's latency W
 * (from the peer's ring to our running: tens of µs across CPUs on a VM, a
 * few on one), which the sleeper measures from the ring time the waker
 * leaves beside the wake page's word.  Where most of the gaps the peer
 * leaves are shorter than W, a sleeper would fall behind a peer that
 * waits for it (a client that sends its next request when the reply
 * comes, at a rate a spinner keeps up with): each sleep adds W to a gap
 * shorter than W, and a queue builds until waits turn short enough to
 * catch.  So there W counts in a sleep's price, as if it were CPU, and
 * the waiter spins through such gaps, up to spin_us.  Not where sleeps
 * gather more messages than catches: a peer that keeps sending while we
 * sleep (requests that overlap) is not held up by our wake-up, and a
 * sleep that batches is the cheaper way to keep up.  Nor where the gaps
 * are longer than W: W says nothing of the CPU such a wait would burn,
 * and spinning through the gaps of a moderate rate would also keep two
 * processes that could share a CPU apart.  Waits that yielded to a peer
 * on our CPU measure our CPU, not its gaps; those that began with the
 * peer waking measure its wake-up too, and count as short only where its
 * answer came within a wake-up and a quarter of our last message, from a
 * CPU we may not run on: of two that wake each other in turn, with
 * nothing else between, each one's sleep lies on the other's path
 * (note_gap).  Once behind its schedule, such a pair stays behind until
 * one of them spins.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

#define PROBE_GAP_MAX 256
/* Keep about this many recent waits per bucket. */
#define SPIN_MEMORY 64
/* Spin the whole cap while this share of the waits that spun it (out of
 * 65536) ended within it. */
#define CATCH_KEEP_CAP 58982   /* 90 % */
/* Messages per wait are averaged in 1/256ths (within 8/256 of a steady
 * count, the step of the average), counting at most BATCH_MAX a wait. */
#define BATCH_ONE 256
#define BATCH_MAX 64
/* A spin-out of a waking peer pays if this many waits after it find none;
 * where they do not, one waking wait in WAKING_PROBE is spun out. */
#define WAKING_RUN 8
#define WAKING_PROBE 256
/* A sleep's price includes its wake-up latency while at least this share
 * of the recent waits (out of 65536) ended sooner than a wake-up takes. */
#define SHORT_KEEP 32768

/* Until measured: a futex sleep and its wake-up on a VM. */
#define SLEEP_COST_DEFAULT_NS 3000
#define WAKE_COST_DEFAULT_NS  1500

static _Atomic uint32_t sleep_cost_ns = SLEEP_COST_DEFAULT_NS;
static _Atomic uint32_t wake_cost_ns = WAKE_COST_DEFAULT_NS;
/* The process's view of its wake-up latency, for the statistics page
 * only: each waiter prices its sleeps with its own. */
static _Atomic uint32_t wake_lat_ns;

/* One step of a moving average (weight 1/8); 0 is no average yet, and
 * the first sample becomes it. */
static uint32_t average_step(uint32_t avg, uint64_t x)
{
	int64_t a = avg;

	return a ? (uint32_t)(a + ((int64_t)x - a) / 8) : (uint32_t)x;
}

/* A moving average that threads may update at once: a lost update only
 * delays it.  Returns the new average. */
static uint32_t average_in(_Atomic uint32_t *avg, uint64_t x)
{
	uint32_t now;

	if (x > 1000000)
		x = 1000000;    /* a preempted sample says nothing of the cost */
	now = average_step(load_relaxed(avg), x);
	store_relaxed(avg, now);
	return now;
}

void spin_note_sleep_cpu(uint64_t ns) { stat_note_cost(false, average_in(&sleep_cost_ns, ns)); }
void spin_note_wake(uint64_t ns) { stat_note_cost(true, average_in(&wake_cost_ns, ns)); }

/*
 * Count a wait that ended gap_ns in among those shorter than a wake-up or
 * not (weight 1/16), if it measured the gap the peer left.  One that began
 * with the peer waking from a sleep we woke it from measured that wake-up
 * too.  Where the peer's message came within a wake-up and a quarter of
 * the end of our last wait (since_ns: our own turn, then its wake-up and
 * answer), the two wake each other in turn with nothing else between, and
 * the wait counts as short if the peer runs where we may not: two that
 * may share a CPU are better brought together by the scheduler, on which
 * a wake-up costs a few µs, than kept apart by a spin.  Else it says the
 * peer's gaps, or ours, were long enough to sleep in: such waits wear the
 * share down slowly (a pair that sleeps between requests keeps no share
 * it learnt while busy).  One that yielded to a peer on our CPU says
 * nothing either way.
 */
static RPAL_HOT void note_gap(struct rpal_spin *s, uint64_t gap_ns, uint64_t since_ns, enum wait_pace pace)
{
	int32_t share = s->short_share;
	uint64_t w = s->wake_lat_ns;

	if (pace == PACE_WAKING && since_ns < w + w / 4 && s->apart) {
		share += (UINT16_MAX - share) / 16;
		/* Such a pair falls further behind with every wait: once a
		 * sleep is priced with its wake-up, the next wait probes
		 * rather than waiting its turn (probe_gap). */
		if (share >= SHORT_KEEP && s->short_share < SHORT_KEEP)
			s->probe_left = 1;
	} else if (pace == PACE_PEER && w) {
		share += ((gap_ns < w ? UINT16_MAX : 0) - share) / 16;
	} else if (pace == PACE_WAKING) {
		share -= share / 64;
	}
	s->short_share = (uint16_t)share;
}

/* From the end of the waiter's last timed wait to at, in a wait that
 * began at t0; UINT64_MAX where that end is not known. */
static RPAL_HOT uint64_t since_last(const struct rpal_spin *s, uint64_t t0, uint64_t at)
{
	uint64_t last = s->last_end_ns;

	return last && last <= t0 ? at - last : UINT64_MAX;
}

void spin_note_wake_lat(struct rpal_spin *s, uint64_t t0, uint64_t rung, uint64_t now, enum wait_pace pace,
			bool apart)
{
	uint64_t lat_ns = now - rung, gap_ns = rung - t0;

	s->end_ns = now;
	if (lat_ns > 1000000)
		return;         /* preempted: says nothing of a wake-up */
	s->wake_lat_ns = average_step(s->wake_lat_ns, lat_ns);
	s->apart = apart;
	note_gap(s, gap_ns, since_last(s, t0, rung), pace);
	stat_note_wake_lat(average_in(&wake_lat_ns, lat_ns));
}

uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What one sleep and its wake-up cost. */
static RPAL_HOT uint64_t sleep_cost(void)
{
	return (uint64_t)load_relaxed(&sleep_cost_ns) + load_relaxed(&wake_cost_ns);
}

/*
 * A sleep's cost per message it brings, counted in the messages a caught
 * wait brings.  Where requests overlap, a receiver that sleeps finds
 * several queued by the time it runs, while a spin that catches the
 * first hands them over one wait each: its sleeps are that much cheaper
 * per message, and spinning pays that much less.  At most half as much:
 * larger batches come from a stream whose sender may be waiting for us
 * (for room, or for an answer), which each sleep would stall.
 */
static RPAL_HOT uint64_t batch_cost(const struct rpal_spin *s)
{
	uint64_t c = sleep_cost();
	uint32_t per_catch = s->per_catch > BATCH_ONE ? s->per_catch : BATCH_ONE;

	/* A sleep that gathers no more than a catch: the peer waits for us,
	 * and where its gaps are shorter than our wake-up, it would fall
	 * behind (see "wake-up latency" above). */
	if (s->per_sleep <= per_catch)
		return c + (s->short_share >= SHORT_KEEP ? s->wake_lat_ns : 0);
	return s->per_sleep >= 2 * per_catch ? c / 2 : c * per_catch / s->per_sleep;
}

/* The longest spin: a sleep's cost per message, never more than the ceiling. */
static RPAL_HOT uint64_t spin_cap(const struct rpal_spin *s)
{
	uint64_t c = batch_cost(s);

	return c < s->max_ns ? c : s->max_ns;
}

/* Where bucket i begins: 0, then 250 ns doubling to 64 µs (the last one
 * has no end). */
static RPAL_HOT uint32_t edge(unsigned i)
{
	return i ? 125u << i : 0;
}

static RPAL_HOT unsigned bucket(uint64_t ns)
{
	unsigned i = 0;

	while (i + 1 < RPAL_SPIN_BUCKETS && ns >= edge(i + 1))
		i++;
	return i;
}

/* Spin the whole cap from now on, and count its catches afresh. */
static void whole_cap(struct rpal_spin *s)
{
	s->budget_ns = UINT32_MAX;
	s->caught_share = UINT16_MAX;
}

void spin_init(struct rpal_spin *s, unsigned max_us, unsigned policy)
{
	uint64_t ns = (uint64_t)max_us * 1000;

	memset(s, 0, sizeof(*s));
	s->max_ns = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
	s->policy = (uint8_t)policy;
	whole_cap(s);   /* spin at first: a new connection is usually busy */
	s->probe_gap = s->probe_left = 1;
	s->waking_pays = UINT16_MAX;    /* until a spin-out says otherwise */
	s->waking_left = WAKING_PROBE;
	s->since_spun_out = WAKING_RUN;
	s->per_catch = s->per_sleep = BATCH_ONE;
}

/* Credit the messages handled since the last wait to the way it ended. */
static RPAL_HOT void count_batch(struct rpal_spin *s, uint64_t msgs)
{
	uint64_t n = msgs - s->mark;
	uint16_t *avg = s->slept ? &s->per_sleep : &s->per_catch;

	if (s->marked) {
		if (n > BATCH_MAX)
			n = BATCH_MAX;
		*avg = (uint16_t)(*avg + ((int32_t)n * BATCH_ONE - *avg) / 8);
	}
	s->mark = msgs;
	s->marked = true;
	s->slept = true;        /* until a catch says otherwise */
}

/*
 * A wait begun while the peer still wakes from a sleep we woke it from
 * lasts at least that wake-up, tens of µs across CPUs on a VM: more than
 * a sleep costs.  Yet in a stream, where each side answers the other at
 * once, a side that sleeps through it makes the peer sleep through its
 * own in turn, and so on: after one hiccup the two wake each other on
 * every wait for ever, at a tenth of the pace.  Spinning it out ends such
 * a chain, and pays while the waits after it find the peer awake; where
 * the next wait finds it waking again (a peer that sleeps between
 * requests whatever we do) it only adds the wake-up to the sleep's cost.
 * So a waking peer is spun out while the recent spin-outs were followed
 * by WAKING_RUN waits without one, and else once in WAKING_PROBE waits
 * that find one, which is how a chain that began anyway ends.
 */
RPAL_HOT bool spin_waking(struct rpal_spin *s, bool waking, uint64_t budget)
{
	if (s->since_spun_out < WAKING_RUN && (waking || ++s->since_spun_out == WAKING_RUN)) {
		/* One that ended a chain is reason enough to go on. */
		s->waking_pays = waking ? s->waking_pays - s->waking_pays / 4 : UINT16_MAX;
		s->since_spun_out = WAKING_RUN;
	}
	if (!waking || !budget || (s->waking_pays < UINT16_MAX / 2 && --s->waking_left))
		return false;
	s->waking_left = WAKING_PROBE;
	s->since_spun_out = 0;
	return true;
}

void spin_recount(struct rpal_spin *s)
{
	s->marked = false;
}

RPAL_HOT uint64_t spin_budget(struct rpal_spin *s, uint64_t msgs)
{
	uint64_t cap, b;

	if (s->policy == RPAL_WAIT_POLICY_SLEEP)
		return 0;
	if (s->policy == RPAL_WAIT_POLICY_SPIN)
		return s->max_ns;
	count_batch(s, msgs);
	s->last_end_ns = s->end_ns;
	s->end_ns = 0;
	cap = spin_cap(s);
	s->probing = --s->probe_left == 0;
	if (s->probing) {
		s->probe_left = s->probe_gap;
		b = cap;
	} else {
		b = s->budget_ns < cap ? s->budget_ns : cap;
	}
	s->this_ns = (uint32_t)b;
	return b;
}

/* The budget that costs least on the recent waits (see above): a bucket's
 * end, or the cap within its bucket (its waits taken as spread evenly). */
static RPAL_HOT void choose(struct rpal_spin *s)
{
	double c = (double)batch_cost(s), surv = 1, spent = 0, best = c;
	uint64_t cap = spin_cap(s);
	double pick_surv = 1;
	uint32_t pick = 0;

	if (s->caught_share >= CATCH_KEEP_CAP) {
		s->budget_ns = UINT32_MAX;      /* the cap, whatever it is then */
		return;
	}
	for (unsigned i = 0; edge(i) < cap && s->reached[i]; i++) {
		uint64_t end = i + 1 < RPAL_SPIN_BUCKETS && edge(i + 1) < cap ? edge(i + 1) : cap;
		double part = i + 1 < RPAL_SPIN_BUCKETS ? (double)(end - edge(i)) / (edge(i + 1) - edge(i)) : 1;
		double left = surv * (1 - part * s->ended[i] / s->reached[i]);

		spent += (double)(end - edge(i)) * (surv + left) / 2;
		surv = left;
		if (spent + surv * c < best) {
			best = spent + surv * c;
			pick = (uint32_t)end;
			pick_surv = surv;
		}
	}
	if (pick && pick_surv <= 1 - CATCH_KEEP_CAP / 65536.0) {
		/* Nearly every wait ends within the spin that pays: a closed
		 * loop, where the few beyond it would each add a wake-up to a
		 * reply.  Back to the whole cap. */
		whole_cap(s);
		return;
	}
	s->budget_ns = pick;
}

/* A wait that lasted waited_ns, caught by its spin or not. */
static RPAL_HOT void learn(struct rpal_spin *s, uint64_t waited_ns, bool caught)
{
	unsigned i, last;

	if (caught) {
		last = bucket(waited_ns);
		s->ended[last]++;
		for (i = 0; i <= last; i++)
			s->reached[i]++;
	} else {
		/* It outlasted its spin: it went through every bucket the
		 * spin covered whole. */
		for (i = 0; i + 1 < RPAL_SPIN_BUCKETS && edge(i + 1) <= s->this_ns; i++)
			s->reached[i]++;
	}
	if (s->reached[0] >= 2 * SPIN_MEMORY) {
		for (i = 0; i < RPAL_SPIN_BUCKETS; i++) {
			s->reached[i] /= 2;
			s->ended[i] /= 2;
		}
	}
	if (s->probing) {
		/* Did it find what the chosen budget would have missed? */
		if (caught && waited_ns > s->budget_ns)
			s->probe_gap = !s->budget_ns ? 1 : s->probe_gap > 16 ? s->probe_gap / 2 : 8;
		else if (s->probe_gap < PROBE_GAP_MAX)
			s->probe_gap *= 2;
		if (s->probe_left > s->probe_gap)
			s->probe_left = s->probe_gap;
	}
	if (s->probing || ++s->since_choice >= 8) {
		s->since_choice = 0;
		choose(s);
	}
}

/*
 * Count a wait in the share of those a whole cap caught: slowly while
 * every wait spins it, so that a closed loop's rare long wait does not cut
 * its spin, quickly on the probes of a shorter one.  Then say whether the
 * wait can go unlearnt: while the whole cap pays, one wait in 16 is timed
 * and learnt from, so that a round trip of a µs pays no clock read.
 */
static RPAL_HOT bool counted_only(struct rpal_spin *s, bool caught)
{
	bool whole = s->budget_ns == UINT32_MAX;

	if (s->this_ns >= spin_cap(s)) {
		int32_t share = s->caught_share;

		share += ((caught ? UINT16_MAX : 0) - share) / (whole ? 256 : 16);
		s->caught_share = (uint16_t)share;
	}
	return whole && !s->probing && s->caught_share >= CATCH_KEEP_CAP && (++s->untimed & 15);
}

RPAL_HOT void spin_caught(struct rpal_spin *s, uint64_t t0, enum wait_pace pace)
{
	s->slept = false;
	if (s->policy == RPAL_WAIT_POLICY_ADAPTIVE && !counted_only(s, true)) {
		uint64_t now = now_ns();

		note_gap(s, now - t0, since_last(s, t0, now), pace);
		learn(s, now - t0, true);
		s->end_ns = now;
	}
}

RPAL_HOT void spin_caught_at_once(struct rpal_spin *s)
{
	s->slept = false;
	if (s->policy == RPAL_WAIT_POLICY_ADAPTIVE && !counted_only(s, true))
		learn(s, 0, true);
}

RPAL_HOT void spin_update(struct rpal_spin *s, uint64_t waited_ns)
{
	bool caught = waited_ns <= s->this_ns;

	s->slept = !caught;
	if (s->policy == RPAL_WAIT_POLICY_ADAPTIVE && !counted_only(s, caught))
		learn(s, waited_ns, caught);
}
