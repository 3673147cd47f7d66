/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ring.c - libFuzzer harness for descriptor validation in src/ring.c:
 * the consumer side (ring_peek, ring_consume, ring_readable, ring_published,
 * ack_push) reading a peer's data ring, and the owner side (acks_drain,
 * ring_reserve, ring_publish) reading the peer's ack ring and rx_head, where
 * every byte of the peer's connection block is written by the fuzzer.
 *
 * Memory.  Two 1 MiB "arenas" are mapped at fixed addresses (so that buffer
 * addresses in the seed corpus mean the same on every run), each between
 * PROT_NONE guards: a read just outside either faults.
 *   FZ_OUR   our arena: the library's own allocator (alloc_create() over
 *            [base + 4096, base + 1 MiB), exactly as region.c sets it up) is
 *            installed as rpal_g.alloc, so acks_drain() -> arena_free() runs
 *            the real code; it is rebuilt for every input.
 *   FZ_PEER  the peer's arena; its connection block sits at FZ_PEER + 4096
 *            and a fake struct rpal_peer describes [FZ_PEER, FZ_PEER + 1 MiB).
 * Our own block (rx_head, ack_tail, our ring and ack ring) is malloc'd, so
 * ASan checks every write the library makes to it.
 *
 * Input:
 *   u8  geometry: bits 0-1 peer ring 8<<n, 2-3 peer acks 8<<n,
 *                 4-5 our ring 8<<n, 6-7 our acks 8<<n
 *   u8  flags:    bit 0 the peer is dead (mapping kept, as after a crash)
 *   u64 start:    every free-running index starts here (exercises the 32-bit
 *                 seq wrap and the 64-bit index wrap); slots hold the
 *                 previous lap's seq, as they would after start messages
 *   then operations, one byte each plus operands (see enum op), until the
 *   input runs out (at most 1024).
 *
 * The call sequences mirror src/msg.c: rpal_recv (peek, consume, ack at
 * once), rpal_recv_msg + rpal_msg_release (ack later), send_prepare + send_one
 * / publish_buf (reserve, drain, quota, claim, publish).
 *
 * Invariants checked beyond "no sanitizer report, no fault":
 *   - ring_peek returns 1, 0 or -EPROTO; after -EPROTO the error is sticky;
 *   - a message ring_peek accepted is INLINE with len <= 40, or BUF with
 *     len > 0 and [addr, addr + len) inside [peer base + 4096, base + size),
 *     and the peer block's nonce was still the hello's;
 *   - ring_readable() true means ring_peek does not answer "empty", and
 *     after a violation ring_readable() stays true (the error is reported);
 *   - acks_drain frees exactly the buffers it returns, advances ack_head by
 *     that many and publishes it; every live allocator block is a buffer the
 *     peer holds (out.count == alloc_nr_blocks) - no double free, no leak;
 *   - ring_reserve never grants a slot the peer has not released
 *     (tail - head_cache <= ring_mask), whatever rx_head the peer writes;
 *   - ack_push either fails with EPROTO or writes inside our ack ring with
 *     ack_tail - peer ack_head <= ack_entries;
 *   - at the end, freeing the buffers still held leaves the allocator empty.
 */
#include <errno.h>
#include <sys/mman.h>

#include "internal.h"
#include "fuzz_common.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Away from ASan's allocator (0x600000000000) and shadow. */
#define FZ_RESERVE  0x500000000000ULL
#define FZ_ARENA    (1ULL << 20)
#define FZ_OUR      (FZ_RESERVE + 1 * FZ_ARENA)
#define FZ_PEER     (FZ_RESERVE + 3 * FZ_ARENA)
#define FZ_BLOCK    (FZ_PEER + RPAL_PAGE)
#define FZ_NONCE    0x0123456789abcdefULL
#define FZ_MAX_OPS  1024
#define FZ_MAX_TOK  256

