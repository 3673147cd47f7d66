/* SPDX-License-Identifier: MIT */
/*
 * arch.h - what differs between the CPUs librpal runs on: a full barrier,
 * the hint a spin loop gives the CPU, and a cycle counter.  The rest of the
 * library is C11 atomics with the ordering each access needs, which the
 * compiler maps to either CPU.
 *
 * The cycle counter times spins for the statistics only.  Its rate is never
 * assumed: a page carries a (clock, counter) pair taken at setup, and a
 * reader converts counts to ns from it and a later pair (statpage.h).  On
 * x86-64 it is the TSC; on AArch64 the virtual counter CNTVCT_EL0, which
 * Linux lets user space read on every CPU it supports.
 */
#ifndef RPAL_ARCH_H
#define RPAL_ARCH_H

#include <stdatomic.h>
#include <stdint.h>

#if defined(__x86_64__)

#if defined(__SANITIZE_THREAD__)
#define smp_mb() atomic_thread_fence(memory_order_seq_cst)
#else
/* A locked no-op on the stack: a full barrier, cheaper than mfence. */
#define smp_mb() __asm__ __volatile__("lock; orl $0,(%%rsp)" ::: "memory", "cc")
#endif

/* A locked read-modify-write is a full barrier already. */
#define smp_mb_after_rmw() __asm__ __volatile__("" ::: "memory")

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static inline uint64_t cycles_now(void) { return __builtin_ia32_rdtsc(); }

#elif defined(__aarch64__)

/* DMB ISH: orders a store before a later load, which the sleep/wake
 * pairs in notify.c need (acquire and release alone do not). */
#define smp_mb() atomic_thread_fence(memory_order_seq_cst)
/* A seq_cst RMW without LSE (LDAXR/STLXR) lets a later load pass its
 * store: the sleep/wake pairs need a DMB after it. */
#define smp_mb_after_rmw() smp_mb()

static inline void cpu_relax(void) { __asm__ __volatile__("yield" ::: "memory"); }

static inline uint64_t cycles_now(void)
{
	uint64_t v;

	__asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
	return v;
}

#else
#error "librpal supports x86-64 and AArch64"
#endif

#endif
