/* SPDX-License-Identifier: MIT */
/*
 * Description: the wait policies (rpal_config.wait_policy, RPAL_WAIT).
 * RPAL_WAIT names a policy or makes rpal_init() fail; an out-of-range
 * wait_policy is refused.  SLEEP never spins and SPIN always spins
 * spin_us.  ADAPTIVE spins at most what a sleep costs (and never more than
 * spin_us), stops spinning after a run of long waits but for probes that
 * grow rarer (at most one wait in 256 once idle), spins again after a few
 * waits that a spin caught, and on waits of known lengths costs about what
 * the better of never spinning and spinning a sleep's cost would: short
 * where waits end quickly or not at all.  A waking peer is spun out while
 * that ends chains of wake-ups, and rarely where it does not.  Gaps
 * shorter than a wake-up, left by a peer that waits for us, are spun
 * through, and so are the waits of two that wake each other in turn
 * from CPUs they may not share (the peer's CPU hint against our
 * affinity); others are not.
 */
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "internal.h"
#include "helpers.h"

/* Messages handled, one per wait unless a check says otherwise. */
static uint64_t msgs;

static void check_env(void)
{
	static const struct { const char *v; unsigned policy; } ok[] = {
		{ "adaptive", RPAL_WAIT_POLICY_ADAPTIVE },
		{ "spin", RPAL_WAIT_POLICY_SPIN },
		{ "sleep", RPAL_WAIT_POLICY_SLEEP },
	};
	struct rpal_config cfg;

	unsetenv("RPAL_WAIT");
	rpal_config_default(&cfg);
	t_check(cfg.wait_policy == RPAL_WAIT_POLICY_ADAPTIVE, "default policy %u", cfg.wait_policy);
	for (unsigned i = 0; i < 3; i++) {
		setenv("RPAL_WAIT", ok[i].v, 1);
		rpal_config_default(&cfg);
		t_check(cfg.wait_policy == ok[i].policy, "RPAL_WAIT=%s gave %u", ok[i].v, cfg.wait_policy);
	}
	setenv("RPAL_WAIT", "fast", 1);
	rpal_config_default(&cfg);
	t_check(rpal_init(&cfg) == -EINVAL, "RPAL_WAIT=fast accepted");
	t_check(strstr(rpal_strerror(EINVAL), "RPAL_WAIT"), "error does not name RPAL_WAIT: %s", rpal_strerror(EINVAL));
	unsetenv("RPAL_WAIT");
	rpal_config_default(&cfg);
	cfg.wait_policy = 3;
	t_check(rpal_init(&cfg) == -EINVAL, "wait_policy 3 accepted");
	printf("RPAL_WAIT adaptive/spin/sleep parsed, a bad name and policy 3 refused\n");
}

static void check_fixed(void)
{
	struct rpal_spin s;

	spin_init(&s, 50, RPAL_WAIT_POLICY_SLEEP);
	for (int i = 0; i < 100; i++) {
		t_check(spin_budget(&s, ++msgs) == 0, "sleep policy spins");
		spin_caught(&s, now_ns() - 100, PACE_PEER);
	}
	spin_init(&s, 50, RPAL_WAIT_POLICY_SPIN);
	for (int i = 0; i < 100; i++) {
		t_check(spin_budget(&s, ++msgs) == 50000, "spin policy budget %llu", (unsigned long long)spin_budget(&s, ++msgs));
		spin_update(&s, 10000000);
	}
	printf("sleep never spins; spin always spins spin_us, whatever the waits\n");
}

