/* SPDX-License-Identifier: MIT */
/*
 * lock.c - the contended half of struct rpal_lock (base.h): a waiter marks
 * the word 2 and sleeps on it; a giver that swaps out a 2 wakes one.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"

/* seen: what the failed take found (1 or 2).  Whoever takes the lock from
 * here on marks it 2, so its give wakes the next waiter: a spare wake-up at
 * worst, never a lost one. */
void lock_wait(struct rpal_lock *l, uint32_t seen)
{
	if (seen != 2)
		seen = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
	while (seen != 0) {
		syscall(SYS_futex, &l->word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		seen = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
	}
}

void lock_wake(struct rpal_lock *l)
{
	syscall(SYS_futex, &l->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
