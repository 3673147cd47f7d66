/* SPDX-License-Identifier: MIT */
/*
 * mpk.c - memory protection keys on peer arenas (protect_peers,
 * RPAL_PROTECT_PEERS): a peer's arena is unreadable to every thread of
 * this process except inside a window.  It catches stray reads (a
 * zero-copy message used after its release, a wild pointer); it is no
 * security boundary, since any code here can write PKRU.
 *
 * Keys.  Each peer mapping gets a key of its own (pkey_alloc), tagged on
 * its pages with pkey_mprotect, and given back when the mapping goes (the
 * last connection to that peer closed, or the peer died and was retired).
 * Linux has 15 keys per process besides key 0, fewer if the application
 * or execute-only mappings took some.  When none is left, peers share: a
 * new peer takes the key with the fewest peers, so a window on one opens
 * the others on that key too.  One key is taken at rpal_init and kept
 * until rpal_fini, so that protection, once on, covers every peer.
 *
 * PKRU.  A per-thread register with an access-disable bit per key.  The
 * kernel starts a process with keys 1..15 disabled, a new thread copies
 * its creator's PKRU, and pkey_alloc changes only the caller's bits (we ask
 * for "disabled").  So every thread, whether it existed before rpal_init
 * or not, starts with peer keys shut, unless the application opened them
 * itself, or created the thread inside a window.  A signal handler runs
 * with the kernel's default (shut); sigreturn restores the interrupted
 * value, and a siglongjmp out of a handler leaves the default, which is
 * why rpal_access_safely() puts the caller's value back after a fault.
 *
 * Windows.  Opening reads PKRU (RDPKRU) and writes it (WRPKRU) only if a
 * key is shut; closing writes back the value found, so windows nest.  The
 * library opens one per public call on a connection (MPK_REENTER), all
 * keys for rpal_epoll_wait and rpal_access_safely.  The kernel applies
 * PKRU to its own accesses of user memory too: a futex wait on a peer's
 * word fails with EFAULT outside a window, so waits happen inside one.
 */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#define MPK_NKEYS 16                    /* PKRU has 16 keys; 0 is everyone's */

_Atomic bool mpk_on;
_Atomic uint32_t mpk_all_bits;

/* Under rpal_g.lock. */
static bool key_held[MPK_NKEYS];
static unsigned key_users[MPK_NKEYS];  /* peer mappings on each key */
static int kept_key = -1;              /* taken at setup, kept until teardown */

static inline uint32_t key_bit(int key) { return 1u << (2 * key); }

/* CPUID.(EAX=7,ECX=0):ECX bit 4, OSPKE: the CPU has PKU and the kernel
 * turned it on (CR4.PKE); RDPKRU and WRPKRU fault without it.  Elsewhere
 * no keys: AArch64's overlays (POE) are not PKRU, so protect_peers is
 * refused there as on an x86 CPU without PKU. */
static bool cpu_has_pku(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;

	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	return c & (1u << 4);
#else
	return false;
#endif
}

/* pkey_alloc with the caller's access already disabled; -errno on failure. */
static int key_alloc(void)
{
	int key = pkey_alloc(0, PKEY_DISABLE_ACCESS);

	if (key < 0)
		return -errno;
	if (key >= MPK_NKEYS) {         /* not an x86 key: cannot name it in PKRU */
		pkey_free(key);
		return -ENOSPC;
	}
	key_held[key] = true;
	atomic_fetch_or(&mpk_all_bits, key_bit(key));
	return key;
}

static void key_release(int key)
{
	key_held[key] = false;
	key_users[key] = 0;
	atomic_fetch_and(&mpk_all_bits, ~key_bit(key));
	pkey_free(key);
}

/* At rpal_init, under rpal_g.lock. */
int mpk_setup(unsigned mode)
{
	int key;

	if (mode == RPAL_PROTECT_OFF)
		return 0;
	if (!cpu_has_pku()) {
		if (mode == RPAL_PROTECT_AUTO)
			return 0;
		return rpal_fail(ENOTSUP, "protect_peers=2 needs memory protection keys (PKU), "
				 "which this CPU or kernel does not offer");
	}
	key = key_alloc();
	if (key < 0) {
		if (mode == RPAL_PROTECT_AUTO)
			return 0;
		if (key == -ENOSPC)
			return rpal_fail(ENOSPC, "protect_peers=2: no protection key is free "
					 "(the application holds all of them)");
		return rpal_fail(ENOTSUP, "protect_peers=2: pkey_alloc failed (%s); "
				 "the kernel does not offer protection keys", strerror(-key));
	}
	kept_key = key;
	store_relaxed(&mpk_on, true);
	return 0;
}

/* rpal_fini, a failed rpal_init, or the child after fork (whose copy of
 * our keys is its own to free).  Peers are already unmapped or forgotten. */
void mpk_teardown(void)
{
	int key;

	store_relaxed(&mpk_on, false);
	for (key = 1; key < MPK_NKEYS; key++)
		if (key_held[key])
			key_release(key);
	kept_key = -1;
}

/* A key for a new peer mapping: a held one nobody uses, a new one, or the
 * held one with the fewest peers. */
static int key_pick(void)
{
	int key, best = -1;

	for (key = 1; key < MPK_NKEYS; key++)
		if (key_held[key] && !key_users[key])
			return key;
	key = key_alloc();
	if (key > 0)
		return key;
	for (key = 1; key < MPK_NKEYS; key++)
		if (key_held[key] && (best < 0 || key_users[key] < key_users[best]))
			best = key;
	return best;            /* kept_key at least */
}

/* Tag a freshly mapped peer arena with its key.  Under rpal_g.lock. */
int mpk_peer_attach(struct rpal_peer *p)
{
	int key;

	p->pkru_bits = 0;
	if (!load_relaxed(&mpk_on))
		return 0;
	key = key_pick();
	if (pkey_mprotect((void *)p->base, p->size, PROT_READ, key) < 0)
		return rpal_fail(errno, "cannot put protection key %d on the arena of slot %u", key, p->slot);
	key_users[key]++;
	p->pkey = key;
	p->pkru_bits = key_bit(key);
	return 0;
}

/* The peer's mapping is gone: give its key back when no peer uses it.
 * Under rpal_g.lock.  A thread that still has the key open (a window the
 * application left open) keeps reading whatever the key tags next. */
void mpk_peer_detach(struct rpal_peer *p)
{
	int key = p->pkey;

	if (!p->pkru_bits)
		return;
	p->pkru_bits = 0;
	if (!key_held[key] || --key_users[key] || key == kept_key)
		return;
	key_release(key);
}

/* rpal_epoll_wait, rpal_access_safely: open every key; the cookie always
 * tells mpk_all_end() what to restore (mpk_all_sync() may open more). */
uint64_t mpk_all_open(void)
{
	uint32_t old, all;

	old = pkru_read();
	all = load_relaxed(&mpk_all_bits);
	if (old & all)          /* a caller holding windows pays no write */
		pkru_write(old & ~all);
	return (1ull << 32) | old;
}
