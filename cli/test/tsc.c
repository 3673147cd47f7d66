/* SPDX-License-Identifier: MIT */
/*
 * Description: TSC calibration: two calibrations agree within 1 %, and a
 * 50 ms sleep measured with the calibrated TSC is within 10 % of what
 * CLOCK_MONOTONIC says; the step of a coarse TSC is found from the reads'
 * differences (made-up series with known steps, then this machine's, which
 * is reported).  Reports (does not fail on) a missing invariant TSC.  On
 * AArch64 the counter is CNTVCT_EL0, and its calibration must match the
 * rate CNTFRQ_EL0 states (where it states one).
 */
#include <stdio.h>
#include <time.h>
#include "tsc.h"

int main(void)
{
	double a, b, err;
	uint64_t t0, t1, n0, n1;
	struct timespec ts = { 0, 50 * 1000000L };
	int fails = 0;

	printf("tsc: invariant TSC (CPUID 0x80000007 EDX[8]): %s; hypervisor: %s\n",
	       tsc_invariant() ? "yes" : "no (the bench warns)", tsc_hypervisor() ? "yes" : "no");
	a = tsc_calibrate(100);
	b = tsc_calibrate(100);
	printf("tsc: two calibrations over 100 ms: %.0f Hz and %.0f Hz\n", a, b);
	if (a <= 0 || b <= 0) {
		printf("FAIL: calibration returned %f / %f\n", a, b);
		return 1;
	}
	err = a > b ? (a - b) / b : (b - a) / a;
	if (err > 0.01) {
		printf("FAIL: they differ by %.3f %% (limit 1 %%)\n", err * 100);
		fails++;
	}
#if defined(__aarch64__)
	{
		/* The generic timer states its own rate. */
		uint64_t frq;

		__asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(frq));
		printf("tsc: CNTFRQ_EL0 says %llu Hz\n", (unsigned long long)frq);
		if (!frq && (a < 1e6 || a > 1e10)) {
			/* Some emulators leave it 0. */
			printf("FAIL: %.0f Hz is not a plausible generic timer rate\n", a);
			fails++;
		} else if (frq && (a < frq * 0.99 || a > frq * 1.01)) {
			printf("FAIL: %.0f Hz is not CNTFRQ_EL0's %llu Hz\n", a, (unsigned long long)frq);
			fails++;
		}
	}
#else
	if (a < 1e8 || a > 1e11) {
		printf("FAIL: %.0f Hz is not a plausible TSC frequency\n", a);
		fails++;
	}
#endif

	t0 = tsc_now();
	n0 = mono_ns();
	nanosleep(&ts, NULL);
	t1 = tsc_now();
	n1 = mono_ns();
	{
		double tsc_ns = (double)(t1 - t0) * 1e9 / a, mono = (double)(n1 - n0);

		printf("tsc: 50 ms sleep: TSC says %.3f ms, CLOCK_MONOTONIC %.3f ms\n", tsc_ns / 1e6,
		       mono / 1e6);
		if (tsc_ns < mono * 0.9 || tsc_ns > mono * 1.1) {
			printf("FAIL: they differ by more than 10 %%\n");
			fails++;
		}
	}
	{
		/* A hypervisor's 26-cycle clock, read faster than it moves. */
		static const uint64_t coarse[] = { 1000, 1026, 1026, 1052, 1104, 1130, 1130, 1234 };
		static const uint64_t fine[] = { 1000, 1025, 1051, 1076, 1102 };
		static const uint64_t back[] = { 1000, 1026, 1013, 1065 }; /* a step back is left out */
		static const uint64_t still[] = { 5, 5, 5 };
		uint64_t shifted[40];       /* one odd difference in 39: the clock rounded */
		uint64_t here = tsc_step();

		shifted[0] = 5000;
		for (unsigned i = 1; i < 40; i++)
			shifted[i] = shifted[i - 1] + (i % 2 ? 26 : 52) + (i == 20);
		if (tsc_step_of(coarse, 8) != 26 || tsc_step_of(fine, 5) != 1 ||
		    tsc_step_of(back, 4) != 26 || tsc_step_of(still, 3) != 1 || tsc_step_of(shifted, 40) != 26) {
			printf("FAIL: tsc_step_of: %llu, %llu, %llu, %llu, %llu (want 26, 1, 26, 1, 26)\n",
			       (unsigned long long)tsc_step_of(coarse, 8), (unsigned long long)tsc_step_of(fine, 5),
			       (unsigned long long)tsc_step_of(back, 4), (unsigned long long)tsc_step_of(still, 3),
			       (unsigned long long)tsc_step_of(shifted, 40));
			fails++;
		}
		printf("tsc: this machine's TSC counts in steps of %llu cycle(s) (%.1f ns)\n",
		       (unsigned long long)here, (double)here * 1e9 / a);
		if (here < 1 || (double)here * 1e9 / a > 1000) {
			printf("FAIL: a step of %llu cycles is not plausible\n", (unsigned long long)here);
			fails++;
		}
	}
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}
