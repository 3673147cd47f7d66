// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// A peer that closes while we read its last buffer message may free that
// buffer before we are done: when its arena is short of room it frees its
// oldest lingering blocks at once, or its linger time runs out (PROTOCOL.md
// §7).  It zeroes the block's nonce first, then its allocator hands the
// buffer out again.  A Stream that read part of the message must then fail
// with EPROTO, never return the new contents as the rest of the message.
func TestStreamBufferFreedUnderUs(t *testing.T) {
	testStreamBufferFreed(t, func(b *Conn) {
		b.Close()
		// The peer's arena is short of room: its lingering block goes
		// now, and its allocator hands the buffer out again.
		for b.p.evictLingering() {
		}
	})
}

// A peer that takes us for gone (our socket hung up) frees the buffers we
// hold at once: we may still run and read, so it retires its block first.
func TestStreamBufferFreedByPeerThatThinksUsGone(t *testing.T) {
	testStreamBufferFreed(t, func(b *Conn) { b.markDead(false) })
}

// testStreamBufferFreed has a Stream read the first 1,000 bytes of a 64 KiB
// buffer message, then free (the peer's side) the buffer, which the peer's
// allocator hands out again and is overwritten: the next Read fails with
// EPROTO.
func testStreamBufferFreed(t *testing.T, free func(b *Conn)) {
	a, b := connPair(t)
	msg := make([]byte, 64<<10)
	fill(msg, 7)
	if err := b.Send(msg); err != nil {
		t.Fatal(err)
	}
	s := NewStream(a)
	got := make([]byte, len(msg))
	if n, err := s.Read(got[:1000]); err != nil || n != 1000 {
		t.Fatalf("first read: %d, %v", n, err)
	}
	var addr uint64
	for k := range b.out {
		addr = k
	}
	free(b)
	var buf *Buffer
	for buf == nil || buf.addr != addr {
		nb, err := Alloc(len(msg))
		if err != nil {
			t.Fatalf("the freed buffer %#x never came back: %v", addr, err)
		}
		defer nb.Free()
		buf = nb
	}
	for i := range buf.Bytes() {
		buf.Bytes()[i] = 0xee
	}
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := s.Read(got[1000:])
	if err == nil && !bytes.Equal(got[1000:1000+n], msg[1000:1000+n]) {
		t.Fatalf("%d bytes read with no error, the reused buffer's, not what the peer sent", n)
	}
	var pe *ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, syscall.EPROTO) {
		t.Fatalf("read of the freed buffer: %d bytes, %v; want EPROTO", n, err)
	}
	t.Log(err)
}
