// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is one rpal connection: a pair of message rings between this
// process's arena and the peer's.  Messages keep their boundaries.  A Conn
// is safe for concurrent use; one send and one receive proceed in parallel,
// other callers of the same direction queue behind them.
//
// Memory ordering: every index and sequence word in an arena is accessed
// with sync/atomic, whose operations are sequentially consistent (the Go
// memory model); on amd64 an atomic store is an XCHG, so the store of a
// slot's seq and tail followed by the load of the peer's waiting word is the
// full barrier W1 of docs/PROTOCOL.md §6, and W0 is the locked RMW on our
// waiting word.
type Conn struct {
	p       *process
	service string
	sock    *net.UnixConn
	pidfd   *os.File

	// My side, in my arena.
	me       unsafe.Pointer
	meAddr   uint64
	ring     unsafe.Pointer
	ringMask uint64
	acks     unsafe.Pointer
	ackMask  uint64

	// The peer's side: geometry copied from its hello, never re-read.
	peer      *peerMap
	pb        unsafe.Pointer
	pring     unsafe.Pointer
	pringMask uint64
	packs     unsafe.Pointer
	packMask  uint64
	pnonce    uint64
	bufLo     uint64 // BUF payloads must lie in [bufLo, bufHi)
	bufHi     uint64

	// Doorbells: the peer's ring end (we ring it), and our end twice (one
	// file per direction, so a receiver and a sender can sleep on it at
	// the same time).  bellMu orders deadline changes on those files
	// against wakeAll, which leaves them expired for good.
	peerBell   int
	drainBuf   [2][1024]byte // per direction: what a waiter reads off our doorbell
	bellMu     sync.Mutex
	wokeAll    bool
	rxBell     *os.File
	txBell     *os.File
	rxRaw      syscall.RawConn
	txRaw      syscall.RawConn
	lastRungRX atomic.Uint64 // the peer's waiting word when we last woke it for RX
	lastRungTX atomic.Uint64
	hup        chan struct{} // closed when the socket watcher ends (peer hang-up)

	txMu      sync.Mutex
	tail      uint64
	headCache uint64
	published uint64
	ackHead   uint64
	out       map[uint64]uint64 // my buffers the peer holds: address -> block size
	outBytes  uint64            // the sum of those block sizes
	outLimit  int
	shutWr    bool
	txSpin    spinner

	rxMu      sync.Mutex
	rxHead    uint64
	rxChecked uint64
	rxSpin    spinner
	rxReadyFn func() bool // c.rxReady, made once: a method value allocates

	ackMu   sync.Mutex
	ackTail uint64

	dead      atomic.Bool
	closed    atomic.Bool
	violation atomic.Pointer[ProtocolError]
	peerState atomic.Uint32

	rdDeadline atomic.Int64 // unix nanoseconds; 0 means none
	wrDeadline atomic.Int64

	peerPid, peerUID, peerGID int
	cpu                       uint32 // the one CPU we are pinned to (our hint), or noCPU

	txMsgs, rxMsgs, wakeups, sleeps atomic.Uint64

	closeOnce sync.Once
}

// ProtocolError says how a peer broke the protocol.  The connection is
// closed for I/O; it unwraps to syscall.EPROTO.
type ProtocolError struct {
	Pid  int
	What string
	Val  uint64
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("peer pid %d broke the protocol: %s (%#x); connection closed", e.Pid, e.What, e.Val)
}
func (e *ProtocolError) Unwrap() error { return syscall.EPROTO }

// errReset and errPipe underlie the errors of a connection whose peer is
// gone or closed (ECONNRESET, EPIPE, as librpal reports them).
var (
	errReset = syscall.ECONNRESET
	errPipe  = syscall.EPIPE
)

func (c *Conn) u32(base unsafe.Pointer, off uintptr) *uint32 {
	return (*uint32)(unsafe.Add(base, off))
}

func (c *Conn) u64(base unsafe.Pointer, off uintptr) *uint64 {
	return (*uint64)(unsafe.Add(base, off))
}

