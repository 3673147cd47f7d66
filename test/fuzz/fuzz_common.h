/* SPDX-License-Identifier: MIT */
/*
 * fuzz_common.h - helpers shared by the libFuzzer harnesses in test/fuzz/.
 *
 * The harnesses reach librpal's internals (src/internal.h) and check
 * invariants with CHECK(), which aborts with a message: libFuzzer then
 * records the input as a crash.  Inputs are read with a cursor that yields
 * zeros once the data runs out, so every byte string is a valid input.
 */
#ifndef RPAL_FUZZ_COMMON_H
#define RPAL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", \
				__FILE__, __LINE__, #cond);                     \
			fprintf(stderr, __VA_ARGS__);                           \
			fputc('\n', stderr);                                    \
			abort();                                                \
		}                                                               \
	} while (0)

struct cursor {
	const uint8_t *p;
	size_t left;
};

static inline uint64_t cur_get(struct cursor *c, unsigned bytes)
{
	uint64_t v = 0;
	unsigned i;

	for (i = 0; i < bytes; i++) {
		uint64_t b = 0;
		if (c->left) {
			b = *c->p++;
			c->left--;
		}
		v |= b << (8 * i);     /* little-endian, like the wire */
	}
	return v;
}
#define cur_u8(c)  ((uint8_t)cur_get((c), 1))
#define cur_u16(c) ((uint16_t)cur_get((c), 2))
#define cur_u32(c) ((uint32_t)cur_get((c), 4))
#define cur_u64(c) cur_get((c), 8)

/* A string is NUL-terminated within len bytes (len > 0). */
static inline int terminated(const char *s, size_t len)
{
	return memchr(s, 0, len) != NULL;
}

#endif
