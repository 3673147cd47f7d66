/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the connected-mode layout shared with peers (docs/PROTOCOL.md
 * specifies it for other implementations).  Private: do not include from
 * applications.  Everything is little-endian x86_64 / aarch64 natural layout;
 * the _Static_asserts pin it.
 *
 * Ownership rule: every byte of an arena is written only by the process that
 * owns the arena.  A peer maps it read-only and must validate whatever it
 * reads there before use (it may change under its feet).
 */
#ifndef RPAL_WIRE_H
#define RPAL_WIRE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RPAL_WIRE_VERSION   3u   /* 3: the doorbell is a socket, not a pipe */
#define RPAL_HELLO_MAGIC    0x4c415052u   /* "RPAL" */
#define RPAL_ARENA_MAGIC    0x414e5241u   /* "ARNA" */
#define RPAL_BLOCK_MAGIC    0x4b434c42u   /* "BLCK" */

#define RPAL_CACHELINE      64u
/* Distance between lines written at different times: two lines, because
 * adjacent-line prefetchers pull pairs (DPDK's RTE_CACHE_GUARD). */
#define RPAL_GUARD          128u
#define RPAL_PAGE           4096u
/* slots.lock: byte i is slot i's owner (write lock); byte
 * RPAL_SLOT_MAPPED_LOCK + i is read-locked by every process that maps slot
 * i's arena, and a claimer of slot i must be able to write-lock it too.
 * Byte RPAL_SLOT_MAP_GUARD + i is write-locked by a program of a host while
 * it decides what to map at slot i of the address space they share, and
 * maps it. */
#define RPAL_SLOT_MAPPED_LOCK 4096u
#define RPAL_SLOT_MAP_GUARD   8192u

/* Offset 0 of every arena.  Written once at creation. */
struct rpal_arena_hdr {
	uint32_t magic;        /* RPAL_ARENA_MAGIC */
	uint16_t version;      /* RPAL_WIRE_VERSION */
	uint16_t hdr_size;     /* sizeof(struct rpal_arena_hdr) */
	uint32_t slot;         /* slot index the owner claimed */
	uint32_t pid;          /* owner's pid */
	uint64_t arena_size;   /* bytes */
	uint64_t base;         /* address of this header in every process */
	uint64_t heap_off;     /* first byte the allocator manages */
	uint64_t nonce;        /* random; tells two incarnations of a slot apart */
};
_Static_assert(sizeof(struct rpal_arena_hdr) == 48, "arena header layout");

/* A data-ring entry: one cache line. */
struct rpal_slot {
	_Atomic uint32_t seq;  /* (index + 1) mod 2^32; stored last, with release */
	uint32_t len;          /* payload bytes */
	uint32_t flags;        /* RPAL_SLOT_* */
	uint32_t reserved;     /* 0 */
	uint64_t addr;         /* RPAL_SLOT_BUF: buffer address in the producer's arena */
	uint8_t data[40];      /* RPAL_SLOT_INLINE: the payload */
};
_Static_assert(sizeof(struct rpal_slot) == 64, "slot layout");
_Static_assert(offsetof(struct rpal_slot, data) == 24, "slot layout");

#define RPAL_SLOT_INLINE 0x1u   /* payload in data[], len <= 40 */
#define RPAL_SLOT_BUF    0x2u   /* payload at addr; the consumer must ack it */

/* An ack-ring entry: "I am done with your buffer at addr". */
struct rpal_ack {
	_Atomic uint32_t seq;  /* (index + 1) mod 2^32; stored last, with release */
	uint32_t reserved;
	uint64_t addr;
};
_Static_assert(sizeof(struct rpal_ack) == 16, "ack layout");

/*
 * One side of one connection, in its owner's arena.  Indices are free-running
 * 64-bit counters, masked on access; entries counts are powers of two.
 * Each line written by the owner at run time sits RPAL_GUARD bytes from the
 * next, so the peer's copy of one is not invalidated by a write to another.
 */
