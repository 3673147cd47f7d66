/* SPDX-License-Identifier: MIT */
/*
 * gen_seeds.c - writes the seed corpora checked in under test/fuzz/corpus/.
 * Built with the harnesses (target fuzz_gen_seeds); run it only to
 * regenerate them:  build-fuzz/fuzz/fuzz_gen_seeds test/fuzz/corpus
 *
 * Handshake seeds use the real struct layouts of src/wire.h; ring seeds use
 * the operation encoding of fuzz_ring.c (keep the two in step).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* Mirrors fuzz_handshake.c / fuzz_ring.c. */
#define F_REGION    0x600000000000ULL
#define F_SLOT_SIZE (64ULL << 30)
#define FZ_ARENA    (1ULL << 20)
#define FZ_PEER     (0x500000000000ULL + 3 * FZ_ARENA)
#define FZ_OUR      (0x500000000000ULL + 1 * FZ_ARENA)
enum op {
	OP_RAW_WRITE, OP_PUB_INLINE, OP_PUB_BUF, OP_PUB_RAW, OP_RECV, OP_RELEASE, OP_SEND_BUF,
	OP_SEND_INLINE, OP_PEER_ACK, OP_PEER_ACK_RAW, OP_DRAIN, OP_HINTS, OP_PEER_RXHEAD,
	OP_PEER_ACKHEAD, OP_DIE,
};

static const char *outdir;

struct buf {
	uint8_t b[8192];
	size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > sizeof(b->b))
		abort();
	memcpy(b->b + b->n, p, n);
	b->n += n;
}
static void u8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void u16(struct buf *b, uint16_t v) { put(b, &v, 2); }
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }

static void save(const char *dir, const char *name, const struct buf *b)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(b->b, 1, b->n, f) != b->n || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* ------------------------------------------------------------ handshake */

static struct rpal_hello good_hello(uint16_t type, unsigned slot)
{
	struct rpal_hello h;
	uint64_t base = F_REGION + (uint64_t)slot * F_SLOT_SIZE;

	memset(&h, 0, sizeof(h));
	h.magic = RPAL_HELLO_MAGIC;
	h.version = RPAL_WIRE_VERSION;
	h.type = type;
	h.size = sizeof(h);
	h.features = RPAL_FEATURES_BASE;
	h.pid = 4242;
	h.slot = slot;
	h.nr_slots = 256;
	h.region_base = F_REGION;
	h.slot_size = F_SLOT_SIZE;
	h.arena_size = 64ULL << 20;
	h.arena_nonce = 0x1122334455667788ULL;
	h.block = base + 4096 + 64 * 3;
	h.block_nonce = 0x0123456789abcdefULL;
	h.ring_entries = 256;
	h.ack_entries = 256;
	strcpy(h.service, "echo");
	return h;
}

static struct rpal_block good_block(const struct rpal_hello *h)
{
	struct rpal_block b;

	memset(&b, 0, sizeof(b));
	b.magic = RPAL_BLOCK_MAGIC;
	b.version = RPAL_WIRE_VERSION;
	b.hdr_size = sizeof(b);
	b.nonce = h->block_nonce;
	b.ring_entries = h->ring_entries;
	b.ack_entries = h->ack_entries;
	b.ring_off = sizeof(b);
	b.ack_off = (uint32_t)(sizeof(b) + h->ring_entries * sizeof(struct rpal_slot));
	return b;
}

/* As refuse_fill() in src/handshake.c (not linked: this tool stands alone). */
static void refuse_make(struct rpal_refuse *r, int err, const char *reason)
{
	memset(r, 0, sizeof(*r));
	r->magic = RPAL_HELLO_MAGIC;
	r->version = RPAL_WIRE_VERSION;
	r->type = RPAL_HS_REFUSE;
	r->size = sizeof(*r);
	r->error = err;
	snprintf(r->reason, sizeof(r->reason), "%s", reason);
}

/* ctl: want type in bits 0-1, why size 256 (3 << 2), bit 4 = own pid */
static void hs_save(const char *name, uint8_t ctl, const void *msg, size_t len)
{
	struct buf b = { .n = 0 };

	u8(&b, ctl);
	put(&b, msg, len);
	save("handshake", name, &b);
}