static void check_adaptive(void)
{
	struct rpal_spin s;
	uint64_t cost;
	int probes = 0, n = 100000;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	cost = spin_budget(&s, ++msgs);
	t_check(cost > 0 && cost <= 50000, "a new connection's budget %llu", (unsigned long long)cost);
	/* A ceiling below the cost of a sleep caps the spin. */
	spin_init(&s, 1, RPAL_WAIT_POLICY_ADAPTIVE);
	t_check(spin_budget(&s, ++msgs) <= 1000, "budget over spin_us");

	/* Idle: every wait lasts 10 ms.  A new connection spins for a few
	 * dozen waits before it gives up on the cap. */
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	int start = 0;
	for (int i = 0; i < 64; i++) {
		if (spin_budget(&s, ++msgs))
			start++;
		spin_update(&s, 10000000);
	}
	t_check(start <= 40, "a new idle connection spun %d of its first 64 waits", start);
	for (int i = 0; i < n; i++) {
		if (spin_budget(&s, ++msgs))
			probes++;
		spin_update(&s, 10000000);
	}
	t_check(probes <= n / 256 + 16, "%d spins in %d long waits", probes, n);
	t_check(probes >= n / 256 - 1, "only %d probes in %d long waits: would never notice a busy peer", probes, n);

	/* Busy again: a probe catches the message, and within a few waits
	 * every wait spins. */
	int waits = 0, spinning = 0;
	while (spinning < 16 && waits < 2000) {
		uint64_t b = spin_budget(&s, ++msgs);
		waits++;
		if (b) {
			spin_caught(&s, now_ns() - 1000, PACE_PEER);
			spinning++;
		} else {
			spinning = 0;
			spin_update(&s, 60000);  /* asleep: the wake-up's latency */
		}
	}
	t_check(spinning == 16, "still not spinning after %d quick waits", waits);
	printf("adaptive: spins <= %llu ns; %d probes in %d idle waits; spinning again after %d busy waits\n",
	       (unsigned long long)cost, probes, n, waits - 16);
}

/*
 * What a run of waits costs under a policy: the spin (up to the wait's
 * length) plus the sleep's cost where the spin did not catch it.  The
 * lengths come from next(i); a sleep is reported 60 µs longer, its wake-up.
 */
static double run_cost(struct rpal_spin *s, uint64_t (*next)(int), int n, uint64_t cost)
{
	double sum = 0;

	for (int i = 0; i < n; i++) {
		uint64_t w = next(i), b = spin_budget(s, ++msgs);

		if (w <= b) {
			sum += (double)w;
			/* As a spin that caught it: timed now and then. */
			spin_update(s, w);
		} else {
			sum += (double)(b + cost);
			spin_update(s, w + 60000);
		}
	}
	return sum / n;
}

/* Half end after 1 µs, half last 10 ms: a server's queue at moderate load. */
static uint64_t bimodal(int i) { return (i * 7919u) % 2 ? 1000 : 10000000; }
/* All end after 3 µs, within a sleep's cost. */
static uint64_t quick(int i) { (void)i; return 3000; }
/* Most end within 1 µs, a few after 4 µs: a closed loop of calls. */
static uint64_t tail(int i) { return i % 50 ? 900 : 4000; }
/* All end after 40 µs, beyond a sleep's cost. */
static uint64_t slow(int i) { (void)i; return 40000; }

static void check_costs(void)
{
	static const struct { const char *what; uint64_t (*next)(int); } runs[] = {
		{ "bimodal 1 us / 10 ms", bimodal }, { "all 3 us", quick },
		{ "0.9 us, 2% 4 us", tail }, { "all 40 us", slow },
	};
	struct rpal_spin s;
	uint64_t cost;
	const int n = 20000;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	cost = spin_budget(&s, ++msgs);         /* a new connection spins a sleep's cost */
	for (unsigned r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		double adaptive, sleep, full;

		spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
		adaptive = run_cost(&s, runs[r].next, n, cost);
		spin_init(&s, 0, RPAL_WAIT_POLICY_SLEEP);
		sleep = run_cost(&s, runs[r].next, n, cost);
		/* Spinning up to a sleep's cost every time. */
		spin_init(&s, 0, RPAL_WAIT_POLICY_SPIN);
		s.max_ns = (uint32_t)cost;
		full = run_cost(&s, runs[r].next, n, cost);
		printf("  %-20s adaptive %5.0f ns a wait; never spinning %5.0f; always spinning %llu ns %5.0f\n",
		       runs[r].what, adaptive, sleep, (unsigned long long)cost, full);
		t_check(adaptive <= 1.1 * (sleep < full ? sleep : full), "%s: adaptive costs %.0f ns a wait",
			runs[r].what, adaptive);
	}
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	run_cost(&s, bimodal, n, cost);
	t_check(s.budget_ns >= 1000 && s.budget_ns < cost, "bimodal waits: budget %u ns, want 1 us..%llu",
		s.budget_ns, (unsigned long long)cost);
	printf("adaptive: on bimodal waits it spins %u ns, not the %llu a sleep costs\n", s.budget_ns,
	       (unsigned long long)cost);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	run_cost(&s, tail, n, cost);
	t_check(s.budget_ns >= 4000, "a closed loop's waits: budget %u ns leaves its tail asleep", s.budget_ns);
	/* From a closed loop to a queue that often runs dry, and back. */
	run_cost(&s, bimodal, 2000, cost);
	t_check(s.budget_ns < cost, "bimodal after a closed loop: still spinning %u ns", s.budget_ns);
	run_cost(&s, tail, 2000, cost);
	t_check(s.budget_ns >= cost, "a closed loop after bimodal waits: budget %u ns", s.budget_ns);
	printf("adaptive: a closed loop spins the whole %llu ns, and turns to and from the short spin within 2000 waits\n",
	       (unsigned long long)cost);
}

