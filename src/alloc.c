/* SPDX-License-Identifier: MIT */
/*
 * alloc.c - the allocator of our own arena: a binary buddy over 4 KiB pages,
 * plus one-page slabs for small sizes (64..2048 bytes).  All metadata is
 * private (malloc'd, never in the arena): peers read the arena, and a
 * pointer handed back to us is validated against this metadata alone.
 * Not thread safe; region.c serialises callers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"

#define NIL        UINT32_MAX
#define MAX_ORDER  32
#define NR_CLASSES 6            /* 64, 128, 256, 512, 1024, 2048 */
#define MIN_SHIFT  6

enum page_kind { PG_TAIL = 0, PG_FREE, PG_USED, PG_SLAB };

struct page {
	uint8_t kind;           /* PG_*; only the head page of a run says */
	uint8_t order;          /* run length is 1 << order pages */
	uint8_t cls;            /* PG_SLAB: size class */
	uint8_t pad;
	uint32_t next, prev;    /* free-run list or partial-slab list */
	uint32_t nfree;         /* PG_SLAB: free blocks */
	uint64_t used;          /* PG_SLAB: bitmap of live blocks */
	uint64_t sent;          /* PG_SLAB: bitmap of blocks in flight; PG_USED: bit 0 */
};

struct rpal_alloc {
	char *base;
	uint32_t npages;
	struct page *pg;        /* npages entries, mmap'd lazily */
	uint32_t free_head[MAX_ORDER];
	uint32_t partial[NR_CLASSES];
	size_t used_bytes;
	uint64_t nr_blocks;
};

static void list_push(struct rpal_alloc *a, uint32_t *head, uint32_t i)
{
	a->pg[i].prev = NIL;
	a->pg[i].next = *head;
	if (*head != NIL)
		a->pg[*head].prev = i;
	*head = i;
}

static RPAL_WARM void list_del(struct rpal_alloc *a, uint32_t *head, uint32_t i)
{
	struct page *p = &a->pg[i];

	if (p->prev != NIL)
		a->pg[p->prev].next = p->next;
	else
		*head = p->next;
	if (p->next != NIL)
		a->pg[p->next].prev = p->prev;
	p->next = p->prev = NIL;
}

static void run_free_insert(struct rpal_alloc *a, uint32_t i, unsigned order)
{
	a->pg[i].kind = PG_FREE;
	a->pg[i].order = (uint8_t)order;
	list_push(a, &a->free_head[order], i);
}

struct rpal_alloc *alloc_create(void *heap, size_t size)
{
	struct rpal_alloc *a = calloc(1, sizeof(*a));
	uint32_t i = 0;
	size_t meta;
	unsigned o;

	if (!a)
		return NULL;
	a->base = heap;
	a->npages = (uint32_t)(size / RPAL_PAGE);
	meta = (size_t)a->npages * sizeof(struct page);
	a->pg = mmap(NULL, meta, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->pg == MAP_FAILED) {
		free(a);
		return NULL;
	}
	for (o = 0; o < MAX_ORDER; o++)
		a->free_head[o] = NIL;
	for (o = 0; o < NR_CLASSES; o++)
		a->partial[o] = NIL;
	/* Cover [0, npages) with the largest aligned power-of-two runs. */
	while (i < a->npages) {
		o = 0;
		while (o + 1 < MAX_ORDER && !(i & ((1u << (o + 1)) - 1)) && i + (1u << (o + 1)) <= a->npages)
			o++;
		run_free_insert(a, i, o);
		i += 1u << o;
	}
	return a;
}

void alloc_destroy(struct rpal_alloc *a)
{
	munmap(a->pg, (size_t)a->npages * sizeof(struct page));
	free(a);
}

static RPAL_WARM uint32_t pages_get(struct rpal_alloc *a, unsigned order)
{
	unsigned o = order;
	uint32_t i;

	while (o < MAX_ORDER && a->free_head[o] == NIL)
		o++;
	if (o >= MAX_ORDER)
		return NIL;
	i = a->free_head[o];
	list_del(a, &a->free_head[o], i);
	while (o > order) {     /* split, returning the upper halves */
		o--;
		run_free_insert(a, i + (1u << o), o);
	}
	a->pg[i].kind = PG_USED;
	a->pg[i].order = (uint8_t)order;
	return i;
}

