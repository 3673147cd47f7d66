/* SPDX-License-Identifier: MIT */
/* tsc.c - the bench reports counter cycles (the RFC's unit: the TSC; on
 * AArch64, CNTVCT_EL0 ticks) and converts to ns here. */
#include <time.h>
#include "tsc.h"

#if defined(__x86_64__)
#include <cpuid.h>

int tsc_invariant(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007)
		return 0;
	__cpuid(0x80000007, a, b, c, d);
	return !!(d & (1u << 8));
}

int tsc_hypervisor(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	return !!(c & (1u << 31));
}
#else
int tsc_invariant(void) { return 1; }
int tsc_hypervisor(void) { return 0; }
#endif

/*
 * The largest step up to TSC_STEP_MAX that 95 % of the differences are
 * multiples of.  Not their greatest common divisor: a VM's scaled clock
 * rounds now and then (a difference of 25 or 27 among 26s, or of 1), and its
 * phase can shift across an exit to the hypervisor.  Differences after a
 * step back (a migration) are left out.
 */
#define TSC_STEP_MAX 256

uint64_t tsc_step_of(const uint64_t *reads, unsigned n)
{
	for (uint64_t step = TSC_STEP_MAX; step > 1; step--) {
		unsigned all = 0, whole = 0;

		for (unsigned i = 1; i < n; i++) {
			if (reads[i] <= reads[i - 1])
				continue;
			all++;
			whole += (reads[i] - reads[i - 1]) % step == 0;
		}
		if (all && whole * 100ull >= all * 95ull)
			return step;
	}
	return 1;
}

/* Reads a varying number of spins apart, so that a counter that does move
 * every cycle shows differences of every size, not one repeated. */
uint64_t tsc_step(void)
{
	uint64_t reads[4096];

	for (unsigned i = 0; i < 4096; i++) {
		for (volatile unsigned spin = (i * 37) % 61; spin; spin--)
			;
		reads[i] = tsc_read();
	}
	return tsc_step_of(reads, 4096);
}

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One (tsc, ns) pair: the TSC midpoint of the tightest of 16 brackets. */
static void pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 16; i++) {
		uint64_t t0 = tsc_now();
		uint64_t n = mono_ns();
		uint64_t t1 = tsc_now();

		if (t1 - t0 < best) {
			best = t1 - t0;
			*tsc = t0 + (t1 - t0) / 2;
			*ns = n;
		}
	}
}

double tsc_calibrate(unsigned window_ms)
{
	uint64_t t0, n0, t1, n1;
	struct timespec req = { window_ms / 1000, (long)(window_ms % 1000) * 1000000L };

	pair(&t0, &n0);
	while (nanosleep(&req, &req))
		;
	pair(&t1, &n1);
	if (n1 <= n0 || t1 <= t0)
		return 0;
	return (double)(t1 - t0) * 1e9 / (double)(n1 - n0);
}
