/* SPDX-License-Identifier: MIT */
/*
 * check_vectors - verify the shared wire-protocol fixtures of test/vectors
 * against the C layout of src/wire.h.  The Go package checks the same files
 * (go/vectors_test.go); test/vectors/README.md says what each one holds.
 *
 *   cc -std=c11 -I src test/vectors/check_vectors.c -o check_vectors
 *   ./check_vectors [DIR [PROTOCOL.md]]   (DIR defaults to test/vectors, then .;
 *                                          with the spec, its stated version too)
 *
 * Exits 0 when every check passes, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

#define REGION 0x200000000000ull
#define SLOT   (64ull << 30)
#define ARENA  (64ull << 20)

static int failures, checks;
static const char *dir;

#define CHECK(cond, ...) do {                                   \
	checks++;                                               \
	if (!(cond)) {                                          \
		failures++;                                     \
		printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
		printf(__VA_ARGS__);                            \
		printf("\n");                                   \
	}                                                       \
} while (0)

/* Read a whole fixture into an 64-byte aligned buffer; returns its size. */
static size_t load(const char *name, void *buf, size_t cap)
{
	char path[512];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f) {
		printf("FAIL cannot open %s\n", path);
		exit(1);
	}
	n = fread(buf, 1, cap, f);
	fclose(f);
	return n;
}

static void check_hello(const char *name, uint16_t type, uint32_t pid, uint32_t slot, uint64_t anonce,
			uint64_t block, uint64_t bnonce, const char *service)
{
	_Alignas(64) unsigned char buf[256];
	struct rpal_hello h;
	size_t n = load(name, buf, sizeof(buf));
	uint64_t base = REGION + slot * SLOT;
	uint64_t bsize = sizeof(struct rpal_block) + 8 * sizeof(struct rpal_slot) + 8 * sizeof(struct rpal_ack);

	CHECK(n == sizeof(h), "%s: %zu bytes, want %zu", name, n, sizeof(h));
	memcpy(&h, buf, sizeof(h));
	CHECK(h.magic == RPAL_HELLO_MAGIC && h.version == RPAL_WIRE_VERSION && h.type == type &&
	      h.size == sizeof(h), "%s: header magic %#x version %u type %u size %u", name, h.magic, h.version, h.type, h.size);
	CHECK(h.features == RPAL_FEATURES_BASE && h.reserved0 == 0, "%s: features/reserved", name);
	CHECK(h.pid == pid && h.slot == slot && h.nr_slots == 256, "%s: pid %u slot %u nr_slots %u", name, h.pid, h.slot, h.nr_slots);
	CHECK(h.region_base == REGION && h.slot_size == SLOT && h.arena_size == ARENA, "%s: geometry", name);
	CHECK(h.arena_nonce == anonce && h.block == block && h.block_nonce == bnonce, "%s: nonces/block", name);
	CHECK(h.ring_entries == 8 && h.ack_entries == 8, "%s: entries", name);
	CHECK(strncmp(h.service, service, sizeof(h.service)) == 0 && h.service[39] == 0, "%s: service", name);
	/* The checks every receiver makes on geometry (docs/PROTOCOL.md §3). */
	CHECK(h.block % RPAL_CACHELINE == 0 && h.block >= base + RPAL_PAGE && h.block < base + h.arena_size &&
	      bsize <= base + h.arena_size - h.block, "%s: block not inside the arena", name);
	printf("ok   %s: %s pid %u slot %u block %#llx\n", name, type == RPAL_HS_HELLO ? "HELLO" : "WELCOME",
	       h.pid, h.slot, (unsigned long long)h.block);
}