static RPAL_WARM void pages_put(struct rpal_alloc *a, uint32_t i, unsigned order)
{
	while (order + 1 < MAX_ORDER) {
		uint32_t buddy = i ^ (1u << order);
		if (buddy + (1u << order) > a->npages || a->pg[buddy].kind != PG_FREE ||
		    a->pg[buddy].order != order)
			break;
		list_del(a, &a->free_head[order], buddy);
		a->pg[buddy].kind = PG_TAIL;
		if (buddy < i) {
			a->pg[i].kind = PG_TAIL;
			i = buddy;
		}
		order++;
	}
	run_free_insert(a, i, order);
}

static void *slab_get(struct rpal_alloc *a, unsigned cls)
{
	unsigned bsize = 1u << (cls + MIN_SHIFT), nblocks = RPAL_PAGE / bsize, b;
	uint32_t i = a->partial[cls];
	struct page *p;

	if (i == NIL) {
		i = pages_get(a, 0);
		if (i == NIL)
			return NULL;
		p = &a->pg[i];
		p->kind = PG_SLAB;
		p->cls = (uint8_t)cls;
		p->nfree = nblocks;
		p->used = 0;
		list_push(a, &a->partial[cls], i);
	}
	p = &a->pg[i];
	b = (unsigned)__builtin_ctzll(~p->used);
	p->used |= 1ull << b;
	p->sent &= ~(1ull << b);
	if (--p->nfree == 0)
		list_del(a, &a->partial[cls], i);
	a->used_bytes += bsize;
	a->nr_blocks++;
	return a->base + (size_t)i * RPAL_PAGE + (size_t)b * bsize;
}

/* The size of the block alloc_get(len) hands out. */
RPAL_WARM size_t alloc_block_size(size_t len)
{
	size_t size = (size_t)1 << MIN_SHIFT;

	if (len > RPAL_PAGE / 2)
		size = RPAL_PAGE;
	while (size < len)
		size <<= 1;
	return size;
}

RPAL_WARM void *alloc_get(struct rpal_alloc *a, size_t len)
{
	unsigned order = 0, cls;
	uint32_t i;

	if (len == 0)
		len = 1;
	if (len <= RPAL_PAGE / 2) {
		for (cls = 0; (1u << (cls + MIN_SHIFT)) < len; cls++)
			;
		return slab_get(a, cls);
	}
	if (len > (size_t)a->npages * RPAL_PAGE)
		return NULL;
	while (((size_t)RPAL_PAGE << order) < len)
		order++;
	i = pages_get(a, order);
	if (i == NIL)
		return NULL;
	a->pg[i].sent = 0;
	a->used_bytes += (size_t)RPAL_PAGE << order;
	a->nr_blocks++;
	return a->base + (size_t)i * RPAL_PAGE;
}

bool alloc_owns(struct rpal_alloc *a, const void *ptr)
{
	const char *p = ptr;

	return p >= a->base && p < a->base + (size_t)a->npages * RPAL_PAGE;
}

/*
 * Locate the live block that starts at ptr: 0 with *pg and *bit set, or
 * -EINVAL.  The one validity check for every pointer handed back to us.
 */
static RPAL_WARM int block_find(struct rpal_alloc *a, const void *ptr, struct page **pg, uint64_t *bit, size_t *size)
{
	uintptr_t off;
	struct page *p;

	if (!ptr || !alloc_owns(a, ptr))
		return -EINVAL;
	off = (uintptr_t)((const char *)ptr - a->base);
	p = &a->pg[off / RPAL_PAGE];
	if (p->kind == PG_SLAB) {
		unsigned bsize = 1u << (p->cls + MIN_SHIFT);
		if ((off % RPAL_PAGE) % bsize)
			return -EINVAL;
		*bit = 1ull << ((off % RPAL_PAGE) / bsize);
		if (!(p->used & *bit))
			return -EINVAL;
		*size = bsize;
	} else if (p->kind == PG_USED && off % RPAL_PAGE == 0) {
		*bit = 1;
		*size = (size_t)RPAL_PAGE << p->order;
	} else {
		return -EINVAL;
	}
	*pg = p;
	return 0;
}

/* Mark a live block as in flight to a peer: its size, -EINVAL if ptr is
 * no live block or len exceeds it, -EBUSY if it is already in flight. */