// spinner is the adaptive spin budget of one direction.  It keeps a moving
// average of how long waits last.  A spin that catches the event restores
// the ceiling; so does a wait that had to sleep while the average is within
// the ceiling (spinning the ceiling would catch a typical wait; librpal's
// spin_update() restores on each such wait).  Beyond it the budget halves,
// so a connection whose waits are long (an idle one, a slow peer) soon
// stops burning CPU, while an occasional long wait (a preempted peer) does
// not stop a connection whose waits are short from spinning.  Unlike
// librpal, the budget never drops below a sixteenth of the ceiling: where a
// wake-up costs more than the ceiling (cross-core wake-ups on small VMs take
// 30-60 us), a zero budget would never see a short wait again and would
// stay asleep for good.
type spinner struct{ max, cur, avg time.Duration }

func (s *spinner) init(d time.Duration) { s.max, s.cur, s.avg = d, d, 0 }

// note adds a wait to the average (weight 1/8), counted as at most twice
// the ceiling so that one preemption does not outweigh many short waits.
func (s *spinner) note(waited time.Duration) {
	s.avg += (min(waited, 2*s.max) - s.avg) / 8
}

// hit records a wait that a spin ended after waited.
func (s *spinner) hit(waited time.Duration) {
	s.note(waited)
	s.cur = s.max
}

// slept records a wait that slept, waited long in all.
func (s *spinner) slept(waited time.Duration) {
	s.note(waited)
	if s.avg <= s.max {
		s.cur = s.max
	} else {
		s.cur = max(s.cur/2, s.max/16)
	}
}

// ------------------------------------------------------------ producer

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
	atomic.StoreUint32(c.u32(s, sSeq), uint32(c.tail+1)) // R0: contents before seq
	c.tail++
	atomic.StoreUint64(c.u64(c.me, bTail), c.tail)
	c.txMsgs.Add(1)
}

var oneByte = []byte{0}

// ringSocket sends one byte into a doorbell socket without ever blocking,
// whatever the peer does to the file we share with it (it could clear
// O_NONBLOCK and fill the socket): MSG_DONTWAIT ignores the file's flags,
// and MSG_NOSIGNAL turns a dead peer's SIGPIPE into EPIPE.  A socket, not a
// pipe: a pipe's every read and write takes its mutex, which the peer could
// hold indefinitely (a splice from an idle socket into the pipe waits with
// it held), and the ring would hang.
func ringSocket(fd int) {
	_ = unix.Sendto(fd, oneByte, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
}

// ringBell wakes the peer once per value of its waiting word.  A peer that
// sleeps on a futex waits on our wake_seq: we change that word, then
// FUTEX_WAKE it (a wake landing before its FUTEX_WAIT makes the wait return
// at once).  A peer that sleeps on its doorbell (no futex bit, or the
// bell bit beside it: it has sleepers of both kinds) gets one byte
// (ringSocket); EAGAIN means unread bytes, hence a pending wake-up.
func (c *Conn) ringBell(w uint64, futexBit, bellBit uint64, last *atomic.Uint64) {
	if last.Swap(w) == w {
		return
	}
	if w&futexBit != 0 {
		seq := c.u32(c.me, bWakeSeq)
		atomic.AddUint32(seq, 1)
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(seq)), futexWake,
			uintptr(math.MaxInt32), 0, 0, 0)
	}
	if w&futexBit == 0 || w&bellBit != 0 {
		ringSocket(c.peerBell)
	}
	c.wakeups.Add(1)
}

// notifyRX wakes the consumer if it advertised sleep; caller holds txMu.
func (c *Conn) notifyRX() {
	c.published = c.tail
	c.wakeRX()
}

func (c *Conn) wakeRX() {
	// W1: the sequentially consistent stores of seq and tail come before
	// this load (pairs with W0 in the peer's wait).
	w := atomic.LoadUint64(c.u64(c.pb, bWaiting))
	if w&waitRX != 0 {
		c.ringBell(w, waitRXFutex, waitRXBell, &c.lastRungRX)
	}
}

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
}

// hold records a buffer published to the peer; caller holds txMu.
func (c *Conn) hold(addr, size uint64) {
	c.out[addr] = size
	c.outBytes += size
}

