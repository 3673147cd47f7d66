// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Stream is a byte stream over an rpal connection (net.Conn), what Dial,
// Dialer.DialContext and Listener.Accept return: each Write sends its bytes
// as one or more messages, Read returns them in order without regard to
// message boundaries, and io.EOF follows the peer's CloseWrite or Close.  Deadlines follow the net.Conn contract: blocked calls
// wake and fail with an error wrapping os.ErrDeadlineExceeded; after Close
// they fail with net.ErrClosed.
//
// A Stream's reader spins up to Config.StreamSpin (default 50 µs, as a
// Conn's) before it sleeps.  A longer ceiling catches more replies in a
// closed loop, but at a moderate rate both readers would spin through the
// gaps between calls as well (60-100 µs at 10,000 calls/s), which costs
// more CPU than the wake-ups it saves; where a spare core is cheaper than
// a wake-up's latency, raise it (docs/GO.md gives both sides' figures).
// Under the default WaitAdaptive the budget adapts: on a stream whose
// waits are longer than the ceiling (idle, or a slow peer) it falls to a
// sixteenth of it.
//
// A server's Stream (from Listener.Accept) waits mostly for the next
// request, which nothing on its side is computing.  Under a ceiling raised
// beyond 80 µs its reader still counts a wait beyond 80 µs as long, where
// a client's counts only those beyond the ceiling: when such
// gaps are what usually comes next, it spins the floor and then sleeps.
// A sleep adds a wake-up to the request's latency, 30-60 µs across cores
// on small VMs: spinning through a longer gap would spend more than twice
// that in CPU to save it.  Short waits (a closed loop, a request in
// several frames) still spin the ceiling.  Where the gaps are too mixed
// for the pattern of the last two waits to predict (more than a quarter
// go against it, as at a moderate rate whose gaps spread from a few to
// over 100 µs), it spins instead the budget that would have cost least on
// its last 64 waits, counting a sleep as 40 µs.
//
// A short Write (up to 320 bytes) that finds the ring full returns at once
// and leaves its bytes in a send buffer of up to 64 KiB, which a goroutine
// of the Stream sends, joined into larger messages, as the peer makes
// room: two sides that each pipeline more than the ring holds before
// reading (a client's requests to a server that answers each with a
// Write) go on as over a socket, whose buffer also takes a few hundred
// such writes.  Longer writes wait for room, as before a socket's full
// buffer.  CloseWrite sends what is buffered first; Close waits for it
// until the write deadline, 10 s at most, and says so if bytes were left
// unsent.  An error met sending the buffer is returned by the
// next Write.
//
// Either side's reader that rang its peer awake after a pause longer than
// Config.Spin sleeps at once for the answer, which comes no sooner than
// the peer's wake-up (Config.Spin, not a raised Stream ceiling: that one
// is for the frames within a call).
type Stream struct {
	c *Conn

	// The message being read (under c.rxMu).
	have   bool
	addr   uint64 // 0: inline
	n, off int
	inline [InlineMax]byte

	wmu     sync.Mutex  // one Write at a time
	closing atomic.Bool // Close was called: every call fails, a flush may still run

	// The send buffer (under pmu): bytes of short Writes that found the
	// ring full, sent in order by flush, the only sender while it runs.
	pmu      sync.Mutex
	pend     []byte
	pendBuf  []byte // pend's backing array, from its start: the next fill's
	flushing bool
	flushed  chan struct{} // closed when that flush ends
	werr     error         // why a flush gave up: the next Write's error
	shut     bool          // CloseWrite was called
	unsent   int           // bytes a flush ended without sending
	room     chan struct{} // for a Write: flush made progress, or something changed
	poke     chan struct{} // for flush: Close, or a new deadline
}

// sendBufferMax bounds a Stream's send buffer: with the ring it takes 740
// pipelined writes of 100 bytes, where a Unix socket's buffer takes 278.
const sendBufferMax = 64 << 10

// requestGap is the longest wait a server's Stream reader still counts as
// short (see Stream, whose documentation gives its value).
const requestGap = 80 * time.Microsecond

// A Stream is what net.Conn users (net/http, gRPC) take.
var _ net.Conn = (*Stream)(nil)

