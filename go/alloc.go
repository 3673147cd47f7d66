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
type allocator struct {
	mu        sync.Mutex
	size      uint64                // arena size
	free      []map[uint64]struct{} // per order: offsets of free blocks
	used      map[uint64]uint8      // live block offset -> order
	usedBytes uint64
}

const minShift = 6 // 64-byte blocks: one cache line

func newAllocator(heapOff, size uint64) *allocator {
	a := &allocator{size: size, used: make(map[uint64]uint8)}
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

// get returns the offset of a free block of at least n bytes, or false.
func (a *allocator) get(n uint64) (uint64, bool) {
	k := orderOf(n)
	if k >= len(a.free) {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
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
	a.used[off] = uint8(k)
	a.usedBytes += 1 << (k + minShift)
	return off, true
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
	return true
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