/*
 * Overlapping requests: a waiter that sleeps finds `batch` messages queued
 * when it wakes, while a spin catches them one wait each.  Waits of
 * short_ns, one in five 40 us, n of them; returns the mean spin budget
 * over the last half.
 */
static uint64_t batched_budget(struct rpal_spin *s, unsigned batch, uint64_t short_ns, int n)
{
	uint64_t spun = 0;

	for (int i = 0; i < n; i++) {
		uint64_t w = i % 5 ? short_ns : 40000, b = spin_budget(s, msgs);

		if (w <= b) {
			spin_update(s, w);
			msgs += 1;
		} else {
			spin_update(s, w + 60000);
			msgs += batch;
		}
		if (i >= n / 2)
			spun += b;
	}
	return spun / (n / 2);
}

/*
 * A sleep's cost (4.5 us here) counts per message it brings, down to half:
 * 3 us waits are worth spinning for when a sleep brings one message, not
 * when it brings three (1.5 us a message); 2 us waits still are when it
 * brings ten (half the cost, not a tenth); and once sleeps bring one
 * message again the whole cost is spun again, 4 us waits included.
 */
static void check_batching(void)
{
	struct rpal_spin s;
	uint64_t one, three, ten, again;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	one = batched_budget(&s, 1, 3000, 4000);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	three = batched_budget(&s, 3, 3000, 4000);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	ten = batched_budget(&s, 10, 2000, 4000);
	again = batched_budget(&s, 1, 4000, 4000);
	printf("adaptive: waits of 3 us (one in five 40 us), a sleep bringing 1 message: spins %llu ns a wait; "
	       "bringing 3: %llu ns; 2 us waits, bringing 10: %llu ns; then 4 us waits, bringing 1: %llu ns\n",
	       (unsigned long long)one, (unsigned long long)three, (unsigned long long)ten,
	       (unsigned long long)again);
	t_check(one >= 3000, "one message a sleep: spins %llu ns, misses 3 us waits", (unsigned long long)one);
	t_check(three < 1000, "three messages a sleep: still spins %llu ns a wait", (unsigned long long)three);
	t_check(ten >= 2000, "ten messages a sleep: spins %llu ns, misses 2 us waits", (unsigned long long)ten);
	t_check(again >= 4000, "one message a sleep again: spins %llu ns, misses 4 us waits",
		(unsigned long long)again);
}

/*
 * A peer on the waiter's CPU: the waiter yields to it, and most waits end
 * with the first yield, learnt with no clock read (spin_caught_at_once).
 * Those count as catches, so a closed loop keeps yielding the whole cap;
 * mixed with long waits they still let the budget shrink.
 */
