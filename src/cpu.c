/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - which CPU the thread runs on (this_cpu() in base.h), when the
 * rseq area's offset is not known yet or glibc registers none; and which
 * it may run on.
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

bool cpu_allowed(uint32_t cpu)
{
	static __thread cpu_set_t set;
	static __thread unsigned asks;

	/* Where the kernel will not say, any CPU is taken as allowed. */
	if (!(asks++ & 255) && sched_getaffinity(0, sizeof(set), &set) != 0)
		memset(&set, 0xff, sizeof(set));
	return cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}