static void check_refuse(void)
{
	_Alignas(64) unsigned char buf[256];
	struct rpal_refuse r;
	size_t n = load("refuse.bin", buf, sizeof(buf));

	CHECK(n == sizeof(r), "refuse.bin: %zu bytes", n);
	memcpy(&r, buf, sizeof(r));
	CHECK(r.magic == RPAL_HELLO_MAGIC && r.version == RPAL_WIRE_VERSION && r.type == RPAL_HS_REFUSE &&
	      r.size == sizeof(r), "refuse.bin: header");
	CHECK(r.error == 13, "refuse.bin: error %d, want EACCES (13)", r.error);
	CHECK(memchr(r.reason, 0, sizeof(r.reason)) != NULL &&
	      strcmp(r.reason, "peer pid 4242 uid 1000 gid 1000 is not allowed by policy") == 0,
	      "refuse.bin: reason \"%.112s\"", r.reason);
	printf("ok   refuse.bin: REFUSE errno %d \"%s\"\n", r.error, r.reason);
}

static void check_arena_hdr(void)
{
	_Alignas(64) unsigned char buf[128];
	struct rpal_arena_hdr a;
	size_t n = load("arena_hdr.bin", buf, sizeof(buf));

	CHECK(n == sizeof(a), "arena_hdr.bin: %zu bytes", n);
	memcpy(&a, buf, sizeof(a));
	CHECK(a.magic == RPAL_ARENA_MAGIC && a.version == RPAL_WIRE_VERSION && a.hdr_size == sizeof(a),
	      "arena_hdr.bin: header");
	CHECK(a.slot == 3 && a.pid == 4242 && a.arena_size == ARENA && a.base == REGION + 3 * SLOT &&
	      a.heap_off == RPAL_PAGE && a.nonce == 0x1122334455667788ull, "arena_hdr.bin: fields");
	printf("ok   arena_hdr.bin: slot %u base %#llx nonce %#llx\n", a.slot, (unsigned long long)a.base,
	       (unsigned long long)a.nonce);
}

static void check_block(void)
{
	static _Alignas(64) unsigned char buf[4096];
	const size_t want = sizeof(struct rpal_block) + 8 * sizeof(struct rpal_slot) + 8 * sizeof(struct rpal_ack);
	size_t n = load("block.bin", buf, sizeof(buf));
	const struct rpal_block *b = (const void *)buf;
	const struct rpal_slot *ring;
	const struct rpal_ack *acks;
	uint64_t base = REGION + 3 * SLOT, h;
	unsigned i;

	CHECK(n == want, "block.bin: %zu bytes, want %zu", n, want);
	CHECK(b->magic == RPAL_BLOCK_MAGIC && b->version == RPAL_WIRE_VERSION && b->hdr_size == sizeof(*b),
	      "block.bin: header");
	CHECK(b->nonce == 0x0123456789abcdefull && (b->nonce & 1), "block.bin: nonce");
	CHECK(b->ring_entries == 8 && b->ack_entries == 8 && b->ring_off == sizeof(*b) &&
	      b->ack_off == sizeof(*b) + 8 * sizeof(struct rpal_slot), "block.bin: geometry");
	CHECK(atomic_load(&b->state) == RPAL_STATE_SHUT_WR, "block.bin: state");
	CHECK(atomic_load(&b->tx_cpu) == 1 && atomic_load(&b->rx_cpu) == UINT32_MAX, "block.bin: cpu hints");
	CHECK(atomic_load(&b->wake_seq) == 7, "block.bin: wake_seq");
	CHECK(atomic_load(&b->tail) == 3 && atomic_load(&b->rx_head) == 2 && atomic_load(&b->ack_tail) == 1 &&
	      atomic_load(&b->ack_head) == 0, "block.bin: indices");
	CHECK(atomic_load(&b->waiting) == (3 * RPAL_WAIT_EPOCH | RPAL_WAIT_RX_BELL | RPAL_WAIT_RX), "block.bin: waiting %#llx",
	      (unsigned long long)atomic_load(&b->waiting));

	/* Consume the ring as a peer would (docs/PROTOCOL.md §5). */
	ring = (const void *)(buf + b->ring_off);
	for (h = 0; h < 3; h++) {
		struct rpal_slot s;
		memcpy(&s, &ring[h & 7], sizeof(s));
		CHECK(s.seq == (uint32_t)(h + 1), "block.bin: slot %llu seq %u", (unsigned long long)h, s.seq);
		if (s.flags == RPAL_SLOT_INLINE) {
			CHECK(s.len <= sizeof(s.data), "slot %llu: inline len", (unsigned long long)h);
		} else {
			CHECK(s.flags == RPAL_SLOT_BUF && s.len > 0 && s.addr >= base + RPAL_PAGE &&
			      s.addr < base + ARENA && s.len <= base + ARENA - s.addr, "slot %llu: buf", (unsigned long long)h);
		}
	}
	CHECK(ring[0].len == 5 && memcmp(ring[0].data, "hello", 5) == 0, "slot 0: \"hello\"");
	CHECK(ring[1].len == 4096 && ring[1].addr == base + 0x10000, "slot 1: 4096 bytes at base + 64 KiB");
	for (i = 0; i < 40; i++)
		CHECK(ring[2].data[i] == i, "slot 2: byte %u", i);
	CHECK(ring[2].len == 40, "slot 2: len");
	/* Slot 3 is empty: seq 0 in the first lap. */
	CHECK(ring[3].seq == 0, "slot 3: empty");
	acks = (const void *)(buf + b->ack_off);
	CHECK(acks[0].seq == 1 && acks[0].addr == REGION + 5 * SLOT + 0x20000, "ack 0");
	CHECK(acks[1].seq == 0, "ack 1: empty");
	printf("ok   block.bin: 3 slots (inline \"hello\", BUF 4096 @ %#llx, inline 40), 1 ack, SHUT_WR\n",
	       (unsigned long long)ring[1].addr);
}

