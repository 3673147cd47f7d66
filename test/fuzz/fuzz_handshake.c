/* SPDX-License-Identifier: MIT */
/*
 * fuzz_handshake.c - libFuzzer harness for the handshake parsers of
 * src/handshake.c: hello_check() (each want_type, every length),
 * hello_check_peer(), block_check() and refuse_parse(), plus round trips
 * through hello_fill() and refuse_fill().
 *
 * Input: byte 0 is a control byte, the rest is a datagram as a peer would
 * send it.
 *   ctl bits 0..1  the want_type of the "main" hello_check (0..3)
 *   ctl bits 2..3  the size of the why/reason buffers: 0, 1, 17 or 256 bytes
 *                  (malloc'd at exactly that size, so ASan sees an overrun)
 *   ctl bit  4     make the hello claim our own pid (hosted mode)
 * When the datagram is longer than 128 bytes, its first 128 bytes are also
 * checked as a hello and the rest is a connection block for block_check().
 *
 * rpal_g is set up by hand (no rpal_init(), nothing is mapped): the default
 * address map, with us in slot 3.
 *
 * Invariants checked beyond "no sanitizer report":
 *   - return values are 0 or the documented negative errnos;
 *   - an accepted hello satisfies every rule of docs/PROTOCOL.md section 3
 *     (recomputed here independently, in 128-bit arithmetic);
 *   - an accepted block matches its hello as section 4 says;
 *   - a parsed REFUSE has an errno in 1..4095 and a terminated reason;
 *   - why/reason strings are NUL-terminated within their buffers;
 *   - the parsers are pure: run twice over a stack painted with different
 *     bytes, they give the same answer and the same sentence (this is how an
 *     uninitialised read shows up without MSan).  RPAL_FUZZ_NO_PURITY=1 in
 *     the environment skips that comparison for hellos shorter than 128
 *     bytes, to fuzz past a known, unfixed instance.
 */
#include <errno.h>
#include <unistd.h>

#include "internal.h"
#include "fuzz_common.h"

#define F_REGION    0x600000000000ULL
#define F_SLOT_SIZE (64ULL << 30)
#define F_NR_SLOTS  256u
#define F_ARENA     (64ULL << 20)
#define F_MY_SLOT   3u

static struct rpal_arena_hdr fake_arena_hdr;
static uint32_t my_pid;
static struct rpal_geom geom;  /* ours: what hellos are checked against */
static int no_purity;   /* RPAL_FUZZ_NO_PURITY=1: skip the stack-garbage check on short hellos */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	rpal_g.cfg.region_base = F_REGION;
	rpal_g.cfg.slot_size = F_SLOT_SIZE;
	rpal_g.cfg.nr_slots = F_NR_SLOTS;
	rpal_g.cfg.arena_size = F_ARENA;
	rpal_g.cfg.ring_entries = 256;
	rpal_g.region = F_REGION;
	rpal_g.region_size = F_SLOT_SIZE * F_NR_SLOTS;
	rpal_g.slot = F_MY_SLOT;
	fake_arena_hdr.magic = RPAL_ARENA_MAGIC;
	fake_arena_hdr.nonce = 0x5eed5eed5eed5eedULL;
	rpal_g.arena = &fake_arena_hdr;   /* geom_self() reads the nonce */
	my_pid = (uint32_t)getpid();
	geom_self(&geom);
	no_purity = getenv("RPAL_FUZZ_NO_PURITY") && *getenv("RPAL_FUZZ_NO_PURITY") == '1';
	return 0;
}

/* Fill a stretch of stack below the caller with one byte value, so that a
 * callee's uninitialised locals hold it.  Not ASan-instrumented: with
 * redzones around junk[], the unpainted right redzone is exactly where a
 * small callee's locals land. */
__attribute__((noinline, no_sanitize("address"))) static void paint_stack(int v)
{
	volatile unsigned char junk[8192];

	memset((void *)junk, v, sizeof(junk));
	__asm__ __volatile__("" : : "r"(junk) : "memory");
}

static char *why_alloc(size_t len)
{
	/* At least one byte so the pointer is valid; ASan sees writes past len. */
	char *p = malloc(len ? len : 1);

	CHECK(p, "malloc");
	memset(p, 'X', len ? len : 1);
	return p;
}

