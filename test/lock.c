/* SPDX-License-Identifier: MIT */
/*
 * Description: the message paths' lock (struct rpal_lock) and the CPU
 * lookup beside it in base.h.  Four threads add to a plain counter under
 * the lock, some holding it across a sleep so that the others must wait in
 * the kernel: no increment is lost and the word ends free.  this_cpu()
 * agrees with sched_getcpu() on every CPU the test may run on, and reads
 * glibc's rseq area where glibc registered one.
 */
#include <sched.h>

#include "internal.h"
#include "helpers.h"

#define THREADS 4

static struct rpal_lock lock = RPAL_LOCK_INIT;
static long counter;            /* plain: only the lock orders its updates */
static long per_thread;

static void *adder(void *arg)
{
	long id = (long)arg;

	for (long i = 0; i < per_thread; i++) {
		lock_take(&lock);
		counter++;
		/* Now and then hold it across a sleep: the others find it taken
		 * and sleep on the word, and this give has to wake one. */
		if (i % 512 == id)
			usleep(200);
		lock_give(&lock);
	}
	return NULL;
}

static void check_lock(void)
{
	pthread_t th[THREADS];

	per_thread = t_scaled(200000);
	for (long i = 0; i < THREADS; i++)
		t_check(pthread_create(&th[i], NULL, adder, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	t_check(counter == THREADS * per_thread, "lock lost increments: %ld of %ld", counter,
		THREADS * per_thread);
	t_check(atomic_load(&lock.word) == 0, "lock word %u after the last give, not 0", atomic_load(&lock.word));
	printf("%d threads x %ld increments under the lock, some held across a sleep: none lost\n", THREADS,
	       per_thread);
}

static void check_cpu(void)
{
	cpu_set_t allowed, one;
	int n = 0;

	t_check(sched_getaffinity(0, sizeof(allowed), &allowed) == 0, "sched_getaffinity");
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		t_check(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity %d", cpu);
		for (int k = 0; k < 100; k++)
			t_check(this_cpu() == (uint32_t)cpu, "this_cpu() = %u pinned to CPU %d", this_cpu(), cpu);
		n++;
	}
	t_check(sched_setaffinity(0, sizeof(allowed), &allowed) == 0, "sched_setaffinity");
	printf("this_cpu() right on all %d allowed CPUs\n", n);
	if (__rseq_size > 0)
		t_check(atomic_load(&cpu_rseq_off) == __rseq_offset, "glibc has an rseq area but this_cpu() does not read it");
	printf("this_cpu() %s\n", __rseq_size > 0 ? "reads glibc's rseq area" : "calls sched_getcpu(): glibc registered no rseq area");
}

int main(void)
{
	check_lock();
	check_cpu();
	return T_EXIT_PASS;
}
