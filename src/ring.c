/* SPDX-License-Identifier: MIT */
/*
 * ring.c - single-producer/single-consumer rings between two arenas.
 *
 * Thread model: one producer thread and one consumer thread per ring at a
 * time.  The producer writes slots and its tail in its own arena; the
 * consumer writes its head in its own arena.  Neither ever writes the other's
 * memory, so the consumer must treat every slot as hostile input: it copies
 * the slot, then checks sequence, flags, length and buffer bounds.
 *
 * Indices are free-running 64-bit counters masked on access.  A slot is
 * published by storing seq = (index + 1) mod 2^32 with release ordering after
 * its contents (R0); the consumer's acquire load of seq (A0) pairs with it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

struct rpal_block *block_create(unsigned ring_entries, unsigned ack_entries)
{
	size_t ring_off = sizeof(struct rpal_block);
	size_t ack_off = ring_off + (size_t)ring_entries * sizeof(struct rpal_slot);
	size_t size = ack_off + (size_t)ack_entries * sizeof(struct rpal_ack);
	struct rpal_block *b = arena_alloc(size);
	uint64_t nonce = 0;

	if (!b)
		return NULL;
	/* Zeroed slots have seq 0, which never equals an expected index + 1
	 * on the first lap; later laps hold the previous lap's seq. */
	memset(b, 0, size);
	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		nonce = now_ns() ^ (uintptr_t)b;
	b->magic = RPAL_BLOCK_MAGIC;
	b->version = RPAL_WIRE_VERSION;
	b->hdr_size = sizeof(struct rpal_block);
	b->nonce = nonce | 1;
	b->ring_entries = ring_entries;
	b->ack_entries = ack_entries;
	b->ring_off = (uint32_t)ring_off;
	b->ack_off = (uint32_t)ack_off;
	b->tx_cpu = UINT32_MAX;
	b->rx_cpu = UINT32_MAX;
	return b;
}

/* Tell a peer still reading that this block is no longer its connection:
 * before the buffers it may hold go back to the allocator.  The fence
 * keeps the stores that reuse them after the nonce's, as the peer's check
 * after its copy (ring_check_buf_copy) needs. */