RPAL_WARM long alloc_claim(struct rpal_alloc *a, void *ptr, size_t len)
{
	struct page *p;
	uint64_t bit;
	size_t size;

	if (block_find(a, ptr, &p, &bit, &size) || len > size)
		return -EINVAL;
	if (p->sent & bit)
		return -EBUSY;
	p->sent |= bit;
	return (long)size;
}

/* Undo alloc_claim() of a buffer that was not sent after all. */
void alloc_unclaim(struct rpal_alloc *a, void *ptr)
{
	struct page *p;
	uint64_t bit;
	size_t size;

	if (block_find(a, ptr, &p, &bit, &size) == 0)
		p->sent &= ~bit;
}

/* Is this live block in flight? */
bool alloc_in_flight(struct rpal_alloc *a, void *ptr)
{
	struct page *p;
	uint64_t bit;
	size_t size;

	return block_find(a, ptr, &p, &bit, &size) == 0 && (p->sent & bit);
}

/* Free a live block: its size, or -EINVAL. */
RPAL_WARM long alloc_put(struct rpal_alloc *a, void *ptr)
{
	struct page *p;
	uint64_t bit;
	size_t size;
	uint32_t i;

	if (block_find(a, ptr, &p, &bit, &size))
		return -EINVAL;
	i = (uint32_t)(p - a->pg);
	a->used_bytes -= size;
	a->nr_blocks--;
	if (p->kind == PG_SLAB) {
		p->used &= ~bit;
		p->sent &= ~bit;
		if (p->nfree++ == 0)
			list_push(a, &a->partial[p->cls], i);
		if (p->nfree == RPAL_PAGE / size) {
			list_del(a, &a->partial[p->cls], i);
			pages_put(a, i, 0);
		}
		return (long)size;
	}
	pages_put(a, i, p->order);
	return (long)size;
}

size_t alloc_used(struct rpal_alloc *a) { return a->used_bytes; }
uint64_t alloc_nr_blocks(struct rpal_alloc *a) { return a->nr_blocks; }

/* ------------------------------------------------------------------ bufset */

static unsigned hash64(uint64_t k, unsigned mask)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (unsigned)k & mask;
}

int bufset_init(struct bufset *s, unsigned max_items)
{
	unsigned cap = 16;

	while (cap < 2 * max_items)
		cap <<= 1;
	s->keys = calloc(cap, sizeof(*s->keys));
	if (!s->keys)
		return -ENOMEM;
	s->cap = cap;
	s->count = s->used = 0;
	return 0;
}

void bufset_free(struct bufset *s)
{
	free(s->keys);
	s->keys = NULL;
	s->cap = s->count = s->used = 0;
}

/* Rebuild without tombstones; the table never holds more than cap/2 keys. */
static void bufset_rehash(struct bufset *s)
{
	uint64_t *old = s->keys;
	unsigned i, cap = s->cap;

	s->keys = calloc(cap, sizeof(*s->keys));
	if (!s->keys) {         /* keep the old table; it still works */
		s->keys = old;
		return;
	}
	s->used = s->count;
	for (i = 0; i < cap; i++) {
		if (old[i] > 1) {
			unsigned j = hash64(old[i], cap - 1);
			while (s->keys[j])
				j = (j + 1) & (cap - 1);
			s->keys[j] = old[i];
		}
	}
	free(old);
}

RPAL_WARM int bufset_add(struct bufset *s, uint64_t key)
{
	unsigned j;

	if (s->count >= s->cap / 2)
		return -ENOBUFS;
	if (s->used >= s->cap * 3 / 4)
		bufset_rehash(s);
	j = hash64(key, s->cap - 1);
	while (s->keys[j] > 1)
		j = (j + 1) & (s->cap - 1);
	if (s->keys[j] == 0)
		s->used++;
	s->keys[j] = key;
	s->count++;
	return 0;
}

RPAL_WARM bool bufset_del(struct bufset *s, uint64_t key)
{
	unsigned j;

	if (key <= 1 || !s->keys)
		return false;
	j = hash64(key, s->cap - 1);
	while (s->keys[j]) {
		if (s->keys[j] == key) {
			s->keys[j] = 1;
			s->count--;
			return true;
		}
		j = (j + 1) & (s->cap - 1);
	}
	return false;
}