// sendError says why we cannot send (send_error()); caller holds txMu.
func (c *Conn) sendError() error {
	if v := c.violation.Load(); v != nil {
		return v
	}
	if c.closed.Load() {
		return net.ErrClosed
	}
	if c.shutWr {
		return fmt.Errorf("connection was shut down for writing: %w", errPipe)
	}
	if c.updatePeerState()&stateClosed != 0 {
		return fmt.Errorf("peer pid %d closed the connection: %w", c.peerPid, errPipe)
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
	if c.dead.Load() || c.closed.Load() || c.violation.Load() != nil || c.updatePeerState()&stateClosed != 0 {
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

// prepare waits for a free slot (and quota) or fails; caller holds txMu.
func (c *Conn) prepare(what int) error {
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
		// The consumer may be waiting for messages we deferred.
		if c.published != c.tail {
			c.notifyRX()
		}
		if err := c.wait(waitTX, &c.txSpin, func() bool { return c.txReady(what) }, &c.wrDeadline, c.txRaw); err != nil {
			return err
		}
	}
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
		if c.drainAcks() > 0 {
			continue
		}
		if c.outBytes == 0 {
			return 0, fmt.Errorf("arena exhausted: no room for a %d-byte message (do peers release what they receive?): %w", n, syscall.ENOMEM)
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

// sendLocked is a one-copy send; caller holds txMu.
func (c *Conn) sendLocked(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("empty messages are not allowed: %w", syscall.EINVAL)
	}
	if len(b) <= InlineMax {
		if err := c.prepare(wantSlot); err != nil {
			return err
		}
		c.publish(b, uint32(len(b)), 0, slotInline)
		return nil
	}
	if uint64(len(b)) > c.p.cfg.ArenaSize/2 || uint64(len(b)) > 0xffffffff {
		return fmt.Errorf("message of %d bytes is larger than half the arena: %w", len(b), syscall.EMSGSIZE)
	}
	if err := c.prepare(wantSlot | wantQuota); err != nil {
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
func (c *Conn) sendSlotsLocked(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := min(len(b)-n, InlineMax)
		if err := c.prepare(wantSlot); err != nil {
			return n, err
		}
		c.publish(b[n:n+k], uint32(k), 0, slotInline)
		n += k
	}
	return n, nil
}

// ------------------------------------------------------------ consumer

// slotCopy is a validated copy of a peer's ring slot.
type slotCopy struct {
	n     uint32
	flags uint32
	addr  uint64
	data  [InlineMax]byte
}

func (c *Conn) fail(what string, v uint64) error {
	e := &ProtocolError{Pid: c.peerPid, What: what, Val: v}
	if c.violation.CompareAndSwap(nil, e) {
		// Closed for I/O: tell the peer we neither read nor write.
		atomic.OrUint32(c.u32(c.me, bState), stateShutWr|stateClosed)
		c.wakeAll()
	}
	return c.violation.Load()
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
			return false, nil
		}
		return false, c.fail("slot sequence out of order", uint64(seq))
	}
	out.n = *c.u32(s, sLen)
	out.flags = *c.u32(s, sFlags)
	out.addr = *c.u64(s, sAddr)
	copy(out.data[:], unsafe.Slice((*byte)(unsafe.Add(s, sData)), InlineMax))
	if nonce := atomic.LoadUint64(c.u64(c.pb, bNonce)); nonce != c.pnonce {
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
	default:
		return false, c.fail("unknown slot flags", uint64(out.flags))
	}
	return true, nil
}

func (c *Conn) consume() {
	c.rxHead++
	atomic.StoreUint64(c.u64(c.me, bRxHead), c.rxHead) // R1
	c.rxMsgs.Add(1)
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

// notifyTX wakes a producer waiting for room or acks; every quarter ring,
// or when forced (acks, an emptied ring).  Caller holds rxMu or ackMu.
func (c *Conn) notifyTX(force bool, rxHead uint64) {
	if !force && rxHead-c.rxChecked < (c.pringMask+1)/4 {
		return
	}
	if !force {
		c.rxChecked = rxHead
	}
	w := atomic.LoadUint64(c.u64(c.pb, bWaiting)) // after a seq-cst store: W1
	if w&waitTX != 0 {
		c.ringBell(w, waitTXFutex, waitTXBell, &c.lastRungTX)
	}
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
		c.ringBell(w, waitTXFutex, waitTXBell, &c.lastRungTX)
	}
	return nil
}

// updatePeerState caches the peer's lifecycle bits (A3).
func (c *Conn) updatePeerState() uint32 {
	st := c.peerState.Load()
	if st != stateShutWr|stateClosed {
		st |= atomic.LoadUint32(c.u32(c.pb, bState)) & (stateShutWr | stateClosed)
		c.peerState.Store(st)
	}
	return st
}

func (c *Conn) rxReady() bool {
	return c.dead.Load() || c.closed.Load() || c.violation.Load() != nil ||
		c.readable() || c.updatePeerState()&stateShutWr != 0
}

// next waits for the next valid slot; io.EOF at end of stream.  Caller
// holds rxMu.
func (c *Conn) next(s *slotCopy, block bool) error {
	for {
		if c.closed.Load() {
			return net.ErrClosed
		}
		ok, err := c.peek(s)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if c.rxChecked != c.rxHead {
			c.rxChecked = c.rxHead
			c.notifyTX(true, c.rxHead)
		}
		if c.updatePeerState()&stateShutWr != 0 {
			// A3: state was stored after the last slot; look once more.
			if !c.readable() {
				return io.EOF
			}
			continue
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

// expired reports a deadline in the past: as with net.Conn, calls fail
// with os.ErrDeadlineExceeded even when they could proceed.
func expired(d *atomic.Int64) error {
	if v := d.Load(); v != 0 && nowNano() >= v {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// errWouldBlock is returned by the non-blocking calls when nothing is there.
var errWouldBlock = fmt.Errorf("no message ready: %w", syscall.EAGAIN)

// ------------------------------------------------------------ waiting

// wakeAll ends, for good, every sleep on our doorbell, once the peer is
// dead or broke the protocol (the sleepers then see that and return): it
// expires our own files' read deadlines.  A ring through the end we handed
// the peer would not do: the peer shares that socket, and may have shut it
// down or filled it.
func (c *Conn) wakeAll() {
	past := time.Unix(1, 0)
	c.bellMu.Lock()
	c.wokeAll = true
	_ = c.rxBell.SetReadDeadline(past)
	_ = c.txBell.SetReadDeadline(past)
	c.bellMu.Unlock()
}

func nowNano() int64 { return time.Now().UnixNano() }

// yieldEvery is how often a spinning waiter gives its CPU away.  Measured
// with gRPC over Stream on a 2-vCPU VM (go/examples/grpcecho): never
// yielding doubled the p99 of a call; every 25 µs the p99 was below a Unix
// socket's for a few µs more CPU per call; every 10 µs the yields cost more
// than they saved.
const yieldEvery = 25 * time.Microsecond

// osYield gives the CPU to another runnable thread, if any (sched_yield).
func osYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// spinBudget is how long a waiter in direction bit may spin: the adaptive
// budget, or nothing when the peer's thread we wait for runs on the one CPU
// this process is pinned to (spinning there only keeps it off the CPU).
func (c *Conn) spinBudget(bit uint64, sp *spinner) time.Duration {
	if sp.cur == 0 || c.cpu == noCPU {
		return sp.cur
	}
	hint := bTxCPU // an RX waiter waits for the peer's sender
	if bit == waitTX {
		hint = bRxCPU
	}
	if atomic.LoadUint32(c.u32(c.pb, uintptr(hint))) == c.cpu {
		return 0
	}
	return sp.cur
}

// wait spins up to the adaptive budget, then advertises sleep in our
// waiting word and parks the goroutine in the netpoller on our doorbell
// (no OS thread is blocked).  Returns nil when ready() holds, or the
// deadline / close error.
func (c *Conn) wait(bit uint64, sp *spinner, ready func() bool, deadline *atomic.Int64, raw syscall.RawConn) error {
	if ready() {
		return nil
	}
	if d := deadline.Load(); d != 0 && nowNano() >= d {
		return os.ErrDeadlineExceeded
	}
	t0 := time.Now()
	if budget := c.spinBudget(bit, sp); budget > 0 {
		yielded := time.Duration(0)
		for i := 1; ; i++ {
			if ready() {
				sp.hit(time.Since(t0))
				return nil
			}
			if i&63 == 0 {
				now := time.Now()
				spun := now.Sub(t0)
				if spun > budget {
					break
				}
				if d := deadline.Load(); d != 0 && now.UnixNano() >= d {
					return os.ErrDeadlineExceeded
				}
				// Let this process's other goroutines run on our P and,
				// every yieldEvery, other threads on our CPU: a spinner
				// that keeps the thread the peer (or our own next step)
				// needs off the CPU only makes the wait longer.
				if spun-yielded >= yieldEvery {
					yielded = spun
					osYield()
				} else {
					runtime.Gosched()
				}
			}
		}
	}
	waiting := c.u64(c.me, bWaiting)
	// We sleep on the doorbell: the direction's flag with its BELL flag.
	flags := bit | waitRXBell
	if bit == waitTX {
		flags = bit | waitTXBell
	}
	// The closure below would move a local buffer to the heap on every
	// call; each direction has one waiter at a time (rxMu, txMu).
	dir := 0
	if bit == waitTX {
		dir = 1
	}
	buf := &c.drainBuf[dir]
	for {
		if c.closed.Load() {
			return net.ErrClosed
		}
		atomic.AddUint64(waiting, waitEpoch) // W0: a locked RMW
		atomic.OrUint64(waiting, flags)
		if ready() {
			atomic.AndUint64(waiting, ^flags)
			break
		}
		c.sleeps.Add(1)
		first := true
		err := raw.Read(func(fd uintptr) bool {
			// Any wake-up ends this sleep, even one whose byte another
			// waiter of this connection drained, or one meant for the
			// other direction: the peer rings once per value of our
			// waiting word, so the next sleep is advertised afresh.  The
			// first call drains what earlier rings left (the netpoller
			// forgets readiness that predates this call).  A read
			// returning less than asked for has emptied the doorbell;
			// a peer that floods it is read at most 16 KiB of, and what
			// is left costs no wake-up (every send is a new edge).
			rung := !first
			first = false
			for i := 0; i < 16; i++ {
				n, err := unix.Read(int(fd), buf[:])
				if n > 0 {
					rung = true
				}
				if err != nil || n < len(buf) {
					break
				}
			}
			return rung || ready()
		})
		atomic.AndUint64(waiting, ^flags)
		if err != nil && c.closed.Load() {
			return net.ErrClosed
		}
		if ready() { // wakeAll's expired deadline included
			break
		}
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return net.ErrClosed
			}
			return err // os.ErrDeadlineExceeded
		}
	}
	sp.slept(time.Since(t0))
	return nil
}

// ------------------------------------------------------------ peer death

// watch notices the peer going away: a hang-up of the connection socket
// (the peer closed, or exited) or its pidfd becoming readable (it exited,
// even if a child still holds the socket).  docs/PROTOCOL.md §7.
func (c *Conn) watch() {
	c.hup = make(chan struct{})
	go func() {
		defer close(c.hup)
		var buf [hsSize]byte
		for {
			if _, err := c.sock.Read(buf[:]); err != nil {
				if !c.closed.Load() {
					c.markDead(false)
				}
				return
			}
		}
	}()
	raw, err := c.pidfd.SyscallConn()
	if err != nil {
		return
	}
	go func() {
		err := raw.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(pfd, 0)
			return n > 0
		})
		if err == nil {
			c.markDead(true)
		}
	}()
}

// markDead records that the peer is gone.  Only a pidfd says its process
// exited (then its mapping is a dead incarnation's, kept until our last
// connection to it is released); a hang-up concerns this connection alone.
func (c *Conn) markDead(processExited bool) {
	if processExited {
		c.p.markPeerDead(c.peer)
	}
	if c.dead.Swap(true) {
		return
	}
	if c.txMu.TryLock() {
		// Take every ack it published, then the rest back.
		if !c.closed.Load() {
			c.drainAcks()
			c.reclaim()
		}
		c.txMu.Unlock()
	}
	if !c.closed.Load() {
		c.wakeAll()
	}
}

// ------------------------------------------------------------ public API

// Addr is the address of an rpal service.
type Addr struct{ Service string }

// Network returns "rpal".
func (a Addr) Network() string { return "rpal" }
func (a Addr) String() string  { return a.Service }

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "rpal", Addr: Addr{c.service}, Err: err}
}

// Send sends one message with one copy: payloads up to InlineMax bytes
// travel in the ring slot, larger ones in a buffer of our arena that the
// peer acknowledges.  It blocks while the ring, the buffer quota or the
// connection's budget (Config.ConnBudget) is full.
func (c *Conn) Send(b []byte) error {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if err := expired(&c.wrDeadline); err != nil {
		return c.opErr("send", err)
	}
	err := c.sendLocked(b)
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
		if err = c.sendLocked(m); err != nil {
			break
		}
		n++
	}
	if n > 0 && !c.dead.Load() {
		c.notifyRX()
	}
	return n, c.opErr("send", err)
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
		c.consume()
		c.notifyTX(false, c.rxHead)
		return int(s.n), nil
	}
	copy(b, unsafe.Slice((*byte)(c.peerPtr(s.addr)), s.n))
	c.consume()
	if err := c.ackPush(s.addr); err != nil {
		return 0, c.opErr("recv", err)
	}
	return int(s.n), nil
}