static void check_yield(void)
{
	struct rpal_spin s;
	uint64_t cost;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	cost = spin_budget(&s, ++msgs);
	for (int i = 0; i < 20000; i++) {
		t_check(spin_budget(&s, ++msgs) >= cost || (i % 256), "closed loop on one CPU: budget %u ns at wait %d",
			s.this_ns, i);
		if (i % 50)
			spin_caught_at_once(&s);
		else
			spin_caught(&s, now_ns() - 4000, PACE_PEER);
	}
	t_check(s.budget_ns >= cost, "closed loop on one CPU: budget %u ns, want the whole %llu", s.budget_ns,
		(unsigned long long)cost);
	for (int i = 0; i < 20000; i++) {
		bool yielded = spin_budget(&s, ++msgs);

		if (!((i * 7919u) % 2))
			spin_update(&s, 10000000);
		else if (yielded)
			spin_caught_at_once(&s);
		else
			spin_update(&s, 60000);  /* asleep: the wake-up's latency */
	}
	uint32_t mixed = s.budget_ns;
	t_check(mixed < cost, "half the waits 10 ms, half first yields: still yielding %u ns", mixed);
	/* Idle, then busy: probes that a first yield ends bring the yield back. */
	for (int i = 0; i < 5000; i++) {
		spin_budget(&s, ++msgs);
		spin_update(&s, 10000000);
	}
	int waits = 0, yielding = 0;
	while (yielding < 16 && waits < 2000) {
		waits++;
		if (spin_budget(&s, ++msgs)) {
			spin_caught_at_once(&s);
			yielding++;
		} else {
			yielding = 0;
			spin_update(&s, 60000);
		}
	}
	t_check(yielding == 16, "idle, then busy on one CPU: still not yielding after %d waits", waits);
	spin_init(&s, 50, RPAL_WAIT_POLICY_SLEEP);
	spin_caught_at_once(&s);
	t_check(spin_budget(&s, ++msgs) == 0, "sleep policy yields after a catch");
	printf("adaptive: waits a first yield ends keep the whole %llu ns; with 10 ms waits half the time, %u ns\n",
	       (unsigned long long)cost, mixed);
}

/*
 * Spin-outs of a waking peer (spin_waking): kept while each ends a chain of
 * mutual wake-ups (the waits after it find the peer awake), dropped after
 * a few that do not (the next wait finds it waking again), then tried once
 * in 256 waits that find one, and kept again after one that pays.
 */
static void check_waking(void)
{
	struct rpal_spin s;
	int spun = 0, tried;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	t_check(!spin_waking(&s, false, 1000), "spun out a peer that is not waking");
	t_check(!spin_waking(&s, true, 0), "spun out a waking peer on a budget of 0");
	/* A stream: a hiccup now and then, every wait after it finds the peer awake. */
	for (int i = 0; i < 1000; i++) {
		bool waking = i % 50 == 0;
		bool out = spin_waking(&s, waking, 1000);

		t_check(!out || waking, "spun out a peer that is not waking");
		spun += out;
	}
	t_check(spun == 20, "a stream: %d spin-outs of 20 waking peers", spun);
	/* A peer that sleeps between requests: every wait finds it waking. */
	for (tried = 0; tried < 20 && spin_waking(&s, true, 1000); tried++)
		;
	t_check(tried <= 4, "a peer waking on every wait still spun out after %d tries", tried);
	spun = 0;
	for (int i = 0; i < 2560; i++)
		spun += spin_waking(&s, true, 1000);
	t_check(spun == 10, "a peer waking on every wait: %d spin-outs in 2560 waits, want one in 256", spun);
	/* A stream again: the next try that pays restores them. */
	int waits = 0;
	while (!spin_waking(&s, true, 1000) && waits < 300)
		waits++;
	for (int i = 0; i < 8; i++)
		spin_waking(&s, false, 1000);
	t_check(spin_waking(&s, true, 1000), "a spin-out that ended a chain was not tried again");
	printf("adaptive: a waking peer spun out 20 of 20 times in a stream, %d tries where it sleeps between "
	       "requests, then one in 256\n", tried);
}

/*
 * A set that also holds an ordinary descriptor sleeps in epoll_wait(); that
 * sleep is timed for the adaptive wait's costs as a futex sleep is (the
 * first sleep is one of the samples).
 */
static void check_epoll_sample(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out;
	int pp[2], ep;

	t_ok(rpal_init(NULL));
	t_check(pipe(pp) == 0, "pipe");
	ep = rpal_epoll_create(0);
	t_check(ep >= 0, "rpal_epoll_create: %s", strerror(errno));
	ev.data.fd = pp[0];
	t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev) == 0, "add a pipe: %s", strerror(errno));
	t_check(load_relaxed(&rpal_g.stat->sleep_cost_ns) == 0, "a sleep cost before any sleep");
	t_check(rpal_epoll_wait(ep, &out, 1, 20) == 0, "a set with an idle pipe reported something");
	uint32_t ns = load_relaxed(&rpal_g.stat->sleep_cost_ns);
	t_check(ns > 0, "a set that slept in epoll_wait() sampled no sleep cost");
	printf("adaptive: a set with an ordinary descriptor samples its sleeps too (%.1f us)\n", ns / 1e3);
	rpal_close(ep);
	close(pp[0]);
	close(pp[1]);
	rpal_fini();
}

