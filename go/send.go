// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// reserve reports whether slot c.tail is free (ring_reserve()).
func (c *Conn) reserve() bool {
	if c.tail-c.headCache <= c.ringMask {
		return true
	}
	c.headCache = atomic.LoadUint64(c.u64(c.pb, bRxHead))
	if c.tail-c.headCache > c.ringMask+1 {
		// The peer claims to have consumed what we never sent.
		c.headCache = c.tail - (c.ringMask + 1)
	}
	return c.tail-c.headCache <= c.ringMask
}

func (c *Conn) publish(data []byte, n uint32, addr uint64, flags uint32) {
	s := unsafe.Add(c.ring, uintptr((c.tail&c.ringMask)*slotSize))
	*c.u32(s, sLen) = n
	*c.u32(s, sFlags) = flags
	*c.u32(s, 12) = 0
	*c.u64(s, sAddr) = addr
	if flags == slotInline {
		copy(unsafe.Slice((*byte)(unsafe.Add(s, sData)), InlineMax), data)
	}
	storeRelease32(c.u32(s, sSeq), uint32(c.tail+1)) // R0: contents before seq
	c.tail++
	storeRelease64(c.u64(c.me, bTail), c.tail)
	st := c.st.Load()
	bump(&st.tx.msgs, 1)
	bump(&st.tx.bytes, uint64(n))
}

// sendError says why we cannot send (send_error()); caller holds txMu.
func (c *Conn) sendError() error {
	if v := c.violation.Load(); v != nil {
		return v
	}
	if c.closed.Load() {
		return net.ErrClosed
	}
	if c.shutWr.Load() {
		return fmt.Errorf("connection was shut down for writing: %w", errPipe)
	}
	if c.updatePeerState()&stateClosed != 0 {
		return fmt.Errorf("peer pid %d closed the connection or shut down reading: %w", c.peerPid, errPipe)
	}
	if c.dead.Load() {
		c.drainAcks()
		c.reclaim()
		return fmt.Errorf("peer pid %d is gone: %w", c.peerPid, errReset)
	}
	return nil
}

const (
	wantSlot  = 1
	wantQuota = 2
	wantAck   = 4
)

func (c *Conn) txReady(what int) bool {
	if c.dead.Load() || c.closed.Load() || c.shutWr.Load() || c.violation.Load() != nil ||
		c.updatePeerState()&stateClosed != 0 {
		return true
	}
	if what&wantSlot != 0 && !c.reserve() {
		return false
	}
	if what&(wantQuota|wantAck) != 0 {
		n := c.drainAcks()
		if what&wantQuota != 0 && len(c.out) >= c.outLimit {
			return false
		}
		if what&wantAck != 0 && n == 0 && len(c.out) > 0 {
			return false
		}
	}
	return true
}

// errNoRoom is what prepare returns, without waiting, where it would wait.
var errNoRoom = errors.New("no room in the ring")

// prepare waits for a free slot (and quota) or fails; without block it
// fails with errNoRoom instead of waiting.  Caller holds txMu.
func (c *Conn) prepare(what int, block bool) error {
	full := false
	for {
		if err := c.sendError(); err != nil {
			return err
		}
		if c.reserve() {
			if what&wantQuota == 0 {
				return nil
			}
			c.drainAcks()
			if len(c.out) < c.outLimit {
				return nil
			}
		}
		if !block {
			return errNoRoom // counted as full by the wait that follows
		}
		if !full {
			full = true
			c.st.Load().tx.ringFull.Add(1)
		}
		// The consumer may be waiting for messages we deferred.
		if c.published != c.tail {
			c.notifyRX()
		}
		if err := c.wait(waitTX, &c.txSpin, func() bool { return c.txReady(what) }, &c.wrDeadline, c.txRaw); err != nil {
			return err
		}
	}
}

