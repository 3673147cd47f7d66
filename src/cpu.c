/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - which CPU the thread runs on (this_cpu() in base.h), when the
 * rseq area's offset is not known yet or glibc registers none.
 */
#include "base.h"

/* glibc 2.35 and later export where each thread's rseq area is; weak, so
 * that an older glibc leaves their addresses NULL. */
#pragma weak __rseq_offset
#pragma weak __rseq_size

_Atomic ptrdiff_t cpu_rseq_off;

uint32_t this_cpu_slow(void)
{
	/* A size of 0: glibc registers no area (a tunable turned it off).
	 * Our offset stays 0 then, and every call comes here. */
	if (&__rseq_size && &__rseq_offset && __rseq_size >= offsetof(struct rseq, cpu_id) + sizeof(uint32_t))
		atomic_store_explicit(&cpu_rseq_off, __rseq_offset, memory_order_relaxed);
	return (uint32_t)sched_getcpu();
}