func (c *Conn) peerPtr(addr uint64) unsafe.Pointer {
	return unsafe.Add(c.peer.base, uintptr(addr-c.peer.addr))
}

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
// read-only and valid until Ack (or the connection's Close).
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
		c.consume()
		c.notifyTX(false, c.rxHead)
	}
	return m, nil
}

// Read returns the next message, waiting for one; io.EOF at end of stream.
// An in-place message must be given back with Ack.
func (c *Conn) Read() (*Message, error) { return c.readMsg(false, true) }

// TryRead is Read without waiting: it fails with syscall.EAGAIN when no
// message is ready.
func (c *Conn) TryRead() (*Message, error) { return c.readMsg(false, false) }

// Peek returns the next message without consuming it, waiting for one: the
// next Read returns the same message.  A peeked message needs no Ack.
func (c *Conn) Peek() (*Message, error) { return c.readMsg(true, true) }

// Buffer is memory of this process's arena: a peer that receives it reads
// it at the same address, in place.
type Buffer struct {
	p     *process
	addr  uint64
	n     int
	state atomic.Int32 // 0 owned, 1 sent, 2 freed
}

// Alloc returns n bytes of this process's arena (64-byte aligned) for Write.
func Alloc(n int) (*Buffer, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	if n <= 0 || uint64(n) > p.cfg.ArenaSize/2 {
		return nil, fmt.Errorf("rpal: alloc of %d bytes: %w", n, syscall.EINVAL)
	}
	addr, ok := p.allocData(uint64(n), 0) // leaves the reserve for connection blocks
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

// Truncate shortens the length Write will send.
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

// Write publishes buf to the peer without copying; ownership passes to the
// peer until it acknowledges the message, then the buffer is freed.  It
// blocks while the ring, the buffer quota or the connection's budget is
// full.  On error the caller still owns buf.
func (c *Conn) Write(buf *Buffer) error {
	if buf.p != c.p || buf.n == 0 {
		return c.opErr("write", fmt.Errorf("not a live buffer of this process: %w", syscall.EINVAL))
	}
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if err := expired(&c.wrDeadline); err != nil {
		return c.opErr("write", err)
	}
	if err := c.prepare(wantSlot | wantQuota); err != nil {
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
	c.publish(nil, uint32(buf.n), buf.addr, slotBuf)
	c.notifyRX()
	return nil
}

// CloseWrite stops sending: after draining, the peer reads end of stream.
func (c *Conn) CloseWrite() error {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	c.shutWr = true
	atomic.OrUint32(c.u32(c.me, bState), stateShutWr) // R3: after the last slot
	if !c.dead.Load() {
		c.notifyRX()
	}
	return nil
}

// lingerTime bounds how long a closed connection keeps its block and the
// buffers the peer holds for a peer that does not close its end.
const lingerTime = 10 * time.Second

// Close closes the connection: blocked calls return net.ErrClosed and the
// peer reads what we sent, then end of stream.  As librpal does, our block
// and the buffers the peer holds are kept until the peer closes its end too
// (or dies, or 10 s pass), then return to the allocator; the peer's arena is
// unmapped with the last connection to it.  Messages read from the
// connection must not be used after Close.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closed.Store(true)
		atomic.OrUint32(c.u32(c.me, bState), stateShutWr|stateClosed)
		// Wake our sleepers; they see closed.
		c.rxBell.Close()
		c.txBell.Close()
		c.rxMu.Lock()
		c.txMu.Lock()
		c.ackMu.Lock()
		alive := !c.dead.Load()
		if alive {
			c.wakeRX()
			c.drainAcks()
		}
		unix.Close(c.peerBell)
		c.p.conns.Add(-1)
		c.ackMu.Unlock()
		c.txMu.Unlock()
		c.rxMu.Unlock()
		if alive {
			// The peer sees a hang-up now; we keep what it may still read.
			_ = c.sock.CloseWrite()
			go func() {
				t := time.NewTimer(lingerTime)
				select {
				case <-c.hup:
				case <-t.C:
				}
				t.Stop()
				c.release()
			}()
		} else {
			c.release()
		}
	})
	if !first {
		return c.opErr("close", net.ErrClosed)
	}
	return nil
}

