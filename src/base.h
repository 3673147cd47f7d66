/* SPDX-License-Identifier: MIT */
/*
 * base.h - the bottom layer of librpal, which every file may use: atomics
 * and barriers, the clock, error details, configuration (error.c,
 * config.c).  Includes nothing of librpal but the public header and the
 * wire layout.
 */
#ifndef RPAL_BASE_H
#define RPAL_BASE_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "rpal.h"
#include "wire.h"

#define RPAL_EXPORT __attribute__((visibility("default")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------ atomics
 * x86-64 is TSO: loads are acquire and stores release for free; only a
 * store followed by a load of another location needs a full barrier (the
 * sleep/wake Dekker pairs in notify.c).  Every use names its pair. */
#define load_acquire(p)      atomic_load_explicit((p), memory_order_acquire)
#define load_relaxed(p)      atomic_load_explicit((p), memory_order_relaxed)
#define store_release(p, v)  atomic_store_explicit((p), (v), memory_order_release)
#define store_relaxed(p, v)  atomic_store_explicit((p), (v), memory_order_relaxed)
/* A statistic that threads may bump at once: no locked instruction, and a
 * count lost to a race is no harm. */
#define stat_inc(p)          stat_add((p), 1)
/* A counter with one writer thread (statpage.h): a relaxed load and store,
 * no locked instruction; readers see each value whole. */
#define stat_add(p, n)       store_relaxed((p), load_relaxed(p) + (n))
/* One that several threads bump and that must not lose counts: an atomic
 * add, for paths that make a system call anyway (sleeps). */
#define stat_add_shared(p, n) atomic_fetch_add_explicit((p), (n), memory_order_relaxed)

#if defined(__SANITIZE_THREAD__)
#define smp_mb() atomic_thread_fence(memory_order_seq_cst)
#else
/* A locked no-op on the stack: a full barrier, cheaper than mfence. */
#define smp_mb() __asm__ __volatile__("lock; orl $0,(%%rsp)" ::: "memory", "cc")
#endif

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

/* Publish the CPU we run on in a hint slot of our block, if it changed.
 * sched_getcpu() reads glibc's rseq area: about a nanosecond. */
static inline uint32_t cpu_note(_Atomic uint32_t *slot)
{
	uint32_t cpu = (uint32_t)sched_getcpu();

	if (atomic_load_explicit(slot, memory_order_relaxed) != cpu)
		atomic_store_explicit(slot, cpu, memory_order_relaxed);
	return cpu;
}

/* The monotonic clock in ns (the vDSO: no system call). */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------- errors */
/* Record a detail for rpal_strerror(-err) on this thread; returns -err. */
int rpal_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------- config */
int rpal_config_check(const struct rpal_config *cfg);

#endif /* RPAL_BASE_H */
