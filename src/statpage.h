/* SPDX-License-Identifier: MIT */
/*
 * statpage.h - the statistics page: a file "<runtime_dir>/stat.<slot>" that
 * each rpal process maps shared and keeps its connections' counters in, so
 * that `rpal stat` and `rpal top` read them without stopping or slowing it
 * (docs/PROTOCOL.md section 9 specifies it).  Private to librpal and the
 * rpal command: do not include from applications.
 *
 * Writers: only the owning process.  Each counter has one writer thread in
 * the normal case (the tx line the sending thread's, the rx line the
 * receiving thread's), which bumps it with a relaxed load and store.
 * Readers: any process; the page is untrusted input to them, and it
 * changes while they read it.  A reader copies an entry with 8-byte
 * atomic loads between two reads of its seq (below), then checks every
 * field it uses.
 */
#ifndef RPAL_STATPAGE_H
#define RPAL_STATPAGE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RPAL_STAT_MAGIC    0x54535052u   /* "RPST" */
#define RPAL_STAT_VERSION  1u
#define RPAL_STAT_PREFIX   "stat."       /* then the slot in decimal */
/* The page never holds more entries than this: readers reject a larger
 * count, writers keep further connections' counters private. */
#define RPAL_STAT_MAX_CONNS 16384u

/* Offset 0.  Everything but nr_entries, nr_open and overflow is written
 * before the file gets its name, and never again. */
struct rpal_stat_hdr {
	uint32_t magic;              /* RPAL_STAT_MAGIC */
	uint16_t version;            /* RPAL_STAT_VERSION */
	uint16_t hdr_size;           /* sizeof(struct rpal_stat_hdr): entries start here */
	uint32_t entry_size;         /* sizeof(struct rpal_stat_conn) */
	_Atomic uint32_t nr_entries; /* entries the file holds; grows (release, after the file did) */
	uint32_t pid;
	uint32_t uid;
	uint32_t slot;
	uint32_t flags;              /* RPAL_STAT_HOSTED */
	int64_t started;             /* CLOCK_REALTIME seconds at rpal_init() */
	_Atomic uint32_t nr_open;    /* open connections (listeners not counted) */
	_Atomic uint32_t overflow;   /* open connections without an entry (page full) */
	/* CLOCK_MONOTONIC ns and the cycle counter (arch.h: the TSC, or
	 * AArch64's CNTVCT_EL0; 0 where a peer has none) at one instant of
	 * rpal_init(): with a pair of its own, a reader converts spin_tsc to ns. */
	uint64_t clock_ns;
	uint64_t clock_tsc;
	char name[64];               /* the program's name, NUL-padded */
	/* Hosted programs (RPAL_STAT_HOSTED): sums over the program's
	 * receivers and calling threads, brought up to date every 64 calls
	 * into one of its receivers and every 64 calls made by one of its
	 * threads; never lower than before. */
	_Atomic uint64_t calls_in;   /* RPAL calls into it */
	_Atomic uint64_t calls_out;  /* RPAL calls its threads made */
	_Atomic uint64_t handoffs;   /* system calls in calls, handed to its own threads */
	_Atomic uint64_t callee_tsc; /* counter cycles its code ran on callers' threads */
	/* What the adaptive wait counts for a sleep: the sleeper's CPU time
	 * and the waker's system call, moving averages of sampled sleeps and
	 * wake-ups; 0 until the first sample. */
	_Atomic uint32_t sleep_cost_ns;
	_Atomic uint32_t wake_cost_ns;
	/* How long its sleepers took to run after a peer rang them (a moving
	 * average over its waiters' samples, from the wake pages' ring
	 * times); 0 until the first. */
	_Atomic uint32_t wake_lat_ns;
	uint8_t reserved2[84];
};
_Static_assert(sizeof(struct rpal_stat_hdr) == 256, "stat header layout");
#define RPAL_STAT_HOSTED 0x1u        /* a program under `rpal run` */

/* Counters the sending thread writes (one cache line). */
struct rpal_stat_tx {
	_Atomic uint64_t msgs;       /* messages published */
	_Atomic uint64_t bytes;      /* their payload bytes */
	_Atomic uint64_t wakeups;    /* wake-up system calls made for the peer's receiver */
	_Atomic uint64_t wakeups_avoided; /* checks that found it awake, or already woken */
	_Atomic uint64_t sleeps;     /* sleeps waiting for room (ring or quota full) */
	_Atomic uint64_t ring_full;  /* sends that found the ring or the quota full */
	_Atomic uint64_t spin_tsc;   /* counter cycles spent spinning for room */
	_Atomic uint64_t bufs_out;   /* our buffers the peer holds, not yet acked */
};

