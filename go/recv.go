// SPDX-License-Identifier: MIT

package rpal

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// slotCopy is a validated copy of a peer's ring slot.
type slotCopy struct {
	n     uint32
	flags uint32
	addr  uint64
	data  [InlineMax]byte
}

// peek copies and validates the next slot (ring_peek()): ok false means
// empty; err is a violation (sticky).  Caller holds rxMu.
func (c *Conn) peek(out *slotCopy) (bool, error) {
	if v := c.violation.Load(); v != nil {
		return false, v
	}
	s := unsafe.Add(c.pring, uintptr((c.rxHead&c.pringMask)*slotSize))
	want := uint32(c.rxHead + 1)
	seq := atomic.LoadUint32(c.u32(s, sSeq)) // A0: pairs with R0
	if seq != want {
		if seq == want-uint32(c.pringMask+1) || (seq == 0 && c.rxHead <= c.pringMask) {
			// Empty, unless the block is another connection's by now:
			// one the peer freed after its close (a lingering block
			// whose room it needed) can be reused before we read its
			// end of stream, and its ring and state are not ours.  A
			// zero nonce: freed, not reused; a slot left in it fails
			// the check below.
			if nonce := atomic.LoadUint64(c.u64(c.pb, bNonce)); nonce != c.pnonce && nonce != 0 {
				return false, c.fail("connection block reused under us", nonce)
			}
			return false, nil
		}
		return false, c.fail("slot sequence out of order", uint64(seq))
	}
	out.n = *c.u32(s, sLen)
	out.flags = *c.u32(s, sFlags)
	out.addr = *c.u64(s, sAddr)
	copy(out.data[:], unsafe.Slice((*byte)(unsafe.Add(s, sData)), InlineMax))
	loadFence()
	if nonce := atomic.LoadUint64(c.u64(c.pb, bNonce)); nonce != c.pnonce {
		if nonce == 0 {
			return false, c.fail("connection block freed under us", nonce)
		}
		return false, c.fail("connection block reused under us", nonce)
	}
	switch out.flags {
	case slotInline:
		if out.n > InlineMax {
			return false, c.fail("inline length too large", uint64(out.n))
		}
		// Senders never publish an empty message: delivering one would
		// look like end of stream to a Stream reader, or a 0-byte Recv.
		if out.n == 0 {
			return false, c.fail("empty inline message", 0)
		}
	case slotBuf:
		if out.addr < c.bufLo || out.addr >= c.bufHi || uint64(out.n) > c.bufHi-out.addr {
			return false, c.fail("buffer outside the peer's arena", out.addr)
		}
		if out.n == 0 {
			return false, c.fail("empty buffer message", 0)
		}
		if !c.peer.pagesWritten(out.addr, uint64(out.n)) {
			return false, c.fail("buffer over pages the peer never wrote", out.addr)
		}
	default:
		return false, c.fail("unknown slot flags", uint64(out.flags))
	}
	return true, nil
}

// checkBufCopy says whether a copy just made out of a peer's buffer is
// good: the peer zeroes its block's nonce before it frees the buffers we
// hold (a closed peer short of room, or past its linger time, frees them
// while we read), and its allocator may then hand them out again.  The
// nonce unchanged after the copy means the copy was made before.
func (c *Conn) checkBufCopy() error {
	loadFence()
	if nonce := atomic.LoadUint64(c.u64(c.pb, bNonce)); nonce != c.pnonce {
		return c.fail("connection block freed while its buffer was read", nonce)
	}
	return nil
}

func (c *Conn) consume(n uint32) {
	c.rxHead++
	storeRelease64(c.u64(c.me, bRxHead), c.rxHead) // R1
	st := c.st.Load()
	bump(&st.rx.msgs, 1)
	bump(&st.rx.bytes, uint64(n))
}

// readable reports whether the next slot holds anything but a legal
// "empty": a published message, or garbage that peek will reject (so that a
// sleeping consumer wakes up to report a bad sequence number instead of
// waiting for a message that never comes).
func (c *Conn) readable() bool {
	if c.violation.Load() != nil {
		return false
	}
	s := unsafe.Add(c.pring, uintptr((c.rxHead&c.pringMask)*slotSize))
	seq := atomic.LoadUint32(c.u32(s, sSeq))
	want := uint32(c.rxHead + 1)
	if seq == want {
		return true
	}
	return !(seq == want-uint32(c.pringMask+1) || (seq == 0 && c.rxHead <= c.pringMask))
}

