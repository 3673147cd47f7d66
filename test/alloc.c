/* SPDX-License-Identifier: MIT */
/*
 * Description: the arena allocator.  Random allocations of 1 B..1 MiB
 * never overlap and keep their contents; bad, interior and double frees are
 * refused; a buffer is claimed (in flight) at most once; when everything is
 * freed the use counters are zero and the whole heap is one block again.
 */
#include <sys/mman.h>

#include "internal.h"
#include "helpers.h"

#define HEAP (8u << 20)
#define MAXLIVE 512

struct live {
	unsigned char *p;
	size_t len;
	unsigned char tag;
};

int main(void)
{
	unsigned char *heap = mmap(NULL, HEAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct rpal_alloc *a = alloc_create(heap, HEAP);
	static struct live live[MAXLIVE];
	unsigned nlive = 0;
	uint64_t seed = 99;
	long i, iters = t_scaled(200000);

	t_check(a, "alloc_create");
	printf("%ld random allocations and frees, contents checked\n", iters);
	for (i = 0; i < iters; i++) {
		if (nlive < MAXLIVE && (nlive == 0 || t_rand(&seed) % 2)) {
			size_t len = t_rand(&seed) % 4 == 0 ? 1 + t_rand(&seed) % (1 << 20) : 1 + t_rand(&seed) % 3000;
			unsigned char *p = alloc_get(a, len);
			if (!p)
				continue;       /* full is allowed */
			t_check(p >= heap && p + len <= heap + HEAP, "block outside the heap");
			t_check(((uintptr_t)p & 63) == 0, "block not 64-byte aligned");
			for (unsigned k = 0; k < nlive; k++)
				t_check(p + len <= live[k].p || live[k].p + live[k].len <= p, "blocks overlap");
			live[nlive] = (struct live){ p, len, (unsigned char)t_rand(&seed) };
			memset(p, live[nlive].tag, len);
			nlive++;
		} else {
			unsigned k = (unsigned)(t_rand(&seed) % nlive);
			struct live *l = &live[k];
			t_check(l->p[0] == l->tag && l->p[l->len - 1] == l->tag && l->p[l->len / 2] == l->tag,
				"contents of a live block changed");
			if (l->len > 1)
				t_check(alloc_put(a, l->p + 1) == -EINVAL, "interior pointer freed");
			/* Its size, as quotas count it: a power of two, at least 64. */
			t_check(alloc_put(a, l->p) == (long)alloc_block_size(l->len), "free of %zu bytes", l->len);
			t_check(alloc_put(a, l->p) == -EINVAL, "double free accepted");
			live[k] = live[--nlive];
		}
	}
	while (nlive)
		t_check(alloc_put(a, live[--nlive].p) > 0, "final free");
	printf("bad pointers are refused\n");
	t_check(alloc_put(a, heap - 64) == -EINVAL && alloc_put(a, heap + HEAP) == -EINVAL && alloc_put(a, NULL) == -EINVAL,
		"pointer outside the heap accepted");

	printf("claim: once per allocation\n");
	void *b = alloc_get(a, 100);
	t_check(alloc_claim(a, b, 100) == 128, "claim (the block is 128 bytes)");
	t_check(alloc_block_size(1) == 64 && alloc_block_size(2048) == 2048 && alloc_block_size(2049) == 4096 &&
		alloc_block_size((1 << 20) + 16) == 2 << 20, "block sizes");
	t_check(alloc_claim(a, b, 100) == -EBUSY, "claimed twice");
	t_check(alloc_in_flight(a, b), "not in flight");
	t_check(alloc_claim(a, (char *)b + 64, 10) == -EINVAL, "claim of an interior pointer");
	void *c = alloc_get(a, 100);
	t_check(alloc_claim(a, c, 200) == -EINVAL, "claim longer than the block");
	alloc_put(a, b);
	alloc_put(a, c);

	t_check(alloc_used(a) == 0 && alloc_nr_blocks(a) == 0, "used %zu bytes in %lu blocks after freeing all",
		alloc_used(a), (unsigned long)alloc_nr_blocks(a));
	void *all = alloc_get(a, HEAP);
	t_check(all == heap, "the heap did not coalesce back into one block");
	alloc_put(a, all);
	alloc_destroy(a);
	printf("PASS\n");
	return 0;
}
