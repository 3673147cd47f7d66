// SPDX-License-Identifier: MIT

package rpal

import (
	"os"
	"sync/atomic"
	"time"
)

// ringBell wakes the peer once per value of its waiting word.  A peer that
// sleeps on a futex waits on our wake_seq: we change that word, then
// FUTEX_WAKE it (a wake landing before its FUTEX_WAIT makes the wait return
// at once).  A peer that sleeps on its doorbell (no futex bit, or the
// bell bit beside it: it has sleepers of both kinds) gets one byte
// (ringSocket); EAGAIN means unread bytes, hence a pending wake-up.
// Reports whether it rang, counting the ring in rung.
func (c *Conn) ringBell(w uint64, futexBit, bellBit uint64, last, rung *atomic.Uint64) bool {
	if last.Swap(w) == w {
		return false
	}
	if w&futexBit != 0 {
		seq := c.u32(c.me, bWakeSeq)
		atomic.AddUint32(seq, 1)
		wakeFutex(seq)
	}
	if w&futexBit == 0 || w&bellBit != 0 {
		ringSocket(c.peerBell)
	}
	rung.Add(1)
	return true
}

// notifyRX wakes the consumer if it advertised sleep; caller holds txMu.
func (c *Conn) notifyRX() {
	c.published = c.tail
	// W1: a sequentially consistent store of tail, after the stores of
	// the slots and of tail (release stores: storeRelease), keeps the
	// load of the peer's waiting word in wakeRX after them (pairs with W0
	// in the peer's wait).  Once per call, not per message.
	atomic.StoreUint64(c.u64(c.me, bTail), c.tail)
	c.wakeRX()
}

// wakeRX rings the peer's receiver if it sleeps.  The caller has made the
// full barrier W1 after what the receiver must see (notifyRX; Close's
// sequentially consistent stores).
func (c *Conn) wakeRX() {
	w := atomic.LoadUint64(c.u64(c.pb, bWaiting))
	st := c.st.Load()
	if w&waitRX == 0 || !c.ringBell(w, waitRXFutex, waitRXBell, &c.lastRungRX, &st.tx.wakeups) {
		bump(&st.tx.wakeupsAvoided, 1) // awake, or woken already
	}
}

// notifyTX wakes a producer waiting for room, once a quarter ring has been
// consumed since the last look: that loses no wake-up (docs/PROTOCOL.md,
// section 6), and keeps the barrier off the per-message path.  Acks look
// at every push (ackPush).  Caller holds rxMu.
func (c *Conn) notifyTX(rxHead uint64) {
	if rxHead-c.rxChecked < (c.pringMask+1)/4 {
		return
	}
	c.rxChecked = rxHead
	// W1: a sequentially consistent store of our head, after its release
	// stores (consume), keeps this load after them.  Caller holds rxMu.
	atomic.StoreUint64(c.u64(c.me, bRxHead), rxHead)
	w := atomic.LoadUint64(c.u64(c.pb, bWaiting))
	if w&waitTX != 0 {
		c.ringBell(w, waitTXFutex, waitTXBell, &c.lastRungTX, &c.st.Load().rx.wakeups)
	}
}

// kickFutex wakes direction dir's waiter if it sleeps on the peer's futex
// word (sleepFutex).  That word is the peer's to change: our own reasons
// to wake the waiter (Close, a new deadline, the peer's death) go through
// a word only we write, which the waiter watches too.  The caller has
// stored what the waiter must see; the waiter marks itself asleep before
// it samples the word and looks, so either it sees the change or we see
// it asleep, and a wake-up that comes before its wait makes the wait
// return at once (the word moved).
func (c *Conn) kickFutex(dir int) {
	atomic.AddUint32(&c.futexKick[dir], 1)
	if c.futexAsleep[dir].Load() {
		wakeFutexPrivate(&c.futexKick[dir])
	}
}

// wakeAll ends, for good, every sleep on our doorbell, once the peer is
// dead or broke the protocol (the sleepers then see that and return): it
// expires our own files' read deadlines.  A ring through the end we handed
// the peer would not do: the peer shares that socket, and may have shut it
// down or filled it.
func (c *Conn) wakeAll() {
	c.kickFutex(0)
	c.kickFutex(1)
	past := time.Unix(1, 0)
	c.bellMu.Lock()
	c.wokeAll = true
	_ = c.rxBell.SetReadDeadline(past)
	_ = c.txBell.SetReadDeadline(past)
	c.bellMu.Unlock()
}

// kick wakes the other direction's waiter, which sleeps on its own file of
// our doorbell: a byte the peer rang for it may have been drained by this
// direction's waiter, and the kernel reports readiness only to the files
// that still find the byte there when the netpoller looks.  Expiring its
// file's deadline wakes it (or, if it has not parked yet, makes it return
// at once) with no system call; takeKick sets the deadline back.
func (c *Conn) kick(dir int) {
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	if c.wokeAll || c.kicked[dir] {
		return
	}
	c.kicked[dir] = true
	_ = c.bellFile(dir).SetReadDeadline(time.Unix(1, 0))
}

// takeKick reports whether a deadline error of direction dir's waiter was
// a kick, and if so restores that direction's deadline.
func (c *Conn) takeKick(dir int) bool {
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	if !c.kicked[dir] {
		return false
	}
	c.kicked[dir] = false
	if c.wokeAll {
		return true
	}
	d := &c.rdDeadline
	if dir == 1 {
		d = &c.wrDeadline
	}
	t := time.Time{}
	if n := d.Load(); n != 0 {
		t = time.Unix(0, n)
	}
	_ = c.bellFile(dir).SetReadDeadline(t)
	return true
}

func (c *Conn) bellFile(dir int) *os.File {
	if dir == 1 {
		return c.txBell
	}
	return c.rxBell
}