// NewStream returns a byte stream over c.  c must not be used directly
// afterwards except through the Stream.  Its reader spins up to
// Config.StreamSpin before it sleeps (see Stream).
func NewStream(c *Conn) *Stream {
	c.rxMu.Lock()
	c.rxSpin.init(c.p.cfg.StreamSpin, c.p.cfg.Wait)
	c.rxSpin.pauseAt = min(c.p.cfg.Spin, c.rxSpin.max)
	if c.accepted {
		c.rxSpin.longAt = min(requestGap, c.rxSpin.max)
		c.rxSpin.mixed, c.rxSpin.chosen = true, c.rxSpin.max
	}
	c.rxMu.Unlock()
	return &Stream{c: c, room: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
}

// Conn returns the underlying message connection.
func (s *Stream) Conn() *Conn { return s.c }

// chunk is the largest message a Write sends: small enough that the
// allocator, the quota and the connection budget keep several in flight.
func (s *Stream) chunk() int {
	n := int(min(s.c.p.cfg.ArenaSize/16, s.c.p.cfg.connBudget()/4))
	return min(n, 256<<10)
}

// slotsMax is the longest write (or tail of one) that travels in ring
// slots rather than in a buffer of the arena: up to 8 slots of InlineMax
// bytes, which cost less than a buffer's allocation, acknowledgement and
// free.  The frames of small RPCs (gRPC's headers, a short message,
// trailers) fit.
const slotsMax = 8 * InlineMax

// Read reads up to len(b) bytes of the stream.
func (s *Stream) Read(b []byte) (int, error) {
	c := s.c
	if len(b) == 0 {
		if c.closed.Load() {
			return 0, c.opErr("read", net.ErrClosed)
		}
		return 0, nil
	}
	// Copies from the peer's arena happen under rxMu, which Close takes
	// before it unmaps anything.
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	if c.closed.Load() || s.closing.Load() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if err := expired(&c.rdDeadline); err != nil {
		return 0, c.opErr("read", err)
	}
	n := 0
	for n < len(b) {
		if !s.have {
			var sc slotCopy
			if err := c.next(&sc, n == 0); err != nil {
				if n > 0 {
					return n, nil // what is there; the error comes next time
				}
				if s.closing.Load() { // woken by Close
					err = net.ErrClosed
				}
				return 0, c.opErr("read", err)
			}
			c.consume(sc.n)
			s.have, s.n, s.off = true, int(sc.n), 0
			if sc.flags == slotInline {
				s.addr = 0
				copy(s.inline[:], sc.data[:sc.n])
				c.notifyTX(c.rxHead)
			} else {
				s.addr = sc.addr
			}
		}
		var k int
		if s.addr == 0 {
			k = copy(b[n:], s.inline[s.off:s.n])
		} else {
			k = copy(b[n:], unsafe.Slice((*byte)(c.peerPtr(s.addr)), s.n)[s.off:])
			// A message read in several calls leaves the buffer with
			// the peer in between, which may free it (checkBufCopy).
			if err := c.checkBufCopy(); err != nil {
				s.have = false
				if n > 0 {
					return n, nil // what came before; the error comes next time
				}
				return 0, c.opErr("read", err)
			}
		}
		n += k
		s.off += k
		if s.off == s.n {
			s.have = false
			if s.addr != 0 {
				if err := c.ackPush(s.addr); err != nil {
					return n, c.opErr("read", err)
				}
			}
		}
	}
	return n, nil
}

// Write writes b to the stream.
func (s *Stream) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.c
	if c.closed.Load() || s.closing.Load() {
		return 0, c.opErr("write", net.ErrClosed)
	}
	if err := expired(&c.wrDeadline); err != nil {
		return 0, c.opErr("write", err)
	}
	flushing, err := s.state()
	if err != nil {
		return 0, c.opErr("write", err)
	}
	if len(b) == 0 { // nothing to send, but a closed side says so, as TCP's does
		if c.closed.Load() || c.shutWr.Load() {
			return 0, c.opErr("write", c.sendError())
		}
		return 0, nil
	}
	if len(b) <= slotsMax {
		n := 0
		if !flushing {
			if n, err = s.send(b, false); err != errNoRoom {
				return n, c.opErr("write", err)
			}
		}
		m, err := s.buffer(b[n:])
		return n + m, c.opErr("write", err)
	}
	if flushing {
		if err := s.waitFlushed(); err != nil {
			return 0, c.opErr("write", err)
		}
	}
	n, err := s.send(b, true)
	return n, c.opErr("write", err)
}

// send sends b under txMu as sendLocked does, then wakes the peer for
// what went.
func (s *Stream) send(b []byte, block bool) (int, error) {
	c := s.c
	c.txMu.Lock()
	defer c.txMu.Unlock()
	n, err := s.sendLocked(b, block)
	if n > 0 && !c.dead.Load() {
		c.notifyRX()
	}
	return n, err
}