// release frees our block and the buffers the peer held, and drops the
// peer's mapping: the end of a closed connection.
func (c *Conn) release() {
	c.sock.Close()
	c.pidfd.Close()
	c.txMu.Lock()
	c.reclaim()
	c.txMu.Unlock()
	// A peer that reads on sees the nonce change and stops.
	atomic.StoreUint32(c.u32(c.me, bMagic), 0)
	atomic.StoreUint64(c.u64(c.me, bNonce), 0)
	c.p.freeBytes(c.meAddr)
	c.p.putPeer(c.peer)
}

// SetDeadline sets the read and write deadlines (net.Conn semantics).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func deadlineNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SetReadDeadline bounds Read, Peek and Recv; os.ErrDeadlineExceeded after.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.rdDeadline.Store(deadlineNano(t))
	return c.setBellDeadline(c.rxBell, t)
}

// SetWriteDeadline bounds Send and Write while they wait for room.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.wrDeadline.Store(deadlineNano(t))
	return c.setBellDeadline(c.txBell, t)
}

// setBellDeadline passes a deadline on to the file a waiter parks on,
// unless wakeAll has expired it for good.
func (c *Conn) setBellDeadline(f *os.File, t time.Time) error {
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	if c.wokeAll {
		return nil
	}
	if err := f.SetReadDeadline(t); err != nil {
		return c.opErr("set", err)
	}
	return nil
}