struct rpal_block {
	/* Written once at creation. */
	uint32_t magic;          /* RPAL_BLOCK_MAGIC */
	uint16_t version;        /* RPAL_WIRE_VERSION */
	uint16_t hdr_size;       /* offset of the data ring from the block */
	uint64_t nonce;          /* random; matches the hello */
	uint32_t ring_entries;   /* data ring: my messages to the peer */
	uint32_t ack_entries;    /* ack ring: my acks of the peer's buffers */
	uint32_t ring_off;       /* from block start */
	uint32_t ack_off;        /* from block start */
	/* Changes once or twice per connection, so it shares the read-mostly
	 * line instead of the busy tail line. */
	_Atomic uint32_t state;  /* RPAL_STATE_*: set after the last slot */
	/* Hints, written only when they change: the CPU my sending and my
	 * receiving thread last ran on (UINT32_MAX unknown).  A peer does not
	 * spin waiting for a thread that shares its CPU. */
	_Atomic uint32_t tx_cpu;
	_Atomic uint32_t rx_cpu;
	uint32_t reserved0;      /* 0 */
	/* Hosted mode only: the address of my receiver's call record when the
	 * peer lives in my process (see hosted/rpal_host.h); 0 otherwise.  A
	 * peer in another process never reads it. */
	_Atomic uint64_t hosted_rcv;
	/* Hosted mode only, with hosted_rcv: what a call on this connection
	 * tells my receiver, so it looks at this connection first. */
	_Atomic uint64_t hosted_cookie;
	uint8_t pad0[RPAL_GUARD - 64];

	/* Producer side of my data ring. */
	_Atomic uint64_t tail;   /* messages published; slot seq is authoritative */
	uint8_t pad1[RPAL_GUARD - 8];

	/* Consumer side of the peer's data ring. */
	_Atomic uint64_t rx_head;
	uint8_t pad2[RPAL_GUARD - 8];

	/* Producer side of my ack ring. */
	_Atomic uint64_t ack_tail;
	uint8_t pad3[RPAL_GUARD - 8];

	/* Consumer side of the peer's ack ring. */
	_Atomic uint64_t ack_head;
	uint8_t pad4[RPAL_GUARD - 8];

	/* What I sleep on: the peer must wake me after it publishes
	 * (RPAL_WAIT_RX) or consumes/acks (RPAL_WAIT_TX): by FUTEX_WAKE on its
	 * own wake_seq if the matching *_FUTEX bit is set, by my doorbell if
	 * the *_BELL bit is set or the *_FUTEX bit is not (both if both).
	 * Bits 6..63 count my sleeps, so the peer wakes me once per sleep. */
	_Atomic uint64_t waiting;
	/* Bumped before each FUTEX_WAKE I send the peer; a futex sleeper
	 * samples its peer's wake_seq before advertising sleep and waits on it,
	 * so a wake that comes before its FUTEX_WAIT is not lost. */
	_Atomic uint32_t wake_seq;
	uint8_t pad5[RPAL_GUARD - 12];
};
_Static_assert(sizeof(struct rpal_block) == 6 * RPAL_GUARD, "block layout");
_Static_assert(offsetof(struct rpal_block, tail) == 128, "block layout");
_Static_assert(offsetof(struct rpal_block, state) == 32, "block layout");
_Static_assert(offsetof(struct rpal_block, rx_cpu) == 40, "block layout");
_Static_assert(offsetof(struct rpal_block, waiting) == 640, "block layout");
_Static_assert(offsetof(struct rpal_block, wake_seq) == 648, "block layout");

#define RPAL_STATE_SHUT_WR 0x1u  /* no messages after tail */
#define RPAL_STATE_CLOSED  0x2u  /* the owner closed the connection */

#define RPAL_WAIT_RX       0x1u
#define RPAL_WAIT_TX       0x2u
#define RPAL_WAIT_RX_FUTEX 0x4u   /* the RX sleeper waits on the waker's wake_seq */
#define RPAL_WAIT_TX_FUTEX 0x8u   /* likewise for TX */
/* The RX (TX) sleeper waits on the doorbell.  Beside the *_FUTEX bit (a
 * side may have sleepers of both kinds), the waker does both. */
