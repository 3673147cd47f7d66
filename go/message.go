// SPDX-License-Identifier: MIT

package rpal

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Message is a received message.  A large one is read in place in the
// peer's arena (zero copy, read-only memory: writing it faults) until Ack;
// one of at most InlineMax bytes is copied out of the ring.
type Message struct {
	c      *Conn
	addr   uint64
	n      int
	buf    bool
	peeked bool
	acked  atomic.Bool
	inline [InlineMax]byte
}

// Len returns the payload length.
func (m *Message) Len() int { return m.n }

// InPlace reports whether the payload lies in the peer's arena.
func (m *Message) InPlace() bool { return m.buf }

// Pointer returns the address of the payload: in the peer's arena for a
// buffer message (the same value the sender published), else a private copy.
func (m *Message) Pointer() unsafe.Pointer {
	if m.buf {
		return m.c.peerPtr(m.addr)
	}
	return unsafe.Pointer(&m.inline[0])
}

// Bytes returns the payload.  For an in-place message the slice is
// read-only and valid until Ack (or the connection's Close), or until a
// peer that has closed frees it to make room for a new connection: copy
// what must outlive the peer's close.
func (m *Message) Bytes() []byte {
	if m.buf {
		return unsafe.Slice((*byte)(m.c.peerPtr(m.addr)), m.n)
	}
	return m.inline[:m.n]
}

// Ack gives an in-place message back to its sender, whose buffer is then
// freed.  It is a no-op for a copied or peeked message and after the first
// call.
func (m *Message) Ack() error {
	if !m.buf || m.peeked || m.acked.Swap(true) {
		return nil
	}
	return m.c.opErr("ack", m.c.ackPush(m.addr))
}

// Buffer is memory of this process's arena: a peer that receives it reads
// it at the same address, in place.
type Buffer struct {
	p     *process
	addr  uint64
	n     int
	state atomic.Int32 // 0 owned, 1 sent, 2 freed
}

// Alloc returns n bytes of this process's arena (64-byte aligned) for
// WriteMsg.  n must be in 1..Config.ArenaSize/2 (EINVAL otherwise), as a
// message must; ENOMEM means the arena has no room for it now.
func Alloc(n int) (*Buffer, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	if n <= 0 || uint64(n) > p.cfg.ArenaSize/2 {
		return nil, fmt.Errorf("rpal: alloc of %d bytes: not in 1..%d (half the arena): %w", n, p.cfg.ArenaSize/2, syscall.EINVAL)
	}
	addr, ok := p.allocData(uint64(n), 0) // leaves the reserve for connection blocks
	if !ok && p.reapAcks() {
		addr, ok = p.allocData(uint64(n), 0)
	}
	if !ok {
		return nil, fmt.Errorf("rpal: arena exhausted: no room for %d bytes: %w", n, syscall.ENOMEM)
	}
	return &Buffer{p: p, addr: addr, n: n}, nil
}

// Bytes returns the buffer's memory.
func (b *Buffer) Bytes() []byte { return unsafe.Slice((*byte)(b.p.ptr(b.addr)), b.n) }

// Pointer returns the buffer's address, valid in every process that maps
// this arena.
func (b *Buffer) Pointer() unsafe.Pointer { return b.p.ptr(b.addr) }

// Truncate shortens the length WriteMsg will send; WriteMsg refuses an
// empty message, as Send does.
func (b *Buffer) Truncate(n int) {
	if n >= 0 && n < b.n {
		b.n = n
	}
}

// Free returns an unsent buffer to the allocator; a sent one belongs to the
// peer until it acknowledges it, so Free does nothing then.
func (b *Buffer) Free() {
	if b.state.CompareAndSwap(0, 2) {
		b.p.freeBytes(b.addr)
	}
}