// LocalAddr returns the service name.
func (c *Conn) LocalAddr() net.Addr { return Addr{c.service} }

// RemoteAddr returns the service name.
func (c *Conn) RemoteAddr() net.Addr { return Addr{c.service} }

// ConnInfo is what we know about a connection.
type ConnInfo struct {
	PeerPid, PeerUID, PeerGID int
	PeerSlot                  uint32
	PeerAlive                 bool
	TxMsgs, RxMsgs            uint64
	Wakeups                   uint64 // doorbell rings made for the peer
	Sleeps                    uint64 // times we slept waiting on this connection
	BufsOutstanding           int    // our buffers the peer holds
	BytesOutstanding          uint64 // the arena those buffers take (allocator blocks); see Config.ConnBudget
}

// Info returns the connection's counters; it also takes the peer's acks.
func (c *Conn) Info() ConnInfo {
	c.txMu.Lock()
	if !c.closed.Load() {
		c.drainAcks()
		if c.dead.Load() {
			c.reclaim()
		}
	}
	out, outBytes := len(c.out), c.outBytes
	c.txMu.Unlock()
	return ConnInfo{
		PeerPid: c.peerPid, PeerUID: c.peerUID, PeerGID: c.peerGID, PeerSlot: c.peer.slot,
		PeerAlive: !c.dead.Load(), TxMsgs: c.txMsgs.Load(), RxMsgs: c.rxMsgs.Load(),
		Wakeups: c.wakeups.Load(), Sleeps: c.sleeps.Load(), BufsOutstanding: out, BytesOutstanding: outBytes,
	}
}