// sendLocked is a one-copy send, waiting for room if block; caller holds
// txMu.
func (c *Conn) sendLocked(b []byte, block bool) error {
	if len(b) == 0 {
		return fmt.Errorf("empty messages are not allowed: %w", syscall.EINVAL)
	}
	if len(b) <= InlineMax {
		if err := c.prepare(wantSlot, block); err != nil {
			return err
		}
		c.publish(b, uint32(len(b)), 0, slotInline)
		return nil
	}
	if uint64(len(b)) > c.p.cfg.ArenaSize/2 || uint64(len(b)) > 0xffffffff {
		return fmt.Errorf("message of %d bytes is larger than half the arena: %w", len(b), syscall.EMSGSIZE)
	}
	if err := c.prepare(wantSlot|wantQuota, block); err != nil {
		return err
	}
	addr, err := c.allocBuf(len(b))
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(c.p.ptr(addr)), len(b)), b)
	c.hold(addr, blockFor(uint64(len(b))))
	c.publish(nil, uint32(len(b)), addr, slotBuf)
	return nil
}

// sendSlotsLocked sends b as INLINE messages of up to InlineMax bytes each:
// for a byte stream, where boundaries do not matter, several slots cost
// less than a buffer that must be allocated, acknowledged and freed.
// Returns the bytes sent; caller holds txMu.
func (c *Conn) sendSlotsLocked(b []byte, block bool) (int, error) {
	n := 0
	for n < len(b) {
		k := min(len(b)-n, InlineMax)
		if err := c.prepare(wantSlot, block); err != nil {
			return n, err
		}
		c.publish(b[n:n+k], uint32(k), 0, slotInline)
		n += k
	}
	return n, nil
}

// Send sends one message with one copy: payloads up to InlineMax bytes
// travel in the ring slot, larger ones in a buffer of our arena that the
// peer acknowledges.  It blocks while the ring, the buffer quota or the
// connection's budget (Config.ConnBudget) is full.  An empty message fails
// with EINVAL, one larger than half the arena (Config.ArenaSize) with
// EMSGSIZE.
func (c *Conn) Send(b []byte) error {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if err := expired(&c.wrDeadline); err != nil {
		return c.opErr("send", err)
	}
	err := c.sendLocked(b, true)
	if err == nil {
		c.notifyRX()
	}
	return c.opErr("send", err)
}

// SendBatch sends each of msgs as one message with a single wake-up check.
func (c *Conn) SendBatch(msgs [][]byte) (int, error) {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	n := 0
	var err error
	for _, m := range msgs {
		if err = c.sendLocked(m, true); err != nil {
			break
		}
		n++
	}
	if n > 0 && !c.dead.Load() {
		c.notifyRX()
	}
	return n, c.opErr("send", err)
}

// WriteMsg publishes buf to the peer without copying; ownership passes to the
// peer until it acknowledges the message, then the buffer is freed.  Bytes
// of buf never written read as zeros.  It blocks while the ring, the buffer
// quota or the connection's budget is full.  On error the caller still owns
// buf.
func (c *Conn) WriteMsg(buf *Buffer) error {
	if buf.p != c.p {
		return c.opErr("write", fmt.Errorf("not a live buffer of this process: %w", syscall.EINVAL))
	}
	if buf.n == 0 { // Truncate(0): said as Send says it
		return c.opErr("write", fmt.Errorf("empty messages are not allowed: %w", syscall.EINVAL))
	}
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if err := expired(&c.wrDeadline); err != nil {
		return c.opErr("write", err)
	}
	if err := c.prepare(wantSlot|wantQuota, true); err != nil {
		return c.opErr("write", err)
	}
	if buf.state.Load() != 0 {
		return c.opErr("write", fmt.Errorf("buffer already sent or freed: %w", syscall.EBUSY))
	}
	size := c.p.blockSize(buf.addr)
	if err := c.admit(size); err != nil {
		return c.opErr("write", err)
	}
	if !buf.state.CompareAndSwap(0, 1) {
		return c.opErr("write", fmt.Errorf("buffer already sent or freed: %w", syscall.EBUSY))
	}
	c.hold(buf.addr, size)
	touchPages(buf.addr, uint64(buf.n))
	c.publish(nil, uint32(buf.n), buf.addr, slotBuf)
	c.notifyRX()
	return nil
}

// touchPages makes every page of a buffer we publish exist in our memfd: a
// peer refuses a buffer over pages nobody wrote (pagesWritten), and a
// caller need not have written all of its Buffer.  A read of a page of our
// memfd that is not there allocates it; one that is there costs a load.
func touchPages(addr, n uint64) {
	for p, end := addr, addr+n; p < end; p = (p | (pageSize - 1)) + 1 {
		_ = atomic.LoadUint32((*uint32)(addrPtr(p &^ 3)))
	}
}