#define RPAL_WAIT_RX_BELL  0x10u
#define RPAL_WAIT_TX_BELL  0x20u
#define RPAL_WAIT_EPOCH    0x40u  /* one sleep */

/* Handshake messages: one SOCK_SEQPACKET datagram each. */
enum {
	RPAL_HS_HELLO   = 1,   /* client -> server, with [arena memfd, doorbell] */
	RPAL_HS_WELCOME = 2,   /* server -> client, with [arena memfd, doorbell] */
	/* The doorbell is one end of a Unix stream socket pair whose other
	 * end the sender keeps and sleeps on; the receiver rings it with
	 * send(MSG_DONTWAIT | MSG_NOSIGNAL), which nothing the owner does to
	 * the shared file can make block (PROTOCOL.md §6). */
	RPAL_HS_REFUSE  = 3,   /* either way, no fds; then the sender closes */
};

#define RPAL_FEATURES_BASE 0u  /* feature bits every peer of this version has: none */
/*
 * Feature bits (struct rpal_hello.features); a peer ignores bits it does not
 * know.  RPAL_FEAT_WAKE_PAGE: in a HELLO, "I can use a wake page"; in the
 * WELCOME, "here it is": a third descriptor, a memfd of RPAL_WAKE_PAGE_SIZE
 * bytes sealed against shrink and grow that both sides map read-write.  It
 * holds one futex word per side (struct rpal_wake_page): a side that sleeps
 * with an RPAL_WAIT_*_FUTEX bit waits on its own word, and the peer wakes it
 * by incrementing that word and FUTEX_WAKE on it, instead of its wake_seq.
 * A word in a writable mapping lets a sleeper wait on it alone with
 * FUTEX_WAIT (its own death watcher can bump it too), where the peer's
 * read-only wake_seq needs futex_waitv and the kernel's slow path.
 */
#define RPAL_FEAT_WAKE_PAGE 0x1u
#define RPAL_WAKE_PAGE_SIZE 4096u

struct rpal_wake_page {
	_Atomic uint32_t word[2][RPAL_GUARD / 4];  /* [0][0]: the connecting side's; [1][0]: the accepting side's */
};
/*
 * Beside each word, 8 bytes into its side's line: when the word was last
 * rung (u64, CLOCK_MONOTONIC ns).  A sleeper that wants to learn how long
 * its wake-ups take stores 0 there before it sleeps; a waker that finds 0
 * stores the time before it increments the word.  Advisory: a sleeper
 * ignores a time outside its sleep, and a peer that never writes it only
 * leaves the sleeper without the figure.
 */
#define RPAL_WAKE_RUNG_OFF 8u
_Static_assert(sizeof(struct rpal_wake_page) == 2 * RPAL_GUARD, "wake page layout");

struct rpal_hello {
	uint32_t magic;          /* RPAL_HELLO_MAGIC */
	uint16_t version;        /* RPAL_WIRE_VERSION */
	uint16_t type;           /* RPAL_HS_HELLO or RPAL_HS_WELCOME */
	uint32_t size;           /* sizeof(struct rpal_hello) */
	uint32_t features;
	uint32_t pid;
	uint32_t slot;
	uint32_t nr_slots;
	uint32_t reserved0;
	uint64_t region_base;
	uint64_t slot_size;
	uint64_t arena_size;
	uint64_t arena_nonce;
	uint64_t block;          /* address of the sender's struct rpal_block */
	uint64_t block_nonce;
	uint32_t ring_entries;
	uint32_t ack_entries;
	char service[40];        /* NUL-padded; informational */
};
_Static_assert(sizeof(struct rpal_hello) == 128, "hello layout");

struct rpal_refuse {
	uint32_t magic;          /* RPAL_HELLO_MAGIC */
	uint16_t version;
	uint16_t type;           /* RPAL_HS_REFUSE */
	uint32_t size;           /* sizeof(struct rpal_refuse) */
	int32_t error;           /* a Linux errno value */
	char reason[112];        /* NUL-terminated sentence */
};
_Static_assert(sizeof(struct rpal_refuse) == 128, "refuse layout");

#endif /* RPAL_WIRE_H */
