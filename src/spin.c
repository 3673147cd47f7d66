/* SPDX-License-Identifier: MIT */
/*
 * spin.c - how long a waiter spins before it sleeps (rpal_config.wait_policy).
 *
 * Adaptive waiting is the ski-rental rule: spin for as long as a sleep
 * would cost, then sleep.  A sleep costs the sleeper's futex wait and
 * reschedule and the waker's FUTEX_WAKE, CPU time this process measures on
 * a sample of its sleeps and wake-ups (a few µs on a VM).  If the event
 * comes within that time, spinning was cheaper than sleeping in CPU and far
 * faster in latency; if not, the spin at most doubled the cost of the
 * sleep.  Where recent waits (the last eight) mostly outlasted that cost, a
 * waiter does not spin at all, so an idle or slow connection burns nothing
 * but a probe: one spin every probe_gap waits, the gap doubling with each
 * miss up to 256, to notice when messages start coming quickly again.  A
 * sleep's own length cannot show that: it includes the wake-up latency,
 * tens of µs across cores on small VMs.
 */
#include <time.h>

#include "internal.h"

#define PROBE_GAP_MAX 256

/* Until measured: a futex sleep and its wake-up on a VM. */
#define SLEEP_COST_DEFAULT_NS 3000
#define WAKE_COST_DEFAULT_NS  1500

static _Atomic uint32_t sleep_cost_ns = SLEEP_COST_DEFAULT_NS;
static _Atomic uint32_t wake_cost_ns = WAKE_COST_DEFAULT_NS;

/* A moving average (weight 1/8) that threads may update at once: a lost
 * update only delays it. */
static void average_in(_Atomic uint32_t *avg, uint64_t x)
{
	int64_t a = load_relaxed(avg);

	if (x > 1000000)
		x = 1000000;    /* a preempted sample says nothing of the cost */
	store_relaxed(avg, (uint32_t)(a + ((int64_t)x - a) / 8));
}

void spin_note_sleep_cpu(uint64_t ns) { average_in(&sleep_cost_ns, ns); }
void spin_note_wake(uint64_t ns) { average_in(&wake_cost_ns, ns); }

uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What one sleep and its wake-up cost, capped at the ceiling. */
static uint64_t sleep_cost(const struct rpal_spin *s)
{
	uint64_t c = (uint64_t)load_relaxed(&sleep_cost_ns) + load_relaxed(&wake_cost_ns);

	return c < s->max_ns ? c : s->max_ns;
}

void spin_init(struct rpal_spin *s, unsigned max_us, unsigned policy)
{
	uint64_t ns = (uint64_t)max_us * 1000;

	s->max_ns = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
	s->policy = (uint8_t)policy;
	s->hist = 0xff;         /* spin at first: a new connection is usually busy */
	s->probe_gap = s->probe_left = 1;
}

uint64_t spin_budget(struct rpal_spin *s)
{
	if (s->policy == RPAL_WAIT_POLICY_SLEEP)
		return 0;
	if (s->policy == RPAL_WAIT_POLICY_SPIN)
		return s->max_ns;
	if (__builtin_popcount(s->hist) >= 4)
		return sleep_cost(s);
	if (--s->probe_left == 0) {
		s->probe_left = s->probe_gap;
		return sleep_cost(s);
	}
	return 0;
}

static void note(struct rpal_spin *s, bool hit)
{
	s->hist = (uint8_t)(s->hist << 1 | hit);
	if (hit) {
		s->probe_gap = s->probe_left = 1;
	} else if (s->probe_gap < PROBE_GAP_MAX) {
		s->probe_gap *= 2;
		if (s->probe_left > s->probe_gap)
			s->probe_left = s->probe_gap;
	}
}

void spin_caught(struct rpal_spin *s)
{
	if (s->policy == RPAL_WAIT_POLICY_ADAPTIVE)
		note(s, true);
}

void spin_update(struct rpal_spin *s, uint64_t waited_ns)
{
	if (s->policy == RPAL_WAIT_POLICY_ADAPTIVE)
		note(s, waited_ns <= sleep_cost(s));
}
