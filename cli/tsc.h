/* SPDX-License-Identifier: MIT */
/* tsc.h - the cycle counter: read, calibrate against CLOCK_MONOTONIC. */
#ifndef RPAL_CLI_TSC_H
#define RPAL_CLI_TSC_H

#include <stdint.h>

/*
 * The counter is the one librpal counts its spin times in (src/arch.h): the
 * TSC on x86-64, the generic timer's virtual count (CNTVCT_EL0) on AArch64,
 * whose rate is fixed but often far below the CPU's clock (tens of MHz).
 */
#if defined(__x86_64__)
#include <x86intrin.h>

/*
 * rdtscp waits until every earlier instruction has executed, so a stamp is
 * not taken before the work it follows (a plain rdtsc may be).  The aux
 * value (the CPU number) is not needed.
 */
static inline uint64_t tsc_now(void)
{
	unsigned aux;

	return __rdtscp(&aux);
}

/* A plain read, for reads whose order alone matters. */
static inline uint64_t tsc_read(void) { return __rdtsc(); }

/* The spin-wait hint. */
static inline void tsc_pause(void) { _mm_pause(); }
#elif defined(__aarch64__)
/* ISB first, as rdtscp waits: the read is not taken before earlier work. */
static inline uint64_t tsc_now(void)
{
	uint64_t v;

	__asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v) : : "memory");
	return v;
}

static inline uint64_t tsc_read(void)
{
	uint64_t v;

	__asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
	return v;
}

static inline void tsc_pause(void) { __asm__ __volatile__("yield" ::: "memory"); }
#else
#error "rpal reads the TSC (x86-64) or CNTVCT_EL0 (AArch64)"
#endif

/* True when CPUID 0x80000007 EDX bit 8 (invariant TSC) is set; always on
 * AArch64, whose generic timer runs at one fixed rate. */
int tsc_invariant(void);

/* True when CPUID 1 ECX bit 31 says we run under a hypervisor.  AArch64 has
 * no such bit: false there, so reports do not say either way. */
int tsc_hypervisor(void);

/*
 * TSC ticks per second, measured against CLOCK_MONOTONIC over window_ms
 * (the bench uses 100).  Each end of the window is the (tsc, ns) pair with
 * the tightest bracketing of several tries, so a preemption at the edge
 * cannot skew it.  Returns 0 if the clock failed.
 */
double tsc_calibrate(unsigned window_ms);

/*
 * The TSC's step, found from reads taken a varying number of spins apart:
 * 1 where the counter moves every cycle, more where a hypervisor offers a
 * coarser clock scaled to the TSC rate (a VM here moved in steps of 26
 * cycles, 10 ns).  Every sample is then a multiple of it, and two medians
 * one step apart may be the same speed.  tsc_step_of() is the arithmetic,
 * on n reads in the order taken.
 */
uint64_t tsc_step_of(const uint64_t *reads, unsigned n);
uint64_t tsc_step(void);

/* CLOCK_MONOTONIC in ns. */
uint64_t mono_ns(void);

#endif