void block_retire(struct rpal_block *b)
{
	__atomic_store_n(&b->magic, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&b->nonce, 0, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

void block_destroy(struct rpal_block *b)
{
	block_retire(b);
	arena_free(b);
}

/* ------------------------------------------------------------- producer */

/* ring_reserve() when our copy of the peer's head says the ring is full:
 * read the head itself. */
RPAL_HOT int ring_reserve_slow(struct rpal_conn *c)
{
	/* A1: pairs with the consumer's release of rx_head (R1): once we see
	 * its head move, its reads of those slots are complete. */
	c->head_cache = load_acquire(&c->pb->rx_head);
	if (c->tail - c->head_cache > c->ring_mask + 1) {
		/* The peer claims to have consumed what we never sent. */
		c->head_cache = c->tail - (c->ring_mask + 1);
	}
	return c->tail - c->head_cache <= c->ring_mask ? 0 : -EAGAIN;
}

RPAL_HOT void ring_publish(struct rpal_conn *c, const void *data, uint32_t len, uint64_t addr, uint32_t flags)
{
	struct rpal_slot *s = &c->ring[c->tail & c->ring_mask];

	s->len = len;
	s->flags = flags;
	s->addr = addr;
	if (flags & RPAL_SLOT_INLINE)
		copy_inline(s->data, data, len);
	/* R0: contents before seq. */
	store_release(&s->seq, (uint32_t)(c->tail + 1));
	c->tail++;
	store_relaxed(&c->me->tail, c->tail);
	stat_inc(&c->st->tx.msgs);
	stat_add(&c->st->tx.bytes, len);
}

/* Is a slot free?  For epoll, which looks while another thread may send:
 * from the copies in the blocks, not the sender's own fields.  *head: the
 * peer's consumer position (clamped as ring_reserve() does). */
bool ring_writable(const struct rpal_conn *c, uint64_t *head)
{
	uint64_t tail = load_relaxed(&c->me->tail), h = load_acquire(&c->pb->rx_head);

	if (tail - h > c->ring_mask + 1)
		h = tail - (c->ring_mask + 1);  /* it claims what we never sent */
	if (head)
		*head = h;
	return tail - h <= c->ring_mask;
}

/* ------------------------------------------------------------- consumer */

static int violation(struct rpal_conn *c, const char *what, unsigned long long v)
{
	conn_violation(c);
	return rpal_fail(EPROTO, "peer pid %d broke the protocol: %s (%#llx); connection closed",
			 (int)c->peer_pid, what, v);
}

/*
 * After copying a message out of the peer's buffer: the copy is good if
 * the peer's block is still this connection's.  A closed peer short of
 * room, or past its linger time, frees the buffers we hold (its nonce
 * cleared first, block_retire) and may hand them out again while we copy.
 * 0, or -EPROTO (sticky).
 */
int ring_check_buf_copy(struct rpal_conn *c)
{
	uint64_t nonce;

	/* The copy's loads come before the nonce's. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	nonce = __atomic_load_n(&c->pb->nonce, __ATOMIC_RELAXED);
	if (unlikely(nonce != c->pnonce))
		return violation(c, "connection block freed while its buffer was copied", nonce);
	return 0;
}

/* A buffer over pages not yet known to be written (peer_pages_known()):
 * out of line, so that ring_peek() keeps no registers for the look. */
static RPAL_WARM __attribute__((noinline)) int buf_pages_check(struct rpal_conn *c, const struct rpal_slot *out)
{
	if (peer_pages_check(c->peer, out->addr, out->len))
		return 1;
	return violation(c, "buffer over pages the peer never wrote", out->addr);
}

/*
 * Copy the next slot's header (all but data[]) into *out and validate it;
 * an inline payload goes straight to dst if it fits in room bytes (else the
 * caller fails with EMSGSIZE and the message stays).  Not through out->data:
 * reading a payload back from a copy on the stack, at offsets other than
 * those it was stored at, stalls on store forwarding.  1: a message; 0:
 * empty; -EPROTO: the peer broke the protocol (sticky).
 */
RPAL_HOT int ring_peek(struct rpal_conn *c, struct rpal_slot *out, void *dst, size_t room)
{
	const struct rpal_slot *s;
	uint32_t seq, want = (uint32_t)(c->rx_head + 1);

	if (unlikely(conn_err(c)))
		return -conn_err(c);
	s = &c->pring[c->rx_head & c->pring_mask];
	/* A0: pairs with R0; the contents below are the published ones. */
	seq = load_acquire(&s->seq);
	if (seq != want) {
		if (slot_empty(c, c->rx_head, seq)) {
			/* Empty, unless the block is another connection's by now:
			 * one the peer freed after its close (a lingering block
			 * whose room it needed) can be reused before we read its
			 * end of stream, and its ring and state are not ours.  A
			 * zero nonce: freed, not reused; a slot left in it fails
			 * the check below. */
			uint64_t nonce = __atomic_load_n(&c->pb->nonce, __ATOMIC_ACQUIRE);

			if (unlikely(nonce != c->pnonce && nonce))
				return violation(c, "connection block reused under us", nonce);
			return 0;
		}
		return violation(c, "slot sequence out of order", seq);
	}
	memcpy(out, s, offsetof(struct rpal_slot, data));
	/* The length as copied: the peer may change the slot meanwhile. */
	if (out->flags == RPAL_SLOT_INLINE && out->len <= sizeof(s->data) && out->len <= room)
		copy_inline(dst, s->data, out->len);
	/* The nonce after the copy (as ring_check_buf_copy does): a block
	 * freed and reused while we copied shows here (block_retire). */
	atomic_thread_fence(memory_order_acquire);
	uint64_t nonce = __atomic_load_n(&c->pb->nonce, __ATOMIC_RELAXED);
	if (unlikely(nonce != c->pnonce))
		return violation(c, nonce ? "connection block reused under us" :
				 "connection block freed under us", nonce);
	if (out->flags == RPAL_SLOT_INLINE) {
		if (out->len > sizeof(out->data))
			return violation(c, "inline length too large", out->len);
		if (out->len == 0)      /* would read as end of stream */
			return violation(c, "empty inline message", 0);
	} else if (out->flags == RPAL_SLOT_BUF) {
		uintptr_t lo = c->peer->base + RPAL_PAGE, hi = c->peer->base + c->peer->size;
		if (out->addr < lo || out->addr >= hi || out->len > hi - out->addr)
			return violation(c, "buffer outside the peer's arena", out->addr);
		if (out->len == 0)
			return violation(c, "empty buffer message", 0);
		if (unlikely(!peer_pages_known(c->peer, out->addr, out->len)))
			return buf_pages_check(c, out);
	} else {
		return violation(c, "unknown slot flags", out->flags);
	}
	return 1;
}

/* Has the peer written slot idx (a message or garbage)?  A hint for epoll. */
bool ring_published(struct rpal_conn *c, uint64_t idx)
{
	if (conn_err(c) || idx - ring_head(c) > c->pring_mask)
		return false;   /* an error is reported as EPOLLERR instead */
	return !slot_empty(c, idx, load_relaxed(&c->pring[idx & c->pring_mask].seq));
}

/* ------------------------------------------------------------------ acks */

/* Tell the peer we are done with its buffer.  Our ack ring has room: the
 * peer keeps at most ack_entries buffers with us (checked on receipt). */
RPAL_WARM int ack_push(struct rpal_conn *c, uint64_t addr)
{
	struct rpal_ack *a;

	if (c->ack_tail - load_acquire(&c->pb->ack_head) > c->ack_mask) {
		/* The peer never drained: it sent more buffers than our ring holds. */
		conn_violation(c);
		return rpal_fail(EPROTO, "peer pid %d exceeded its buffer quota", (int)c->peer_pid);
	}
	a = &c->acks[c->ack_tail & c->ack_mask];
	a->addr = addr;
	/* R2: pairs with A2 in acks_drain(). */
	store_release(&a->seq, (uint32_t)(c->ack_tail + 1));
	c->ack_tail++;
	store_release(&c->me->ack_tail, c->ack_tail);
	return 0;
}

/* Free every buffer the peer has acknowledged.  Returns how many. */
RPAL_WARM int acks_drain(struct rpal_conn *c)
{
	uint64_t head = load_relaxed(&c->ack_head), freed = 0;
	int n = 0;

	if (conn_err(c))
		return 0;
	/* Nothing new: the common case, without the lock (the sender and an
	 * epoll waiter may both look). */
	if (load_relaxed(&c->packs[head & c->pack_mask].seq) != (uint32_t)(head + 1))
		return 0;
	lock_take(&c->out_lock);
	for (;;) {
		const struct rpal_ack *a;
		uint32_t seq;
		uint64_t addr;

		head = load_relaxed(&c->ack_head);
		a = &c->packs[head & c->pack_mask];
		seq = load_acquire(&a->seq);    /* A2: pairs with R2 */
		if (seq != (uint32_t)(head + 1))
			break;
		addr = a->addr;
		if (!bufset_del(&c->out, addr)) {
			violation(c, "ack of a buffer it does not hold", addr);
			break;
		}
		freed += (uint64_t)arena_free((void *)(uintptr_t)addr);
		store_relaxed(&c->ack_head, head + 1);
		n++;
	}
	if (n) {
		store_relaxed(&c->out_bytes, load_relaxed(&c->out_bytes) - freed);
		/* Under out_lock: one writer at a time. */
		store_relaxed(&c->st->tx.bufs_out, c->out.count);
		store_release(&c->me->ack_head, load_relaxed(&c->ack_head));
	}
	lock_give(&c->out_lock);
	return n;
}