/*
 * Waits of gap_ns each, whose sleeps wake lat_ns after the peer's ring
 * (the wake page's ring time says so), each measuring what pace says and
 * beginning think_ns after the one before ended, the peer on a CPU the
 * waiter may not run on (apart) or not; a sleep finds batch messages
 * queued.  Each wait is laid out to end now (the clock the policy
 * reads), its predecessor's end set to match.  Of the last half of the n
 * waits: how many spun through the gap (the return), and how many spun at
 * all (*spun).
 */
static int lat_paced(struct rpal_spin *s, uint64_t gap_ns, uint64_t lat_ns, uint64_t think_ns, enum wait_pace pace,
		     bool apart, unsigned batch, int n, int *spun)
{
	int through = 0;

	*spun = 0;
	for (int i = 0; i < n; i++) {
		uint64_t b = spin_budget(s, msgs), now = now_ns();

		if (gap_ns <= b) {
			s->last_end_ns = now - gap_ns - think_ns;
			spin_caught(s, now - gap_ns, pace);
			msgs += 1;
		} else {
			uint64_t rung = now - lat_ns, t0 = rung - gap_ns;

			s->last_end_ns = t0 - think_ns;
			spin_note_wake_lat(s, t0, rung, now, pace, apart);
			spin_update(s, now - t0);
			msgs += batch;
		}
		t_check(b <= s->max_ns, "budget %llu ns over spin_us", (unsigned long long)b);
		if (i >= n / 2) {
			through += gap_ns <= b;
			*spun += b > 0;
		}
	}
	return through;
}

static int lat_batched(struct rpal_spin *s, uint64_t gap_ns, uint64_t lat_ns, enum wait_pace pace, unsigned batch,
		       int n, int *spun)
{
	return lat_paced(s, gap_ns, lat_ns, 0, pace, true, batch, n, spun);
}

static int lat_run(struct rpal_spin *s, uint64_t gap_ns, uint64_t lat_ns, enum wait_pace pace, int n, int *spun)
{
	return lat_batched(s, gap_ns, lat_ns, pace, 1, n, spun);
}

/*
 * A sleep delays its message by the wake-up's latency.  Where the gaps the
 * peer leaves are shorter than that, the waiter spins through them (a
 * sleeper would fall behind a peer that waits for it), and so it does
 * where the two wake each other in turn from CPUs they may not share:
 * each wait begins with the peer waking and ends with its answer, less
 * than a wake-up and a quarter after our own; a connection that had gone
 * idle does so within a few dozen waits.  Where the gaps are longer, the
 * gaps only measure our yields, the waits begin with the peer waking from
 * a sleep and we paused since our last message (a pair that sleeps
 * between requests), or a sleep finds several messages (the peer does not
 * wait for us), a sleep is priced by its CPU alone, as before: at most a
 * probe now and then spins.
 */