enum op {
	OP_RAW_WRITE,     /* u16 off, u8 n, n bytes: anywhere in the peer block */
	OP_PUB_INLINE,    /* u8 len, u8 fill: peer publishes an inline slot */
	OP_PUB_BUF,       /* u32 off, u32 len: peer publishes BUF at FZ_PEER + off */
	OP_PUB_RAW,       /* u32 flags, u32 len, u64 addr, u8 seqbias: any slot */
	OP_RECV,          /* u8 count, u8 mode: consume up to count messages */
	OP_RELEASE,       /* u8 count: ack held tokens (rpal_msg_release) */
	OP_SEND_BUF,      /* u16 len: we send a buffer message */
	OP_SEND_INLINE,   /* u8 len: we send an inline message */
	OP_PEER_ACK,      /* u8 which: the peer acks one of our buffers */
	OP_PEER_ACK_RAW,  /* u64 addr, u8 seqbias: the peer acks anything */
	OP_DRAIN,         /* we drain the peer's acks */
	OP_HINTS,         /* u8 ahead: ring_readable, ring_published, peer_update */
	OP_PEER_RXHEAD,   /* u8 mode, u64 v: the peer's rx_head (releases our slots) */
	OP_PEER_ACKHEAD,  /* u8 mode, u64 v: the peer's ack_head (drained our acks) */
	OP_DIE,           /* the peer dies (conn_mark_dead): its buffers come
	                   * back, its mapping stays readable until we close */
	OP_NR
};

struct fz {
	struct rpal_conn c;
	struct rpal_stat_conn st;    /* its counters (no statistics page here) */
	struct rpal_peer peer;
	struct rpal_block *me;
	size_t me_size;
	uint8_t *pblk;               /* writable view of the peer block */
	size_t pb_size;
	uint32_t pring_n, pack_n;
	uint64_t ptail;              /* the peer's producer index */
	uint64_t pack_tail;          /* the peer's ack producer index */
	uint64_t tok[FZ_MAX_TOK];    /* BUF messages received, not yet acked */
	unsigned ntok;
	uint64_t *outs;              /* shadow: our buffers the peer holds */
	uint64_t *out_sizes;         /* and their block sizes */
	unsigned nout;
	bool died;                   /* the peer is gone: it writes nothing more */
};

