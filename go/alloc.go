// SPDX-License-Identifier: MIT

package rpal

import (
	"math/bits"
	"sync"
)

// allocator is a binary buddy allocator over the heap of our own arena
// ([heap_off, arena_size) relative to the arena base), with 64-byte minimum
// blocks.  Its metadata is private Go memory: nothing in the arena is ever
// trusted as allocator state, so a pointer handed back by a peer is checked
// against this metadata alone.
//
// Freed blocks of the small orders are kept unmerged in a short stack per
// order and handed out again first: a message-sized block that is
// allocated and freed once per message would otherwise be split off the
// largest free block and merged back into it every time, some twenty map
// operations each way.  The stacks are flushed (merged) before an
// allocation fails.
type allocator struct {
	mu        sync.Mutex
	size      uint64                // arena size
	heap      uint64                // bytes it manages: size - heap_off
	free      []map[uint64]struct{} // per order: offsets of free blocks
	used      map[uint64]uint8      // live block offset -> order
	usedBytes uint64
	cache     [cacheOrders][]uint64 // freed small blocks, not merged yet
}

const (
	minShift    = 6  // 64-byte blocks: one cache line
	cacheOrders = 7  // orders kept unmerged: blocks of 64 B .. 4 KiB
	cacheDepth  = 32 // blocks kept per order
)

func newAllocator(heapOff, size uint64) *allocator {
	a := &allocator{size: size, heap: size - heapOff, used: make(map[uint64]uint8)}
	maxOrder := bits.Len64(size>>minShift) - 1
	a.free = make([]map[uint64]struct{}, maxOrder+1)
	for i := range a.free {
		a.free[i] = make(map[uint64]struct{})
	}
	// Cut the heap into maximal aligned power-of-two blocks.
	for off := heapOff; off < size; {
		k := maxOrder
		for k > 0 && (off%(1<<(k+minShift)) != 0 || off+1<<(k+minShift) > size) {
			k--
		}
		a.free[k][off] = struct{}{}
		off += 1 << (k + minShift)
	}
	return a
}

func orderOf(n uint64) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len64(n-1) - minShift
}

// blockFor is the size of the block an allocation of n bytes takes.
func blockFor(n uint64) uint64 { return 1 << (orderOf(n) + minShift) }

// get returns the offset of a free block of at least n bytes, or false.
func (a *allocator) get(n uint64) (uint64, bool) {
	k := orderOf(n)
	if k >= len(a.free) {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.getLocked(k)
}

// getData is get for a message buffer: the block must leave reserve bytes
// free, and if held (the bytes of this arena the connection's peer holds)
// is not 0, held plus the block may exceed neither budget nor the bytes
// left free after it.  The last rule is a dynamic threshold: a peer that
// stops reading takes at most half of what the others left (see "Memory"
// in rpal(7) for what that leaves after many), and a connection that holds
// nothing is bound by the reserve alone.
func (a *allocator) getData(n, reserve, held, budget uint64) (uint64, bool) {
	k := orderOf(n)
	if k >= len(a.free) {
		return 0, false
	}
	s := uint64(1) << (k + minShift)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.usedBytes+s+reserve > a.heap {
		return 0, false
	}
	if held != 0 && (held+s > budget || held+s > a.heap-a.usedBytes-s) {
		return 0, false
	}
	return a.getLocked(k)
}

// freeBytes is the heap less the bytes handed out.
func (a *allocator) freeBytes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heap - a.usedBytes
}

// getLocked takes a block of order k; caller holds mu.
func (a *allocator) getLocked(k int) (uint64, bool) {
	if k < cacheOrders {
		if c := a.cache[k]; len(c) > 0 {
			off := c[len(c)-1]
			a.cache[k] = c[:len(c)-1]
			a.take(off, k)
			return off, true
		}
	}
	off, ok := a.split(k)
	if !ok && a.flush() {
		off, ok = a.split(k)
	}
	return off, ok
}

// split takes a block of order k from the free lists, splitting a larger
// one if needed; caller holds mu.
func (a *allocator) split(k int) (uint64, bool) {
	j := k
	for j < len(a.free) && len(a.free[j]) == 0 {
		j++
	}
	if j == len(a.free) {
		return 0, false
	}
	var off uint64
	for o := range a.free[j] {
		off = o
		break
	}
	delete(a.free[j], off)
	for j > k {
		j--
		a.free[j][off+1<<(j+minShift)] = struct{}{}
	}
	a.take(off, k)
	return off, true
}

func (a *allocator) take(off uint64, k int) {
	a.used[off] = uint8(k)
	a.usedBytes += 1 << (k + minShift)
}

// put frees the block at off; false if off is not a live block.
func (a *allocator) put(off uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	k8, ok := a.used[off]
	if !ok {
		return false
	}
	delete(a.used, off)
	k := int(k8)
	a.usedBytes -= 1 << (k + minShift)
	if k < cacheOrders && len(a.cache[k]) < cacheDepth {
		a.cache[k] = append(a.cache[k], off)
		return true
	}
	a.merge(off, k)
	return true
}

// merge returns a free block to the free lists, joined with its free
// buddies; caller holds mu.
func (a *allocator) merge(off uint64, k int) {
	for k+1 < len(a.free) {
		buddy := off ^ (1 << (k + minShift))
		if _, free := a.free[k][buddy]; !free {
			break
		}
		delete(a.free[k], buddy)
		off = min(off, buddy)
		k++
	}
	a.free[k][off] = struct{}{}
}

// flush merges every cached block; false if there were none.  Caller holds
// mu.
func (a *allocator) flush() bool {
	found := false
	for k := range a.cache {
		for _, off := range a.cache[k] {
			a.merge(off, k)
			found = true
		}
		a.cache[k] = a.cache[k][:0]
	}
	return found
}

// blockSize is the usable size of the live block at off (0 if none).
func (a *allocator) blockSize(off uint64) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.used[off]
	if !ok {
		return 0
	}
	return 1 << (uint(k) + minShift)
}

func (a *allocator) stats() (usedBytes uint64, blocks int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.usedBytes, len(a.used)
}