/* Counters the receiving thread writes (one cache line). */
struct rpal_stat_rx {
	_Atomic uint64_t msgs;       /* messages consumed */
	_Atomic uint64_t bytes;      /* their payload bytes */
	_Atomic uint64_t wakeups;    /* wake-ups made for the peer's sender (room) */
	_Atomic uint64_t sleeps;     /* sleeps waiting for messages (epoll's included) */
	_Atomic uint64_t spin_tsc;   /* counter cycles spent spinning for messages, an epoll
	                                set's shared among its connections (atomic add) */
	_Atomic uint64_t bufs_held;  /* the peer's buffers received zero-copy, not released */
	_Atomic uint64_t violations; /* protocol violations seen (any thread: atomic add) */
	uint64_t reserved;
};

/*
 * One connection.  seq is even while the identity (everything before
 * status) is stable, odd while the owner rewrites it: a reader that sees
 * the same even value before and after its copy has a consistent identity
 * with counters of that connection.  state RPAL_STAT_FREE: no connection;
 * the counters are left as they were.
 */
struct rpal_stat_conn {
	_Atomic uint32_t seq;
	uint32_t state;              /* RPAL_STAT_FREE, RPAL_STAT_OPEN or RPAL_STAT_LISTEN */
	uint64_t id;                 /* the process's connection number, from 1 */
	int32_t fd;                  /* the connection's descriptor in the owner */
	uint32_t peer_pid;
	uint32_t peer_uid;
	uint32_t peer_gid;
	uint32_t peer_slot;
	uint32_t flags;              /* RPAL_STAT_ACCEPTED, RPAL_STAT_LOCAL */
	int64_t since;               /* CLOCK_REALTIME seconds at the handshake */
	_Atomic uint32_t status;     /* RPAL_STAT_PEER_GONE, RPAL_STAT_ERROR: set, never cleared */
	uint32_t reserved;
	char service[64];            /* the service name, NUL-padded (a path: its last component) */
	/* The same nonzero value in both ends' entries of one connection (the
	 * lower address of the two ends' blocks, which both map at the same
	 * address), so that a reader can pair them; 0: unknown. */
	uint64_t pair;
	struct rpal_stat_tx tx __attribute__((aligned(64)));
	struct rpal_stat_rx rx __attribute__((aligned(64)));
};
_Static_assert(sizeof(struct rpal_stat_tx) == 64 && sizeof(struct rpal_stat_rx) == 64, "stat lines");
_Static_assert(offsetof(struct rpal_stat_conn, service) == 56, "stat entry layout");
_Static_assert(offsetof(struct rpal_stat_conn, pair) == 120, "stat entry layout");
_Static_assert(offsetof(struct rpal_stat_conn, tx) == 128, "stat entry layout");
_Static_assert(sizeof(struct rpal_stat_conn) == 256, "stat entry layout");

#define RPAL_STAT_FREE 0u
#define RPAL_STAT_OPEN 1u
/* A listener: its identity is the service it serves, its descriptor (fd)
 * and since when; of the counters only rx.msgs (connections accepted) and
 * rx.violations (handshakes refused or failed) are used.  Readers that
 * know only OPEN skip it. */
#define RPAL_STAT_LISTEN 2u
#define RPAL_STAT_ACCEPTED 0x1u      /* we accepted it (else we connected) */
#define RPAL_STAT_LOCAL    0x2u      /* the peer is a program of our process (hosted) */
#define RPAL_STAT_PEER_GONE 0x1u     /* hang-up or exit seen */
#define RPAL_STAT_ERROR     0x2u     /* closed for I/O after a violation */

/*
 * Counter cycles to ns, from the owner's (ns0, tsc0) pair and a later one
 * of the caller's (the counter runs at one constant rate on every CPU: the
 * TSC where the kernel's clock source is the TSC, CNTVCT_EL0 always).  0
 * when the pairs say nothing.
 */
static inline uint64_t rpal_stat_tsc_ns(uint64_t cycles, uint64_t ns0, uint64_t tsc0, uint64_t ns1, uint64_t tsc1)
{
	if (!tsc0 || tsc1 <= tsc0 || ns1 <= ns0)
		return 0;
	return (uint64_t)((unsigned __int128)cycles * (ns1 - ns0) / (tsc1 - tsc0));
}

/* The file's size for n entries. */
static inline uint64_t rpal_stat_size(uint32_t n)
{
	return sizeof(struct rpal_stat_hdr) + (uint64_t)n * sizeof(struct rpal_stat_conn);
}

#endif /* RPAL_STATPAGE_H */