// sendLocked sends b, waiting for room if block, else failing with
// errNoRoom where it would wait, and returns the bytes sent.  Caller holds
// txMu.
func (s *Stream) sendLocked(b []byte, block bool) (int, error) {
	c := s.c
	n := 0
	chunk := s.chunk()
	for n < len(b) {
		k := min(len(b)-n, chunk)
		var err error
		if k <= slotsMax || c.p.alloc.freeBytes() < c.p.cfg.ArenaSize/4 {
			// Short writes, and every write once the arena runs low
			// (peers that stopped reading hold it): ring slots, which
			// take nothing from the arena, so those peers cannot starve
			// other connections or keep new ones out.
			var m int
			m, err = c.sendSlotsLocked(b[n:n+k], block)
			n += m
		} else if err = c.sendLocked(b[n:n+k], block); err == nil {
			n += k
		} else if errors.Is(err, errArenaFull) { // no block that large is free
			var m int
			m, err = c.sendSlotsLocked(b[n:n+k], block)
			n += m
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// state says whether a flush runs, or why writing is over.
func (s *Stream) state() (flushing bool, err error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.closing.Load() {
		return false, net.ErrClosed
	}
	if s.werr != nil {
		return false, s.werr
	}
	if s.shut {
		return false, fmt.Errorf("connection was shut down for writing: %w", errPipe)
	}
	return s.flushing, nil
}

// buffer appends b to the send buffer, starting a flush, and waits for
// room while the buffer is full.  Returns the bytes taken.
func (s *Stream) buffer(b []byte) (int, error) {
	n := 0
	for {
		s.pmu.Lock()
		k := min(len(b)-n, sendBufferMax-len(s.pend))
		// Not once the connection is closed: a flush would drop the
		// bytes, and the Write fails instead (waitRoom says why).
		if k > 0 && s.werr == nil && !s.shut && !s.c.closed.Load() && !s.closing.Load() {
			if s.pendBuf == nil {
				s.pend = make([]byte, 0, min(sendBufferMax, 4<<10))
				s.pendBuf = s.pend
			}
			grows := len(s.pend)+k > cap(s.pend)
			s.pend = append(s.pend, b[n:n+k]...)
			if grows {
				s.pendBuf = s.pend // a new array
			}
			n += k
			if !s.flushing {
				s.flushing = true
				s.flushed = make(chan struct{})
				go s.flush(s.flushed)
			}
		}
		s.pmu.Unlock()
		if n == len(b) {
			return n, nil
		}
		if err := s.waitRoom(); err != nil {
			return n, err
		}
	}
}

// waitRoom waits for the flush to make progress, or for a change that
// ends the wait, then says why writing cannot go on, if it cannot.
func (s *Stream) waitRoom() error {
	c := s.c
	if err := s.writable(); err != nil {
		return err
	}
	if d := c.wrDeadline.Load(); d != 0 {
		t := time.NewTimer(time.Duration(d - nowNano()))
		defer t.Stop()
		select {
		case <-s.room:
		case <-t.C:
		}
	} else {
		<-s.room
	}
	return s.writable()
}

// writable says why a Write cannot go on, if it cannot.
func (s *Stream) writable() error {
	if s.c.closed.Load() {
		return net.ErrClosed
	}
	if err := expired(&s.c.wrDeadline); err != nil {
		return err
	}
	_, err := s.state()
	return err
}

// waitFlushed waits until no flush runs: a Write too long for the
// buffer goes after what is in it.
func (s *Stream) waitFlushed() error {
	for {
		flushing, err := s.state()
		if err != nil || !flushing {
			return err
		}
		if err := s.waitRoom(); err != nil {
			return err
		}
	}
}

// wake ends the waits of waitRoom, and with flusher those of flush, to
// look again.
func (s *Stream) wake(flusher bool) {
	select {
	case s.room <- struct{}{}:
	default:
	}
	if flusher {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// flush sends the send buffer as the peer makes room, until it is empty
// or sending fails for good.  A wait ended by the write deadline does not
// end it: the bytes were taken, and go once the peer reads, as a socket's
// do; it then looks every few ms.  A CloseWrite called meanwhile takes
// effect after the last byte.
func (s *Stream) flush(done chan struct{}) {
	c := s.c
	defer close(done)
	pause := time.Duration(0)
	for {
		s.pmu.Lock()
		b := s.pend
		if len(b) == 0 || s.werr != nil || c.closed.Load() {
			s.unsent += len(b)
			// The array stays for the next flush (a Stream whose peer
			// reads slowly fills and empties it over and over); one that
			// gave up keeps nothing.
			s.pend, s.flushing = s.pendBuf[:0], false
			if len(b) > 0 {
				s.pend, s.pendBuf = nil, nil
			}
			shut := s.shut && s.werr == nil && len(b) == 0
			s.pmu.Unlock()
			if shut {
				_ = c.CloseWrite()
			}
			s.wake(false)
			return
		}
		s.pmu.Unlock()
		n, err := s.send(b, true)
		expiredWait := errors.Is(err, os.ErrDeadlineExceeded)
		s.pmu.Lock()
		s.pend = s.pend[n:]
		if err != nil && !expiredWait {
			s.werr = err
		}
		s.pmu.Unlock()
		s.wake(false)
		if !expiredWait || n > 0 {
			pause = 0
		}
		if !expiredWait {
			continue
		}
		pause = min(2*pause+time.Millisecond, 50*time.Millisecond) // 1 ms after progress
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-s.poke: // Close, or a new deadline
		}
		t.Stop()
	}
}

// CloseWrite shuts down the writing side: the peer reads what was written,
// the send buffer's bytes included, then io.EOF.
func (s *Stream) CloseWrite() error {
	if s.closing.Load() {
		return s.c.opErr("close", net.ErrClosed)
	}
	s.pmu.Lock()
	s.shut = true
	flushing := s.flushing
	s.pmu.Unlock()
	s.wake(false)
	if flushing && !s.c.closed.Load() {
		return nil // the flush shuts down after its last byte
	}
	return s.c.CloseWrite()
}

// CloseRead shuts down the reading side: reads return io.EOF once what was
// queued is read, and the peer's writes fail with EPIPE.
func (s *Stream) CloseRead() error { return s.c.CloseRead() }

// Close closes the connection: blocked Reads and Writes return at once
// with net.ErrClosed.  Where the send buffer holds bytes, it sends them
// first (the peer's writes fail with EPIPE meanwhile): it waits for that
// until the write deadline, and 10 s at most (a deadline set further off,
// for the writes before, does not hold Close longer), and returns an
// error that says how many bytes were never sent: it wraps ETIMEDOUT,
// or the error the sending met (the peer closed or died).
func (s *Stream) Close() error {
	c := s.c
	if s.closing.Swap(true) {
		return c.opErr("close", net.ErrClosed)
	}
	s.pmu.Lock()
	flushing, done := s.flushing, s.flushed
	s.pmu.Unlock()
	if flushing && !c.closed.Load() {
		_ = c.CloseRead() // wakes a blocked Read
		s.wake(false)     // and a Write waiting for room
	wait:
		for start := time.Now(); ; {
			// The deadline may change while we wait.
			limit := lingerTime - time.Since(start)
			if d := c.wrDeadline.Load(); d != 0 {
				limit = min(limit, time.Duration(d-nowNano()))
			}
			if limit <= 0 {
				break
			}
			t := time.NewTimer(min(limit, 20*time.Millisecond))
			select {
			case <-done:
				t.Stop()
				break wait
			case <-t.C:
			}
		}
	}
	s.pmu.Lock()
	werr := s.werr // a flush's own failure; after this, ours
	s.pmu.Unlock()
	err := c.Close()
	if flushing {
		s.wake(true)
		<-done // it sees closed at once
	}
	s.pmu.Lock()
	unsent := s.unsent
	s.pmu.Unlock()
	if err == nil && unsent > 0 {
		why := fmt.Errorf("the peer did not read them in time: %w", syscall.ETIMEDOUT)
		if werr != nil {
			why = werr
		}
		err = c.opErr("close", fmt.Errorf("%d bytes written were never sent: %w", unsent, why))
	}
	return err
}

// LocalAddr returns the service name.
func (s *Stream) LocalAddr() net.Addr { return s.c.LocalAddr() }

// RemoteAddr returns the service name.
func (s *Stream) RemoteAddr() net.Addr { return s.c.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	defer s.wake(true)
	return s.c.SetDeadline(t)
}

// SetReadDeadline sets the read deadline.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline; it bounds a Write's wait for
// room, not the sending of what the send buffer took.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	defer s.wake(true)
	return s.c.SetWriteDeadline(t)
}