func (c *Conn) rxReady() bool {
	return c.dead.Load() || c.closed.Load() || c.violation.Load() != nil ||
		c.readable() || c.shutRd.Load() || c.updatePeerState()&stateShutWr != 0
}

// next waits for the next valid slot; io.EOF at end of stream.  Caller
// holds rxMu.
func (c *Conn) next(s *slotCopy, block bool) error {
	for {
		if c.closed.Load() {
			return net.ErrClosed
		}
		if c.rxEOF {
			return io.EOF
		}
		ok, err := c.peek(s)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if c.updatePeerState()&stateShutWr != 0 {
			// A3: state was stored after the last slot; look once more.
			if !c.readable() {
				c.rxEOF = true
				return io.EOF
			}
			continue
		}
		if c.shutRd.Load() && !c.readable() {
			c.rxEOF = true
			return io.EOF
		}
		if c.dead.Load() {
			if !c.readable() {
				return fmt.Errorf("peer pid %d is gone: %w", c.peerPid, errReset)
			}
			continue
		}
		if !block {
			return errWouldBlock
		}
		if err := c.wait(waitRX, &c.rxSpin, c.rxReadyFn, &c.rdDeadline, c.rxRaw); err != nil {
			return err
		}
	}
}

// Recv receives one message into b with one copy and returns its length;
// io.EOF at end of stream.  A message larger than b stays queued and Recv
// fails with EMSGSIZE.
func (c *Conn) Recv(b []byte) (int, error) {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	if err := expired(&c.rdDeadline); err != nil {
		return 0, c.opErr("recv", err)
	}
	var s slotCopy
	if err := c.next(&s, true); err != nil {
		return 0, c.opErr("recv", err)
	}
	if int(s.n) > len(b) {
		return 0, c.opErr("recv", fmt.Errorf("message of %d bytes does not fit in %d: %w", s.n, len(b), syscall.EMSGSIZE))
	}
	if s.flags == slotInline {
		copy(b, s.data[:s.n])
		c.consume(s.n)
		c.notifyTX(c.rxHead)
		return int(s.n), nil
	}
	copy(b, unsafe.Slice((*byte)(c.peerPtr(s.addr)), s.n))
	if err := c.checkBufCopy(); err != nil {
		return 0, c.opErr("recv", err)
	}
	c.consume(s.n)
	if err := c.ackPush(s.addr); err != nil {
		return 0, c.opErr("recv", err)
	}
	return int(s.n), nil
}

func (c *Conn) readMsg(peekOnly, block bool) (*Message, error) {
	op := "read"
	if peekOnly {
		op = "peek"
	}
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	if err := expired(&c.rdDeadline); err != nil && block {
		return nil, c.opErr(op, err)
	}
	var s slotCopy
	if err := c.next(&s, block); err != nil {
		return nil, c.opErr(op, err)
	}
	m := &Message{c: c, n: int(s.n), peeked: peekOnly}
	if s.flags == slotInline {
		copy(m.inline[:], s.data[:s.n])
	} else {
		m.buf, m.addr = true, s.addr
	}
	if !peekOnly {
		c.consume(s.n)
		c.notifyTX(c.rxHead)
	}
	return m, nil
}

// ReadMsg returns the next message without copying it, waiting for one;
// io.EOF at end of stream.  An in-place message must be given back with
// Ack.
func (c *Conn) ReadMsg() (*Message, error) { return c.readMsg(false, true) }

// TryReadMsg is ReadMsg without waiting: it fails with syscall.EAGAIN when
// no message is ready.
func (c *Conn) TryReadMsg() (*Message, error) { return c.readMsg(false, false) }

// PeekMsg returns the next message without consuming it, waiting for one:
// the next ReadMsg returns the same message.  A peeked message needs no
// Ack.
func (c *Conn) PeekMsg() (*Message, error) { return c.readMsg(true, true) }