static void why_ok(int ret, const char *why, size_t wl, const char *fn)
{
	if (ret && wl)
		CHECK(terminated(why, wl), "%s: why not NUL-terminated within %zu bytes", fn, wl);
}

static int pow2ok(uint32_t x)
{
	return x >= 8 && x <= 65536 && !(x & (x - 1));
}

/* hello_check twice over differently painted stacks: same result, same text. */
static int hello_check_pure(const void *buf, size_t len, uint16_t want, struct rpal_hello *out,
			    char *why, size_t wl)
{
	struct rpal_hello h1, h2;
	char *why2 = why_alloc(wl);
	int r1, r2;

	memset(&h1, 0xa5, sizeof(h1));
	memset(&h2, 0xa5, sizeof(h2));
	paint_stack(0x00);
	r1 = hello_check(buf, len, want, &h1, why, wl);
	paint_stack(0xff);
	r2 = hello_check(buf, len, want, &h2, why2, wl);
	CHECK(r1 == r2, "hello_check not deterministic: %d vs %d", r1, r2);
	if (no_purity && len < sizeof(struct rpal_hello))
		memcpy(why2, why, wl);   /* a known uninitialised read, not yet fixed: look past it */
	CHECK(r1 == 0 || r1 == -EPROTO, "hello_check returned %d", r1);
	why_ok(r1, why, wl, "hello_check");
	if (r1 && wl)
		CHECK(strcmp(why, why2) == 0,
		      "hello_check's sentence depends on stack garbage (uninitialised read): "
		      "len %zu: \"%s\" vs \"%s\"", len, why, why2);
	if (r1 == 0) {
		CHECK(memcmp(&h1, &h2, sizeof(h1)) == 0, "hello_check output not deterministic");
		CHECK(len == sizeof(struct rpal_hello), "accepted a hello of %zu bytes", len);
		CHECK(memcmp(&h1, buf, sizeof(h1)) == 0, "accepted hello differs from the datagram");
		CHECK(h1.magic == RPAL_HELLO_MAGIC && h1.version == RPAL_WIRE_VERSION &&
		      h1.type == want && h1.size == sizeof(struct rpal_hello), "accepted a malformed hello");
		*out = h1;
	}
	free(why2);
	return r1;
}

/* Every rule of PROTOCOL.md section 3 that needs no descriptor, recomputed. */
static void hello_peer_expect(const struct rpal_hello *h, int ret)
{
	typedef unsigned __int128 u128;
	u128 base, end, bsize;
	int ok = 1;

	if (h->region_base != F_REGION || h->slot_size != F_SLOT_SIZE || h->nr_slots != F_NR_SLOTS)
		ok = 0;
	if (h->slot >= F_NR_SLOTS)
		ok = 0;
	if (h->slot == F_MY_SLOT && h->pid != my_pid)
		ok = 0;
	if (h->arena_size < (1u << 20) || h->arena_size > F_SLOT_SIZE || h->arena_size % 4096)
		ok = 0;
	if (!pow2ok(h->ring_entries) || !pow2ok(h->ack_entries))
		ok = 0;
	base = (u128)h->region_base + (u128)h->slot * h->slot_size;
	end = base + h->arena_size;
	bsize = 768 + (u128)h->ring_entries * 64 + (u128)h->ack_entries * 16;
	if (h->block % 64 || h->block < base + 4096 || (u128)h->block + bsize > end)
		ok = 0;
	if (ok)
		CHECK(ret == 0, "hello_check_peer refused a valid hello (%d)", ret);
	else
		CHECK(ret == -EPROTO || ret == -EADDRINUSE, "hello_check_peer accepted a bad hello (%d)", ret);
	if (ret == -EADDRINUSE)
		CHECK(h->slot == F_MY_SLOT && h->pid != my_pid, "EADDRINUSE for slot %u", h->slot);
}

