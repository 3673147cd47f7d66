/* SPDX-License-Identifier: MIT */
/*
 * Description: the wait policies (rpal_config.wait_policy, RPAL_WAIT).
 * RPAL_WAIT names a policy or makes rpal_init() fail; an out-of-range
 * wait_policy is refused.  SLEEP never spins and SPIN always spins
 * spin_us.  ADAPTIVE spins at most what a sleep costs (and never more than
 * spin_us) while recent waits ended within that, stops spinning after a
 * run of long waits but for probes that grow rarer (at most one wait in
 * 256 once idle), and spins again after a few waits that a spin caught.
 */
#include <stdlib.h>

#include "internal.h"
#include "helpers.h"

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
		t_check(spin_budget(&s) == 0, "sleep policy spins");
		spin_caught(&s);
	}
	spin_init(&s, 50, RPAL_WAIT_POLICY_SPIN);
	for (int i = 0; i < 100; i++) {
		t_check(spin_budget(&s) == 50000, "spin policy budget %llu", (unsigned long long)spin_budget(&s));
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
	cost = spin_budget(&s);
	t_check(cost > 0 && cost <= 50000, "a new connection's budget %llu", (unsigned long long)cost);
	/* A ceiling below the cost of a sleep caps the spin. */
	spin_init(&s, 1, RPAL_WAIT_POLICY_ADAPTIVE);
	t_check(spin_budget(&s) <= 1000, "budget over spin_us");

	/* Idle: every wait lasts 10 ms. */
	spin_init(&s, 50, RPAL_WAIT_POLICY_ADAPTIVE);
	for (int i = 0; i < 8; i++) {
		spin_budget(&s);
		spin_update(&s, 10000000);
	}
	for (int i = 0; i < n; i++) {
		if (spin_budget(&s))
			probes++;
		spin_update(&s, 10000000);
	}
	t_check(probes <= n / 256 + 16, "%d spins in %d long waits", probes, n);
	t_check(probes >= n / 256 - 1, "only %d probes in %d long waits: would never notice a busy peer", probes, n);

	/* Busy again: a probe catches the message, and within a few waits
	 * every wait spins. */
	int waits = 0, spinning = 0;
	while (spinning < 16 && waits < 2000) {
		uint64_t b = spin_budget(&s);
		waits++;
		if (b) {
			spin_caught(&s);
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

int main(void)
{
	check_env();
	check_fixed();
	check_adaptive();
	printf("PASS\n");
	return T_EXIT_PASS;
}