static void handshake_seeds(void)
{
	struct rpal_hello h;
	struct rpal_block blk;
	struct rpal_refuse r;
	uint8_t both[sizeof(h) + sizeof(blk)];

	h = good_hello(RPAL_HS_HELLO, 5);
	hs_save("hello-valid", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_WELCOME, 7);
	hs_save("welcome-valid", 0x0e, &h, sizeof(h));

	h = good_hello(RPAL_HS_HELLO, 5);
	blk = good_block(&h);
	memcpy(both, &h, sizeof(h));
	memcpy(both + sizeof(h), &blk, sizeof(blk));
	hs_save("hello-with-block-valid", 0x0d, both, sizeof(both));
	blk.ack_off += 64;
	memcpy(both + sizeof(h), &blk, sizeof(blk));
	hs_save("hello-with-block-bad-ackoff", 0x0d, both, sizeof(both));

	h = good_hello(RPAL_HS_HELLO, 3);          /* our slot: hosted mode */
	hs_save("hello-own-slot-hosted", 0x1d, &h, sizeof(h));
	hs_save("hello-own-slot-other-pid", 0x0d, &h, sizeof(h));

	h = good_hello(RPAL_HS_HELLO, 5);
	h.block = F_REGION + 5 * F_SLOT_SIZE + h.arena_size - 64;
	hs_save("hello-block-outside", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	h.ring_entries = 100;
	hs_save("hello-ring-not-pow2", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	h.arena_size = (1u << 20) + 1;
	hs_save("hello-arena-unaligned", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 256);
	hs_save("hello-slot-out-of-range", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	h.magic = 0xdeadbeef;
	hs_save("hello-bad-magic", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	h.version = RPAL_WIRE_VERSION + 1;
	hs_save("hello-version-next", 0x0d, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	hs_save("hello-truncated-64", 0x0d, &h, 64);
	h.size = 64;
	hs_save("hello-size-field-64", 0x05, &h, sizeof(h));
	h = good_hello(RPAL_HS_HELLO, 5);
	memset(both, 0, sizeof(both));
	memcpy(both, &h, sizeof(h));
	hs_save("hello-129-bytes", 0x09, both, sizeof(h) + 1);

	refuse_make(&r, EACCES, "peer uid 1001 is not allowed by policy");
	hs_save("refuse-valid", 0x0f, &r, sizeof(r));
	refuse_make(&r, -5, "negative errno");
	hs_save("refuse-negative-errno", 0x0b, &r, sizeof(r));
	memset(r.reason, 'A', sizeof(r.reason));
	hs_save("refuse-unterminated-reason", 0x07, &r, sizeof(r));
	hs_save("garbage-short", 0x00, "RPAL", 4);
}

/* ----------------------------------------------------------------- ring */

static void ring_hdr(struct buf *b, uint8_t geom, uint8_t flags, uint64_t start)
{
	b->n = 0;
	u8(b, geom);
	u8(b, flags);
	u64(b, start);
}

static void pub_inline(struct buf *b, uint8_t len, uint8_t fill)
{
	u8(b, OP_PUB_INLINE);
	u8(b, len);
	u8(b, fill);
}

static void pub_buf(struct buf *b, uint32_t off, uint32_t len)
{
	u8(b, OP_PUB_BUF);
	u32(b, off);
	u32(b, len);
}

static void recv_(struct buf *b, uint8_t count, uint8_t mode)
{
	u8(b, OP_RECV);
	u8(b, count);
	u8(b, mode);
}

static void ring_seeds(void)
{
	struct buf b;
	int i;

	/* Valid traffic. */
	ring_hdr(&b, 0x00, 0, 0);
	pub_inline(&b, 1, 'a');
	pub_inline(&b, 40, 'b');
	pub_inline(&b, 17, 'c');
	recv_(&b, 8, 1);
	save("ring", "inline-valid", &b);

	ring_hdr(&b, 0x05, 0, 0);
	pub_buf(&b, 8192, 100);
	pub_buf(&b, 0x10000, 4096);
	pub_buf(&b, FZ_ARENA - 4096, 4096);     /* ends exactly at the arena end */
	recv_(&b, 2, 1);                        /* ack at once (rpal_recv) */
	recv_(&b, 2, 0);                        /* hold (rpal_recv_msg) */
	u8(&b, OP_RELEASE);
	u8(&b, 4);
	save("ring", "buf-valid", &b);

	ring_hdr(&b, 0x55, 0, 0xfffffffdULL);   /* 32-bit seq wraps */
	for (i = 0; i < 12; i++)
		pub_inline(&b, (uint8_t)i, (uint8_t)i);
	recv_(&b, 12, 1);
	u8(&b, OP_HINTS);
	u8(&b, 0);
	save("ring", "seq-wrap-32", &b);

	ring_hdr(&b, 0x55, 0, UINT64_MAX - 4);  /* 64-bit index wraps */
	for (i = 0; i < 10; i++) {
		pub_buf(&b, 4096 * (uint32_t)(i + 1), 64);
		recv_(&b, 1, (uint8_t)i);
	}
	u8(&b, OP_RELEASE);
	u8(&b, 10);
	save("ring", "index-wrap-64", &b);

	/* Our side: send buffers, the peer acks them, we drain. */
	ring_hdr(&b, 0x00, 0, 0);
	for (i = 0; i < 3; i++) {
		u8(&b, OP_SEND_BUF);
		u16(&b, (uint16_t)(i * 300));
	}
	u8(&b, OP_SEND_INLINE);
	u8(&b, 12);
	u8(&b, OP_PEER_ACK);
	u8(&b, 0);
	u8(&b, OP_PEER_ACK);
	u8(&b, 1);
	u8(&b, OP_DRAIN);
	u8(&b, OP_PEER_RXHEAD);
	u8(&b, 0);
	u64(&b, 0);
	u8(&b, OP_SEND_BUF);
	u16(&b, 8);
	u8(&b, OP_PEER_ACK);
	u8(&b, 0);
	u8(&b, OP_DRAIN);
	save("ring", "send-ack-drain-valid", &b);

	/* Fill our ring until the peer releases slots. */
	ring_hdr(&b, 0x00, 0, 1000);
	for (i = 0; i < 10; i++) {
		u8(&b, OP_SEND_INLINE);
		u8(&b, 8);
	}
	u8(&b, OP_PEER_RXHEAD);
	u8(&b, 0);
	u64(&b, 3);
	u8(&b, OP_SEND_INLINE);
	u8(&b, 8);
	u8(&b, OP_PEER_RXHEAD);
	u8(&b, 1);
	u64(&b, 5000);                          /* claims more than we sent */
	u8(&b, OP_SEND_INLINE);
	u8(&b, 8);
	save("ring", "ring-full-rxhead", &b);

	/* Broken peers. */
	ring_hdr(&b, 0x00, 0, 0);
	pub_buf(&b, (uint32_t)FZ_ARENA - 10, 100);
	recv_(&b, 1, 1);
	save("ring", "bad-buf-past-end", &b);

	ring_hdr(&b, 0x00, 0, 0);
	pub_buf(&b, 100, 10);                   /* inside the header page */
	recv_(&b, 1, 1);
	save("ring", "bad-buf-in-header-page", &b);

	ring_hdr(&b, 0x00, 0, 0);
	u8(&b, OP_PUB_RAW);
	u32(&b, RPAL_SLOT_BUF);
	u32(&b, 0xffffffffu);
	u64(&b, FZ_PEER + 8192);
	u8(&b, 0);
	recv_(&b, 1, 1);
	save("ring", "bad-buf-len-huge", &b);

	ring_hdr(&b, 0x00, 0, 0);
	u8(&b, OP_PUB_RAW);
	u32(&b, RPAL_SLOT_BUF | RPAL_SLOT_INLINE);
	u32(&b, 4);
	u64(&b, 0);
	u8(&b, 0);
	recv_(&b, 1, 1);
	save("ring", "bad-flags", &b);

	ring_hdr(&b, 0x00, 0, 0);
	pub_inline(&b, 41, 'x');
	recv_(&b, 1, 1);
	save("ring", "bad-inline-41", &b);

	ring_hdr(&b, 0x00, 0, 0);
	pub_inline(&b, 4, 'x');
	u8(&b, OP_RAW_WRITE);                   /* change the block nonce */
	u16(&b, 8);
	u8(&b, 1);
	u8(&b, 0x42);
	recv_(&b, 1, 1);
	save("ring", "bad-nonce-changed", &b);

	ring_hdr(&b, 0x00, 0, 0);
	u8(&b, OP_PUB_RAW);
	u32(&b, RPAL_SLOT_INLINE);
	u32(&b, 4);
	u64(&b, 0);
	u8(&b, 200);                            /* seq from the future */
	recv_(&b, 1, 1);
	save("ring", "bad-seq", &b);

	ring_hdr(&b, 0x00, 0, 0);
	u8(&b, OP_SEND_BUF);
	u16(&b, 10);
	u8(&b, OP_PEER_ACK);
	u8(&b, 0);
	u8(&b, OP_PEER_ACK);                    /* the same buffer twice */
	u8(&b, 0);
	u8(&b, OP_DRAIN);
	save("ring", "bad-double-ack", &b);

	ring_hdr(&b, 0x00, 0, 0);
	u8(&b, OP_SEND_BUF);
	u16(&b, 10);
	u8(&b, OP_PEER_ACK_RAW);
	u64(&b, FZ_OUR + 8192);
	u8(&b, 0);
	u8(&b, OP_DRAIN);
	save("ring", "bad-ack-unknown-addr", &b);

	/* The peer dies; we keep receiving what it published. */
	ring_hdr(&b, 0x00, 0, 0);
	pub_inline(&b, 4, 'x');
	pub_buf(&b, 8192, 64);
	recv_(&b, 1, 0);
	recv_(&b, 1, 0);
	u8(&b, OP_DIE);
	u8(&b, OP_HINTS);
	u8(&b, 1);
	u8(&b, OP_DRAIN);
	u8(&b, OP_RELEASE);
	u8(&b, 1);
	save("ring", "dead-peer", &b);
	/* ... and call rpal_recv on the dead connection: recv_empty() ->
	 * notify_peer_tx() reads the dead peer's block. */
	recv_(&b, 1, 0);
	save("ring", "regress-notify-after-death", &b);

	ring_hdr(&b, 0x01, 0, 0);               /* more buffers than our ack ring */
	for (i = 0; i < 10; i++)
		pub_buf(&b, 8192 + 64 * (uint32_t)i, 64);
	recv_(&b, 10, 1);
	save("ring", "bad-quota-exceeded", &b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	mkdir(outdir, 0755);
	handshake_seeds();
	ring_seeds();
	return 0;
}