static void check_block(const struct rpal_hello *h, const uint8_t *p, size_t n, char *why, size_t wl)
{
	/* The block lives in a 64-byte aligned arena: give it its own memory. */
	struct rpal_block *pb = aligned_alloc(64, sizeof(*pb));
	uint64_t bsize = 768 + (uint64_t)h->ring_entries * 64 + (uint64_t)h->ack_entries * 16;
	/* The mapping it is said to lie in: a page before it, and room for
	 * its rings, or (by a bit of the hello) 64 bytes short of that.  Only
	 * the header is read. */
	int short_map = (int)((h->block >> 6) & 1);
	int ret, ok;

	CHECK(pb, "aligned_alloc");
	memset(pb, 0, sizeof(*pb));
	memcpy(pb, p, n < sizeof(*pb) ? n : sizeof(*pb));
	ret = block_check(pb, h, (uintptr_t)pb - 4096, (size_t)(4096 + bsize - (short_map ? 64 : 0)), why, wl);
	CHECK(ret == 0 || ret == -EPROTO, "block_check returned %d", ret);
	why_ok(ret, why, wl, "block_check");
	ok = pb->magic == RPAL_BLOCK_MAGIC && pb->version == RPAL_WIRE_VERSION &&
	     pb->nonce == h->block_nonce && pb->ring_entries == h->ring_entries &&
	     pb->ack_entries == h->ack_entries && pb->hdr_size == 768 && pb->ring_off == 768 &&
	     (uint64_t)pb->ack_off == 768 + (uint64_t)h->ring_entries * 64 && !short_map;
	CHECK(ok == (ret == 0), "block_check said %d for a block that is %s", ret, ok ? "valid" : "invalid");
	free(pb);
}

static void check_refuse(const uint8_t *msg, size_t mlen, size_t wl)
{
	char *reason = why_alloc(wl), *reason2 = why_alloc(wl);
	int err = -12345, err2 = -12345, ret, ret2;

	paint_stack(0x00);
	ret = refuse_parse(msg, mlen, &err, reason, wl);
	paint_stack(0xff);
	ret2 = refuse_parse(msg, mlen, &err2, reason2, wl);
	CHECK(ret == ret2 && err == err2, "refuse_parse not deterministic");
	CHECK(ret == 0 || ret == -EPROTO, "refuse_parse returned %d", ret);
	if (ret == 0) {
		const struct rpal_refuse *r = (const void *)msg;   /* only compared via memcpy */
		struct rpal_refuse copy;

		CHECK(mlen == sizeof(copy), "refuse of %zu bytes accepted", mlen);
		memcpy(&copy, r, sizeof(copy));
		copy.reason[sizeof(copy.reason) - 1] = 0;
		for (char *p = copy.reason; *p; p++)     /* shown as printable ASCII */
			if (*p < 0x20 || *p > 0x7e)
				*p = '?';
		CHECK(copy.magic == RPAL_HELLO_MAGIC && copy.type == RPAL_HS_REFUSE && copy.size == sizeof(copy),
		      "malformed refuse accepted");
		CHECK(err > 0 && err < 4096, "refuse errno %d not clamped", err);
		if (wl) {
			CHECK(terminated(reason, wl), "refuse reason not terminated");
			CHECK(strcmp(reason, reason2) == 0, "refuse reason not deterministic");
			CHECK(strlen(reason) < sizeof(copy.reason), "refuse reason too long");
			CHECK(strncmp(reason, copy.reason, wl - 1) == 0 || strlen(reason) == wl - 1,
			      "refuse reason differs from the datagram");
			for (const char *p = reason; *p; p++)
				CHECK(*p >= 0x20 && *p <= 0x7e, "refuse reason passes byte %#x on", (unsigned char)*p);
		}
	} else {
		CHECK(err == -12345, "refuse_parse wrote *err on failure");
	}
	free(reason);
	free(reason2);
}

/* refuse_fill -> refuse_parse gives back what went in (clamped, truncated,
 * bytes other than printable ASCII shown as '?'). */
