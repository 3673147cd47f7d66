/* SPDX-License-Identifier: MIT */
/*
 * alloc.h - the allocator of our own arena and the sets of buffer
 * addresses (alloc.c): the part of the mem layer that knows nothing of
 * regions, peers or connections.
 */
#ifndef RPAL_ALLOC_H
#define RPAL_ALLOC_H

#include "base.h"

/* ---------------------------------------------------------- allocator */
struct rpal_alloc;
struct rpal_alloc *alloc_create(void *heap, size_t size);
void alloc_destroy(struct rpal_alloc *a);
void *alloc_get(struct rpal_alloc *a, size_t len);
size_t alloc_block_size(size_t len);
long alloc_put(struct rpal_alloc *a, void *p);   /* its size, or -EINVAL if p is not a live block */
bool alloc_owns(struct rpal_alloc *a, const void *p);
long alloc_claim(struct rpal_alloc *a, void *p, size_t len);
void alloc_unclaim(struct rpal_alloc *a, void *p);
bool alloc_in_flight(struct rpal_alloc *a, void *p);
size_t alloc_used(struct rpal_alloc *a);
uint64_t alloc_nr_blocks(struct rpal_alloc *a);

/* ---------------------------------------------------- outstanding set */
/* Our buffers a peer holds, keyed by address: what its acks may name. */
struct bufset {
	uint64_t *keys;     /* 0 empty, 1 tombstone */
	unsigned cap, count, used;
};
int bufset_init(struct bufset *s, unsigned max_items);
void bufset_free(struct bufset *s);
int bufset_add(struct bufset *s, uint64_t key);
bool bufset_del(struct bufset *s, uint64_t key);

#endif /* RPAL_ALLOC_H */
