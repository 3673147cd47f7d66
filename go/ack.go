// SPDX-License-Identifier: MIT

package rpal

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// drainAcks frees every buffer the peer acknowledged; caller holds txMu.
func (c *Conn) drainAcks() int {
	if c.violation.Load() != nil {
		return 0
	}
	n := 0
	for {
		a := unsafe.Add(c.packs, uintptr((c.ackHead&c.packMask)*ackSize))
		if atomic.LoadUint32(c.u32(a, aSeq)) != uint32(c.ackHead+1) { // A2
			break
		}
		addr := *c.u64(a, aAddr)
		size, ok := c.out[addr]
		if !ok {
			c.fail("ack of a buffer it does not hold", addr)
			break
		}
		delete(c.out, addr)
		c.outBytes -= size
		c.p.freeBytes(addr)
		c.ackHead++
		n++
	}
	if n > 0 {
		atomic.StoreUint64(c.u64(c.me, bAckHead), c.ackHead)
		c.st.Load().tx.bufsOut.Store(uint64(len(c.out)))
		c.outBytesSeen.Store(c.outBytes)
	}
	return n
}

// reclaim frees every buffer the peer still holds; caller holds txMu.
func (c *Conn) reclaim() {
	for addr := range c.out {
		c.p.freeBytes(addr)
	}
	clear(c.out)
	c.outBytes = 0
	c.st.Load().tx.bufsOut.Store(0)
	c.outBytesSeen.Store(0)
}

// hold records a buffer published to the peer; caller holds txMu.
func (c *Conn) hold(addr, size uint64) {
	c.out[addr] = size
	c.outBytes += size
	c.st.Load().tx.bufsOut.Store(uint64(len(c.out)))
	c.outBytesSeen.Store(c.outBytes)
}

// allocBuf allocates n bytes for a BUF message within the connection's
// share of the arena (allocator.getData), waiting for the peer's acks while
// it holds buffers of ours; caller holds txMu.  One peer that stops reading
// thus cannot take the arena from every other connection.
func (c *Conn) allocBuf(n int) (uint64, error) {
	for {
		if addr, ok := c.p.allocData(uint64(n), c.outBytes); ok {
			return addr, nil
		}
		// Buffers released on other connections come back only when
		// someone looks: look at them all before failing or waiting.
		if c.drainAcks() > 0 || c.p.reapAcks() {
			continue
		}
		if c.outBytes == 0 {
			return 0, fmt.Errorf("no room for a %d-byte message (do peers release what they receive?): %w", n, errArenaFull)
		}
		if err := c.waitAck(); err != nil {
			return 0, err
		}
	}
}

// admit waits until a buffer of block size s, already allocated, fits the
// connection's budget: the peer holds nothing, or what it holds plus s is
// within the budget and the arena's free bytes; caller holds txMu.
func (c *Conn) admit(s uint64) error {
	for {
		if c.outBytes == 0 || (c.outBytes+s <= c.p.cfg.connBudget() && c.outBytes+s <= c.p.alloc.freeBytes()) {
			return nil
		}
		if c.drainAcks() > 0 {
			continue
		}
		if err := c.waitAck(); err != nil {
			return err
		}
	}
}

// waitAck waits for an ack of the peer (or the end of the connection);
// caller holds txMu.
func (c *Conn) waitAck() error {
	// The peer may be waiting for messages we deferred.
	if c.published != c.tail {
		c.notifyRX()
	}
	if err := c.wait(waitTX, &c.txSpin, func() bool { return c.txReady(wantAck) }, &c.wrDeadline, c.txRaw); err != nil {
		return err
	}
	return c.sendError()
}

// ackPush acknowledges a peer buffer through our ack ring (ack_push()).
func (c *Conn) ackPush(addr uint64) error {
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	if c.closed.Load() || c.violation.Load() != nil {
		return nil
	}
	if c.ackTail-atomic.LoadUint64(c.u64(c.pb, bAckHead)) > c.ackMask {
		return c.fail("exceeded its buffer quota", c.ackTail)
	}
	a := unsafe.Add(c.acks, uintptr((c.ackTail&c.ackMask)*ackSize))
	*c.u64(a, aAddr) = addr
	atomic.StoreUint32(c.u32(a, aSeq), uint32(c.ackTail+1)) // R2
	c.ackTail++
	atomic.StoreUint64(c.u64(c.me, bAckTail), c.ackTail)
	w := atomic.LoadUint64(c.u64(c.pb, bWaiting)) // W1 for the TX direction
	if w&waitTX != 0 {
		c.ringBell(w, waitTXFutex, waitTXBell, &c.lastRungTX, &c.st.Load().rx.wakeups)
	}
	return nil
}
