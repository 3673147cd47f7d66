/* SPDX-License-Identifier: MIT */
/*
 * base.h - the bottom layer of librpal, which every file may use: atomics
 * and barriers, a lock, the clock, the CPU we run on, error details,
 * configuration (lock.c, cpu.c, error.c, config.c).  Includes nothing
 * of librpal but the public header and the wire layout.
 */
#ifndef RPAL_BASE_H
#define RPAL_BASE_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/rseq.h>
#include <sys/types.h>
#include <time.h>

#include "arch.h"
#include "rpal.h"
#include "wire.h"

#define RPAL_EXPORT __attribute__((visibility("default")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------ atomics
 * Each access says the order it needs: an acquire load pairs with a release
 * store (free on x86-64, LDAR/STLR on AArch64); a store followed by a load
 * of another location needs a full barrier, smp_mb() (the sleep/wake Dekker
 * pairs in notify.c).  Every use names its pair. */
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


/*
 * A mutex on one futex word: 0 free, 1 held, 2 held and maybe waited for.
 * The message and wait paths take one on every call; inline, the
 * uncontended take and give stay in librpal's hot text instead of calls
 * into libc (see RPAL_HOT).  lock.c sleeps and wakes.
 */
struct rpal_lock {
	_Atomic uint32_t word;
};
#define RPAL_LOCK_INIT { 0 }
void lock_wait(struct rpal_lock *l, uint32_t seen);
void lock_wake(struct rpal_lock *l);

static inline void lock_init(struct rpal_lock *l) { atomic_init(&l->word, 0); }

static inline void lock_take(struct rpal_lock *l)
{
	uint32_t seen = 0;

	if (unlikely(!atomic_compare_exchange_strong_explicit(&l->word, &seen, 1, memory_order_acquire,
							      memory_order_relaxed)))
		lock_wait(l, seen);
}

static inline void lock_give(struct rpal_lock *l)
{
	if (unlikely(atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2))
		lock_wake(l);
}

/* Where glibc's rseq area lies from the thread pointer; 0 until known,
 * and for good where glibc has none (cpu.c). */
extern _Atomic ptrdiff_t cpu_rseq_off;
uint32_t this_cpu_slow(void);

/*
 * The CPU we run on.  The kernel keeps the cpu_id of the thread's rseq area
 * current, so this is one load, as in glibc's sched_getcpu(), without the
 * call into libc.  A thread whose registration failed reads a negative id.
 */
static inline uint32_t this_cpu(void)
{
	ptrdiff_t off = atomic_load_explicit(&cpu_rseq_off, memory_order_relaxed);

	if (likely(off)) {
		const volatile struct rseq *r = (const volatile struct rseq *)((char *)__builtin_thread_pointer() + off);
		int32_t cpu = (int32_t)r->cpu_id;

		if (likely(cpu >= 0))
			return (uint32_t)cpu;
	}
	return this_cpu_slow();
}

/* Whether the calling thread's affinity lets it run on cpu (read again
 * every 256 asks: a system call).  Not an id it could run on: false. */
bool cpu_allowed(uint32_t cpu);

/* Whether a peer's CPU hint (tx_cpu, rx_cpu) names a CPU the calling
 * thread may not run on; UINT32_MAX, not known yet, does not. */
static inline bool cpu_apart(uint32_t hint)
{
	return hint != UINT32_MAX && !cpu_allowed(hint);
}

/* Publish the CPU we run on in a hint slot of our block, if it changed. */
static inline uint32_t cpu_note(_Atomic uint32_t *slot)
{
	uint32_t cpu = this_cpu();

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

/*
 * Code layout.  The message and wait paths run on every round trip, often
 * right after a context switch, so they keep their code together and
 * dense.  RPAL_HOT: the path of every small message and every wait; the
 * compiler gathers these functions in .text.hot and moves their failure
 * branches out.  RPAL_WARM: the paths of buffers and zero copy, placed
 * right after them (.text.sorted.* follows .text.hot in the linker's
 * default script; a linker without it puts them with the rest of the text).
 */
#define RPAL_HOT  __attribute__((hot))
#define RPAL_WARM __attribute__((section(".text.sorted.rpal_warm")))

/* ------------------------------------------------------------- errors */
/* Record a detail for rpal_strerror(-err) on this thread; returns -err.
 * Cold: the compiler moves the paths that fail out of the hot text. */
int rpal_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3), cold));

/* 0, or EINVAL with a detail when flags has bits outside allowed: an
 * unknown bit may be a flag of a later version, which must not be taken
 * for something it is not. */
static inline int flags_check(const char *fn, int flags, int allowed)
{
	if (__builtin_expect(!(flags & ~allowed), 1))
		return 0;
	return rpal_fail(EINVAL, "%s: unknown flags %#x", fn, (unsigned)(flags & ~allowed));
}

/* ------------------------------------------------------------- config */
int rpal_config_check(const struct rpal_config *cfg);

#endif /* RPAL_BASE_H */