static void map_fixed(uint64_t addr, size_t len, int prot)
{
	void *p = mmap((void *)(uintptr_t)addr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
		       (prot == PROT_NONE ? MAP_FIXED_NOREPLACE : MAP_FIXED), -1, 0);

	CHECK(p == (void *)(uintptr_t)addr, "cannot map %#llx (+%zu)", (unsigned long long)addr, len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	map_fixed(FZ_RESERVE, 5 * FZ_ARENA, PROT_NONE);
	map_fixed(FZ_OUR, FZ_ARENA, PROT_READ | PROT_WRITE);
	map_fixed(FZ_PEER, FZ_ARENA, PROT_READ | PROT_WRITE);
	/* rpal_g as region.c leaves it, minus the real mappings. */
	rpal_g.cfg.arena_size = FZ_ARENA;
	rpal_g.cfg.ring_entries = 8;
	rpal_g.inited = true;
	return 0;
}

static struct rpal_slot *pslot(struct fz *z, uint64_t idx)
{
	return (struct rpal_slot *)(z->pblk + sizeof(struct rpal_block)) + (idx & (z->pring_n - 1));
}

static struct rpal_ack *pack(struct fz *z, uint64_t idx)
{
	return (struct rpal_ack *)(z->pblk + sizeof(struct rpal_block) + (size_t)z->pring_n * 64) +
	       (idx & (z->pack_n - 1));
}

static struct rpal_block *pblock(struct fz *z)
{
	return (struct rpal_block *)z->pblk;
}

/* The seq a slot holds when index idx is not yet published (previous lap). */
static uint32_t prev_lap(uint64_t idx, uint32_t n)
{
	return idx >= n ? (uint32_t)(idx + 1 - n) : 0;
}

static void setup(struct fz *z, uint8_t geom, uint8_t flags, uint64_t start)
{
	struct rpal_conn *c = &z->c;
	struct rpal_block *pb;
	uint32_t my_ring = 8u << ((geom >> 4) & 3), my_acks = 8u << ((geom >> 6) & 3);
	uint64_t i;

	memset(z, 0, sizeof(*z));
	CHECK(mprotect((void *)(uintptr_t)FZ_PEER, FZ_ARENA, PROT_READ | PROT_WRITE) == 0, "mprotect");
	z->pring_n = 8u << (geom & 3);
	z->pack_n = 8u << ((geom >> 2) & 3);
	z->pblk = (uint8_t *)(uintptr_t)FZ_BLOCK;
	z->pb_size = sizeof(struct rpal_block) + (size_t)z->pring_n * 64 + (size_t)z->pack_n * 16;
	memset(z->pblk, 0, z->pb_size);
	pb = pblock(z);
	pb->magic = RPAL_BLOCK_MAGIC;
	pb->version = RPAL_WIRE_VERSION;
	pb->hdr_size = sizeof(struct rpal_block);
	pb->nonce = FZ_NONCE;
	pb->ring_entries = z->pring_n;
	pb->ack_entries = z->pack_n;
	pb->ring_off = sizeof(struct rpal_block);
	pb->ack_off = (uint32_t)(sizeof(struct rpal_block) + z->pring_n * 64);
	pb->tail = start;
	pb->rx_head = start;
	pb->ack_tail = start;
	pb->ack_head = start;
	for (i = start; i != start + z->pring_n; i++)
		pslot(z, i)->seq = prev_lap(i, z->pring_n);
	for (i = start; i != start + z->pack_n; i++)
		pack(z, i)->seq = prev_lap(i, z->pack_n);
	z->ptail = z->pack_tail = start;

	z->me_size = sizeof(struct rpal_block) + (size_t)my_ring * 64 + (size_t)my_acks * 16;
	z->me = aligned_alloc(64, z->me_size);
	CHECK(z->me, "aligned_alloc");
	memset(z->me, 0, z->me_size);
	z->me->magic = RPAL_BLOCK_MAGIC;
	z->me->nonce = 0x77 | 1;
	z->me->ring_entries = my_ring;
	z->me->ack_entries = my_acks;
	z->me->ring_off = sizeof(struct rpal_block);
	z->me->ack_off = (uint32_t)(sizeof(struct rpal_block) + my_ring * 64);
	z->me->tail = z->me->rx_head = z->me->ack_tail = z->me->ack_head = start;

	z->peer.slot = 1;
	z->peer.pid = 4242;
	z->peer.arena_nonce = 99;
	z->peer.base = FZ_PEER;
	z->peer.size = FZ_ARENA;
	z->peer.refs = 1;
	z->peer.dead = !!(flags & 1);

	/* As conn_create() does, from the hello. */
	c->obj.kind = OBJ_CONN;
	c->fd = -1;
	c->st = &z->st;
	c->me = z->me;
	c->ring = (struct rpal_slot *)((char *)z->me + z->me->ring_off);
	c->ring_mask = my_ring - 1;
	c->acks = (struct rpal_ack *)((char *)z->me + z->me->ack_off);
	c->ack_mask = my_acks - 1;
	c->peer = &z->peer;
	c->pb = (const struct rpal_block *)z->pblk;
	c->pring = (const struct rpal_slot *)(z->pblk + sizeof(struct rpal_block));
	c->pring_mask = z->pring_n - 1;
	c->packs = (const struct rpal_ack *)(z->pblk + sizeof(struct rpal_block) + (size_t)z->pring_n * 64);
	c->pack_mask = z->pack_n - 1;
	c->pnonce = FZ_NONCE;
	c->tail = c->head_cache = c->published = start;
	c->rx_head = c->rx_checked = start;
	c->ack_tail = start;
	store_relaxed(&c->ack_head, start);
	CHECK(bufset_init(&c->out, z->pack_n) == 0, "bufset_init");
	c->out_limit = z->pack_n;
	c->doorbell = c->peer_doorbell = c->pidfd = -1;
	c->last_rung_rx = c->last_rung_tx = UINT64_MAX;
	lock_init(&c->out_lock);
	store_relaxed(&c->dead, !!(flags & 1));
	c->peer_pid = 4242;

	z->outs = calloc(z->pack_n + 1, sizeof(*z->outs));
	z->out_sizes = calloc(z->pack_n + 1, sizeof(*z->out_sizes));
	CHECK(z->outs && z->out_sizes, "calloc");
	rpal_g.alloc = alloc_create((void *)(uintptr_t)(FZ_OUR + RPAL_PAGE), FZ_ARENA - RPAL_PAGE);
	CHECK(rpal_g.alloc, "alloc_create");
}

static void teardown(struct fz *z)
{
	unsigned i;

	/* What a closing connection does with buffers the peer still holds. */
	for (i = 0; i < z->nout; i++)
		CHECK(alloc_put(rpal_g.alloc, (void *)(uintptr_t)z->outs[i]) == (long)z->out_sizes[i],
		      "outstanding buffer %#llx is not live", (unsigned long long)z->outs[i]);
	CHECK(alloc_used(rpal_g.alloc) == 0 && alloc_nr_blocks(rpal_g.alloc) == 0,
	      "allocator not empty after freeing every outstanding buffer: %zu bytes, %llu blocks",
	      alloc_used(rpal_g.alloc), (unsigned long long)alloc_nr_blocks(rpal_g.alloc));
	alloc_destroy(rpal_g.alloc);
	rpal_g.alloc = NULL;
	bufset_free(&z->c.out);
	free(z->outs);
	free(z->out_sizes);
	free(z->me);
}

/* ----------------------------------------------------------- invariants */

static void check_accepted(struct fz *z, const struct rpal_slot *s)
{
	typedef unsigned __int128 u128;

	CHECK(pblock(z)->nonce == FZ_NONCE, "message accepted from a block whose nonce changed");
	if (s->flags == RPAL_SLOT_INLINE) {
		CHECK(s->len <= sizeof(s->data), "inline message of %u bytes accepted", s->len);
	} else {
		CHECK(s->flags == RPAL_SLOT_BUF, "message with flags %#x accepted", s->flags);
		CHECK(s->len > 0, "empty buffer message accepted");
		CHECK(s->addr >= FZ_PEER + RPAL_PAGE && (u128)s->addr + s->len <= (u128)FZ_PEER + FZ_ARENA,
		      "buffer [%#llx, +%u) outside the peer arena [%#llx, +%#llx) accepted",
		      (unsigned long long)s->addr, s->len, (unsigned long long)FZ_PEER, (unsigned long long)FZ_ARENA);
	}
}

static void check_sticky(struct fz *z)
{
	struct rpal_slot s;

	CHECK(z->c.err == EPROTO, "violation without a sticky EPROTO (err %d)", z->c.err);
	CHECK(ring_peek(&z->c, &s, s.data, sizeof(s.data)) == -EPROTO, "error did not stick");
	/* Readable, so that a waiter wakes and reports the error. */
	CHECK(ring_readable(&z->c), "a violation does not read as readable");
	CHECK(!ring_published(&z->c, z->c.rx_head), "published after a violation");
	CHECK(acks_drain(&z->c) == 0, "drained acks after a violation");
}

/* Read the payload as rpal_recv would (a fault here is a bounds bug). */
static void touch_payload(const struct rpal_slot *s)
{
	static uint8_t sink[4096];

	if (s->flags == RPAL_SLOT_INLINE) {
		memcpy(sink, s->data, s->len);
	} else {
		const uint8_t *p = (const uint8_t *)(uintptr_t)s->addr;
		memcpy(sink, p, s->len < sizeof(sink) ? s->len : sizeof(sink));
		sink[0] ^= p[s->len - 1];
	}
}

static void do_ack_push(struct fz *z, uint64_t addr)
{
	struct rpal_conn *c = &z->c;
	uint64_t before = c->ack_tail;
	int r = ack_push(c, addr);

	CHECK(r == 0 || r == -EPROTO, "ack_push returned %d", r);
	if (r == 0) {
		CHECK(c->ack_tail == before + 1 && c->me->ack_tail == c->ack_tail, "ack_push bookkeeping");
		CHECK(c->ack_tail - pblock(z)->ack_head <= (uint64_t)c->ack_mask + 1,
		      "ack ring overrun: ack_tail %llu, peer ack_head %llu", (unsigned long long)c->ack_tail,
		      (unsigned long long)pblock(z)->ack_head);
		CHECK(c->acks[before & c->ack_mask].addr == addr, "ack written elsewhere");
	} else {
		CHECK(conn_err(c) == EPROTO, "ack_push failed without a sticky error");
		CHECK(c->ack_tail == before, "failed ack_push moved ack_tail");
	}
}

static void op_recv(struct fz *z, unsigned count, uint8_t mode)
{
	struct rpal_conn *c = &z->c;
	unsigned i;

	for (i = 0; i < count; i++) {
		struct rpal_slot s;
		uint64_t h = c->rx_head;
		int r = ring_peek(c, &s, s.data, sizeof(s.data));

		CHECK(r == 1 || r == 0 || r == -EPROTO, "ring_peek returned %d", r);
		if (r < 0) {
			check_sticky(z);
			return;
		}
		if (r == 0) {
			CHECK(c->rx_head == h, "empty peek moved rx_head");
			/* recv_empty(): the consumer went idle, a producer stuck on
			 * a full ring must hear; then the end-of-stream check. */
			if (c->rx_checked != c->rx_head)
				notify_peer_tx(c, true);
			(void)peer_update(c);
			return;
		}
		check_accepted(z, &s);
		touch_payload(&s);
		ring_consume(c, s.len);
		CHECK(c->rx_head == h + 1 && c->me->rx_head == c->rx_head, "ring_consume bookkeeping");
		if (s.flags == RPAL_SLOT_BUF) {
			if ((mode & 1) || z->ntok == FZ_MAX_TOK) {
				do_ack_push(z, s.addr);        /* rpal_recv */
				if (!conn_err(c))
					notify_peer_tx(c, true);
			} else {
				z->tok[z->ntok++] = s.addr;    /* rpal_recv_msg */
			}
		} else {
			notify_peer_tx(c, false);
		}
		if (conn_err(c))
			return;
	}
}

static void op_release(struct fz *z, unsigned count)
{
	bool acked = false;

	while (count-- && z->ntok) {
		uint64_t t = z->tok[--z->ntok];
		if (z->c.dead || z->c.err)
			continue;                     /* rpal_msg_release skips */
		do_ack_push(z, t);
		if (z->c.err)
			break;
		acked = true;
	}
	if (acked)
		notify_peer_tx(&z->c, true);
}

static void op_drain(struct fz *z)
{
	struct rpal_conn *c = &z->c;
	uint64_t head = c->ack_head;
	unsigned count = c->out.count, i, j;
	uint64_t held = 0;
	int n = acks_drain(c);

	CHECK(n >= 0 && (unsigned)n <= count, "acks_drain returned %d with %u outstanding", n, count);
	CHECK(c->ack_head == head + (unsigned)n, "ack_head moved by %llu for %d acks",
	      (unsigned long long)(c->ack_head - head), n);
	CHECK(c->out.count == count - (unsigned)n, "bufset count %u after %d acks of %u", c->out.count, n, count);
	if (n)
		CHECK(c->me->ack_head == c->ack_head, "ack_head not published");
	for (i = j = 0; i < z->nout; i++) {
		if (alloc_in_flight(rpal_g.alloc, (void *)(uintptr_t)z->outs[i])) {
			held += z->out_sizes[i];
			z->out_sizes[j] = z->out_sizes[i];
			z->outs[j++] = z->outs[i];
		}
	}
	z->nout = j;
	CHECK(load_relaxed(&c->out_bytes) == held, "the peer holds %llu bytes, out_bytes says %llu",
	      (unsigned long long)held, (unsigned long long)load_relaxed(&c->out_bytes));
	CHECK(z->nout == c->out.count, "%u buffers live and in flight, bufset says %u", z->nout, c->out.count);
	CHECK(alloc_nr_blocks(rpal_g.alloc) == z->nout, "%llu live blocks, %u outstanding",
	      (unsigned long long)alloc_nr_blocks(rpal_g.alloc), z->nout);
}

static int reserve(struct fz *z)
{
	struct rpal_conn *c = &z->c;
	int r = ring_reserve(c);

	CHECK(r == 0 || r == -EAGAIN, "ring_reserve returned %d", r);
	if (r == 0)
		CHECK(c->tail - c->head_cache <= c->ring_mask,
		      "slot granted over unconsumed data: tail %llu, head %llu",
		      (unsigned long long)c->tail, (unsigned long long)c->head_cache);
	return r;
}

static void op_send_buf(struct fz *z, size_t len)
{
	struct rpal_conn *c = &z->c;
	void *p;

	/* send_prepare(WANT_SLOT | WANT_QUOTA) without waiting. */
	if (conn_err(c) || conn_dead(c))
		return;
	if (reserve(z))
		return;
	op_drain(z);
	if (c->out.count >= c->out_limit)
		return;
	/* send_one: arena_alloc, arena_claim, publish_buf. */
	p = alloc_get(rpal_g.alloc, len);
	if (!p)
		return;
	CHECK(alloc_claim(rpal_g.alloc, p, len) == (long)alloc_block_size(len), "claim of a fresh buffer failed");
	CHECK(bufset_add(&c->out, (uintptr_t)p) == 0, "bufset_add within quota failed");
	store_relaxed(&c->out_bytes, load_relaxed(&c->out_bytes) + alloc_block_size(len));
	ring_publish(c, NULL, (uint32_t)len, (uintptr_t)p, RPAL_SLOT_BUF);
	CHECK(z->nout < z->pack_n, "shadow overflow");
	z->out_sizes[z->nout] = alloc_block_size(len);
	z->outs[z->nout++] = (uintptr_t)p;
	notify_peer_rx(c);
}

static void op_send_inline(struct fz *z, uint32_t len)
{
	uint8_t data[RPAL_INLINE_MAX];

	if (z->c.err || z->c.dead || reserve(z))
		return;
	memset(data, 0x5a, sizeof(data));
	ring_publish(&z->c, data, len, 0, RPAL_SLOT_INLINE);
	notify_peer_rx(&z->c);
}

/* conn_mark_dead(): the peer's process exited.  What it published stays
 * mapped and readable (no newcomer can take its slot while we map it). */
static void op_die(struct fz *z)
{
	struct rpal_conn *c = &z->c;
	unsigned i;

	if (!conn_dead(c)) {
		op_drain(z);                    /* acks_drain() first */
		store_relaxed(&c->dead, true);
		z->peer.dead = 1;
		conn_reclaim(c);
		for (i = 0; i < z->nout; i++)   /* conn_reclaim freed them */
			CHECK(!alloc_in_flight(rpal_g.alloc, (void *)(uintptr_t)z->outs[i]), "reclaim missed a buffer");
		z->nout = 0;
		CHECK(alloc_nr_blocks(rpal_g.alloc) == 0, "buffers left after reclaim");
		CHECK(load_relaxed(&c->out_bytes) == 0, "out_bytes %llu after reclaim",
		      (unsigned long long)load_relaxed(&c->out_bytes));
	}
	z->died = true;
}

static void peer_publish(struct fz *z, uint32_t flags, uint32_t len, uint64_t addr, uint8_t fill, uint32_t seqbias)
{
	struct rpal_slot *s = pslot(z, z->ptail);

	s->len = len;
	s->flags = flags;
	s->reserved = 0;
	s->addr = addr;
	memset(s->data, fill, sizeof(s->data));
	s->seq = (uint32_t)(z->ptail + 1 + seqbias);
	z->ptail++;
	pblock(z)->tail = z->ptail;
}

static void peer_ack(struct fz *z, uint64_t addr, uint32_t seqbias)
{
	struct rpal_ack *a = pack(z, z->pack_tail);

	a->addr = addr;
	a->seq = (uint32_t)(z->pack_tail + 1 + seqbias);
	z->pack_tail++;
	pblock(z)->ack_tail = z->pack_tail;
}

static void op_hints(struct fz *z, uint8_t ahead)
{
	struct rpal_conn *c = &z->c;

	(void)ring_published(c, c->rx_head + ahead);
	(void)peer_update(c);
	if (ring_readable(c)) {
		struct rpal_slot s;
		int r = ring_peek(c, &s, s.data, sizeof(s.data));
		CHECK(r != 0, "readable but ring_peek says empty");
		if (r < 0)
			check_sticky(z);
		else
			check_accepted(z, &s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fz z;
	struct cursor cur = { data, size };
	uint8_t geom = cur_u8(&cur), flags = cur_u8(&cur);
	uint64_t start = cur_u64(&cur);
	unsigned nops = 0;

	setup(&z, geom, flags, start);
	while (cur.left && nops++ < FZ_MAX_OPS) {
		uint8_t op = cur_u8(&cur) % OP_NR;

		/* A dead peer writes nothing more. */
		if (z.died && (op == OP_RAW_WRITE || op == OP_PUB_INLINE || op == OP_PUB_BUF ||
				  op == OP_PUB_RAW || op == OP_PEER_ACK || op == OP_PEER_ACK_RAW ||
				  op == OP_PEER_RXHEAD || op == OP_PEER_ACKHEAD))
			op = OP_HINTS;

		switch (op) {
		case OP_RAW_WRITE: {
			size_t off = cur_u16(&cur) % z.pb_size, n = cur_u8(&cur) % 65, i;
			for (i = 0; i < n && off + i < z.pb_size; i++)
				z.pblk[off + i] = cur_u8(&cur);
			break;
		}
		case OP_PUB_INLINE: {
			uint8_t len = cur_u8(&cur), fill = cur_u8(&cur);
			peer_publish(&z, RPAL_SLOT_INLINE, len, 0, fill, 0);
			break;
		}
		case OP_PUB_BUF: {
			uint32_t off = cur_u32(&cur), len = cur_u32(&cur);
			peer_publish(&z, RPAL_SLOT_BUF, len, FZ_PEER + off, 0, 0);
			break;
		}
		case OP_PUB_RAW: {
			uint32_t fl = cur_u32(&cur), len = cur_u32(&cur);
			uint64_t addr = cur_u64(&cur);
			uint8_t bias = cur_u8(&cur);
			peer_publish(&z, fl, len, addr, 0xee, bias < 128 ? 0 : bias);
			break;
		}
		case OP_RECV: {
			uint8_t count = cur_u8(&cur), mode = cur_u8(&cur);
			op_recv(&z, count, mode);
			break;
		}
		case OP_RELEASE:
			op_release(&z, cur_u8(&cur));
			break;
		case OP_SEND_BUF:
			op_send_buf(&z, (size_t)cur_u16(&cur) * 16 + 1);
			break;
		case OP_SEND_INLINE:
			op_send_inline(&z, cur_u8(&cur) % (RPAL_INLINE_MAX + 1));
			break;
		case OP_PEER_ACK: {
			uint8_t which = cur_u8(&cur);
			if (z.nout)
				peer_ack(&z, z.outs[which % z.nout], 0);
			break;
		}
		case OP_PEER_ACK_RAW: {
			uint64_t addr = cur_u64(&cur);
			uint8_t bias = cur_u8(&cur);
			peer_ack(&z, addr, bias < 128 ? 0 : bias);
			break;
		}
		case OP_DRAIN:
			op_drain(&z);
			break;
		case OP_HINTS:
			op_hints(&z, cur_u8(&cur));
			break;
		case OP_PEER_RXHEAD: {
			uint8_t mode = cur_u8(&cur);
			uint64_t v = cur_u64(&cur);
			/* honest: somewhere between our tail - ring and our tail */
			pblock(&z)->rx_head = (mode & 1) ? v : z.c.tail - (v % (z.c.ring_mask + 2));
			break;
		}
		case OP_PEER_ACKHEAD: {
			uint8_t mode = cur_u8(&cur);
			uint64_t v = cur_u64(&cur);
			pblock(&z)->ack_head = (mode & 1) ? v : z.c.ack_tail - (v % (z.c.ack_mask + 2));
			break;
		}
		case OP_DIE:
			op_die(&z);
			break;
		}
	}
	teardown(&z);
	return 0;
}