static void roundtrip_refuse(const uint8_t *msg, size_t mlen)
{
	struct rpal_refuse r;
	char text[200], back[112];
	int err_in = mlen >= 4 ? (int)(msg[0] | msg[1] << 8 | msg[2] << 16 | (uint32_t)msg[3] << 24) : 0;
	int err_out = 0;
	size_t n = mlen > 4 ? mlen - 4 : 0;

	if (n > sizeof(text) - 1)
		n = sizeof(text) - 1;
	memcpy(text, msg + (mlen > 4 ? 4 : 0), n);
	text[n] = 0;
	refuse_fill(&r, err_in, text);
	CHECK(refuse_parse(&r, sizeof(r), &err_out, back, sizeof(back)) == 0, "own refuse rejected");
	CHECK(err_out == ((err_in > 0 && err_in < 4096) ? err_in : EPROTO), "errno %d came back as %d",
	      err_in, err_out);
	for (size_t i = 0; i < n; i++)
		if (text[i] && (text[i] < 0x20 || text[i] > 0x7e))
			text[i] = '?';
	CHECK(strncmp(back, text, sizeof(back) - 1) == 0, "reason did not round-trip");
}

/* hello_fill -> hello_check gives back the same hello; with a block placed
 * inside our slot's arena, hello_check_peer accepts it (hosted mode: own pid). */
static void roundtrip_hello(const uint8_t *msg, size_t mlen)
{
	struct rpal_block blk;
	struct rpal_hello h, back;
	char service[64], why[128];
	size_t n = mlen < sizeof(service) - 1 ? mlen : sizeof(service) - 1;
	int r;

	memset(&blk, 0, sizeof(blk));
	blk.nonce = 0x1234567 | 1;
	blk.ring_entries = 8u << (mlen % 14);
	blk.ack_entries = 8u << ((mlen / 14) % 14);
	memcpy(service, msg, n);
	service[n] = 0;
	hello_fill(&h, &geom, RPAL_HS_HELLO, &blk, service, 0);
	CHECK(h.service[sizeof(h.service) - 1] == 0, "hello_fill left the service unterminated");
	r = hello_check(&h, sizeof(h), RPAL_HS_HELLO, &back, why, sizeof(why));
	CHECK(r == 0 && memcmp(&h, &back, sizeof(h)) == 0, "own hello rejected: %s", why);
	h.block = F_REGION + (uint64_t)F_MY_SLOT * F_SLOT_SIZE + 4096;
	r = hello_check_peer(&h, &geom, why, sizeof(why));
	hello_peer_expect(&h, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t wlens[4] = { 0, 1, 17, 256 };
	struct rpal_hello h;
	const uint8_t *msg;
	size_t mlen, wl;
	uint8_t ctl;
	char *why;
	uint16_t t;

	if (size < 1)
		return 0;
	ctl = data[0];
	msg = data + 1;
	mlen = size - 1;
	wl = wlens[(ctl >> 2) & 3];
	why = why_alloc(wl);

	/* The datagram as received, against every type (and the ctl's). */
	for (t = 0; t <= 3; t++) {
		if (hello_check_pure(msg, mlen, t, &h, why, wl) == 0 && (t == RPAL_HS_HELLO || t == RPAL_HS_WELCOME)) {
			int r;
			if (ctl & 0x10)
				h.pid = my_pid;
			r = hello_check_peer(&h, &geom, why, wl);
			why_ok(r, why, wl, "hello_check_peer");
			hello_peer_expect(&h, r);
		}
	}

	/* A hello followed by a block: the accept path up to the mapping. */
	if (mlen > sizeof(struct rpal_hello)) {
		uint16_t want = (ctl & 3) ? (ctl & 3) : RPAL_HS_HELLO;
		struct rpal_hello hh;

		memcpy(&hh, msg, sizeof(hh));
		if (ctl & 0x10)
			hh.pid = my_pid;
		/* Checks must not depend on a correct header for the parts they test. */
		if (hello_check_pure(&hh, sizeof(hh), want, &h, why, wl) == 0) {
			int r = hello_check_peer(&h, &geom, why, wl);
			why_ok(r, why, wl, "hello_check_peer");
			hello_peer_expect(&h, r);
			if (r == 0)
				check_block(&h, msg + sizeof(hh), mlen - sizeof(hh), why, wl);
		}
		/* block_check alone, whatever the hello says. */
		check_block(&hh, msg + sizeof(hh), mlen - sizeof(hh), why, wl);
	}

	check_refuse(msg, mlen, wl);
	roundtrip_refuse(msg, mlen);
	roundtrip_hello(msg, mlen);
	free(why);
	return 0;
}