/*
 * The specification states the version it describes in its title, in the
 * version rows of its tables and in its versioning section: each must be
 * the one the code speaks, or a second implementation written from the
 * spec cannot connect.
 */
static void check_spec(const char *spec)
{
	char line[1024];
	int seen = 0;
	FILE *f = fopen(spec, "r");

	CHECK(f != NULL, "cannot open %s", spec);
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned v;
		const char *p;

		if (sscanf(line, "# rpal connected-mode protocol, version %u", &v) == 1 ||
		    sscanf(line, "| 4 | u16 | version | %u |", &v) == 1 ||
		    sscanf(line, "| 4 | u16 | version %u |", &v) == 1 ||
		    ((p = strstr(line, "`version` (u16) is ")) && sscanf(p, "`version` (u16) is %u", &v) == 1)) {
			CHECK(v == RPAL_WIRE_VERSION, "%s says version %u, the code speaks %u: %s", spec, v,
			      RPAL_WIRE_VERSION, line);
			seen++;
		}
	}
	fclose(f);
	CHECK(seen >= 4, "%s states its version %d times, expected title, tables and section 8", spec, seen);
}

int main(int argc, char **argv)
{
	char path[512];
	FILE *probe;

	dir = argc > 1 ? argv[1] : "test/vectors";
	snprintf(path, sizeof(path), "%s/hello.bin", dir);
	probe = fopen(path, "rb");
	if (probe)
		fclose(probe);
	else if (argc <= 1)
		dir = ".";
	check_hello("hello.bin", RPAL_HS_HELLO, 4242, 3, 0x1122334455667788ull, REGION + 3 * SLOT + 0x2000,
		    0x0123456789abcdefull, "echo");
	check_hello("welcome.bin", RPAL_HS_WELCOME, 4343, 5, 0x8877665544332211ull, REGION + 5 * SLOT + 0x1000,
		    0xfedcba9876543211ull, "");
	check_refuse();
	check_arena_hdr();
	check_block();
	if (argc > 2)
		check_spec(argv[2]);
	printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "PASS", checks, failures);
	return failures ? 1 : 0;
}