static void check_latency(void)
{
	struct rpal_spin s;
	const int n = 4000, half = n / 2;
	int fast, after, waking, chain, paused, near, slow, ours, batched, capped, spun;

	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	fast = lat_run(&s, 20000, 30000, PACE_PEER, n, &spun);
	t_check(fast >= half * 9 / 10, "20 us gaps, 30 us wake-ups: spun through %d of %d", fast, half);
	lat_run(&s, 60000, 30000, PACE_PEER, n, &after);
	t_check(after <= half / 20, "60 us gaps after 20 us ones: spun in %d of %d", after, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_run(&s, 20000, 30000, PACE_PEER, n, &spun);
	lat_paced(&s, 20000, 30000, 1000000, PACE_WAKING, true, 1, n, &waking);
	t_check(waking <= half / 20, "20 us waits for a waking peer, 1 ms after our last, after 20 us gaps: "
		"spun in %d of %d", waking, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	chain = lat_paced(&s, 20000, 30000, 5000, PACE_WAKING, true, 1, n, &spun);
	t_check(chain >= half * 9 / 10, "20 us waits for a waking peer, 5 us after our last (mutual wake-ups): "
		"spun through %d of %d", chain, half);
	/* Idle first (probes one wait in 256), then mutual wake-ups. */
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	for (int i = 0; i < 5000; i++) {
		spin_budget(&s, ++msgs);
		spin_update(&s, 10000000);
	}
	int joined = 0;
	while (joined < 1000 && !lat_paced(&s, 20000, 30000, 5000, PACE_WAKING, true, 1, 1, &spun))
		joined++;
	t_check(joined <= 32, "mutual wake-ups after an idle spell: first spun through after %d waits", joined);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_paced(&s, 20000, 30000, 20000, PACE_WAKING, true, 1, n, &paused);
	t_check(paused <= half / 20, "20 us waits for a waking peer, 20 us after our last: spun in %d of %d",
		paused, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_paced(&s, 20000, 30000, 5000, PACE_WAKING, false, 1, n, &near);
	t_check(near <= half / 20, "mutual wake-ups with a peer on a CPU we may run on: spun in %d of %d",
		near, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_run(&s, 60000, 30000, PACE_PEER, n, &slow);
	t_check(slow <= half / 20, "60 us gaps, 30 us wake-ups: spun in %d of %d", slow, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_run(&s, 20000, 30000, PACE_OURS, n, &ours);
	t_check(ours <= half / 20, "20 us waits that only measured our yields: spun in %d of %d", ours, half);
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	lat_batched(&s, 20000, 30000, PACE_PEER, 3, n, &batched);
	t_check(batched <= half / 20, "20 us gaps, sleeps finding 3 messages: spun in %d of %d", batched, half);
	spin_init(&s, 10, RPAL_WAIT_POLICY_ADAPTIVE);
	capped = lat_run(&s, 8000, 30000, PACE_PEER, n, &spun);
	t_check(capped >= half * 9 / 10, "8 us gaps under spin_us 10: spun through %d of %d", capped, half);
	printf("adaptive, wake-ups of 30 us: 20 us gaps spun through in %d of %d waits; then spun in %d of 60 us gaps, "
	       "in %d of 20 us waits for a waking peer 1 ms after our last; mutual wake-ups 5 us apart spun through "
	       "%d (after an idle spell, from the %dth wait), 20 us apart spun in %d, from a CPU we may share in %d; "
	       "60 us gaps alone %d; 20 us yields %d; 20 us gaps with sleeps of 3 messages %d; 8 us gaps under "
	       "spin_us 10 spun through %d\n",
	       fast, half, after, waking, chain, joined + 1, paused, near, slow, ours, batched, capped);
}

/*
 * Whether a peer runs where we may not (cpu_apart): from its CPU hint and
 * our affinity, read again within 256 asks of a change.  A hint that is
 * not yet known says no; one no CPU could have (a peer's nonsense) says
 * yes, which at most lets mutual wake-ups be spun through.
 */
static void check_apart(void)
{
	uint32_t me = this_cpu();
	cpu_set_t all, one;
	int other = -1, asks = 0;

	t_check(sched_getaffinity(0, sizeof(all), &all) == 0, "sched_getaffinity: %s", strerror(errno));
	t_check(cpu_allowed(me) && !cpu_apart(me), "our own CPU %u taken as apart", me);
	t_check(!cpu_apart(UINT32_MAX), "an unknown CPU hint taken as apart");
	t_check(cpu_apart(CPU_SETSIZE) && cpu_apart(UINT32_MAX - 1), "an impossible CPU hint not taken as apart");
	for (int i = 0; i < CPU_SETSIZE && other < 0; i++)
		if (CPU_ISSET(i, &all) && (uint32_t)i != me)
			other = i;
	if (other < 0) {
		printf("cpu_apart: own CPU no, unknown no, impossible yes; one allowed CPU, no narrowing to check\n");
		return;
	}
	t_check(!cpu_apart((uint32_t)other), "allowed CPU %d taken as apart", other);
	CPU_ZERO(&one);
	CPU_SET(me, &one);
	t_check(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity: %s", strerror(errno));
	while (asks < 256 && !cpu_apart((uint32_t)other))
		asks++;
	t_check(sched_setaffinity(0, sizeof(all), &all) == 0, "sched_setaffinity back: %s", strerror(errno));
	t_check(asks < 256, "pinned to CPU %u, CPU %d still not apart after 256 asks", me, other);
	printf("cpu_apart: own CPU no, unknown no, impossible yes; CPU %d apart %d asks after pinning to %u\n",
	       other, asks, me);
}

int main(void)
{
	check_env();
	check_fixed();
	check_adaptive();
	check_costs();
	check_batching();
	check_yield();
	check_waking();
	check_latency();
	check_epoll_sample();
	check_apart();
	printf("PASS\n");
	return T_EXIT_PASS;
}
