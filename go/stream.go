// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"net"
	"sync"
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
// A Stream holds far less unread data than a TCP socket: at most
// Config.RingEntries messages (256 by default: about 10 KiB of writes of
// up to 320 bytes, which travel 40 bytes per ring slot).  Two sides that
// each write more than that before reading (requests pipelined to a
// server that answers each with a Write) both block until their
// deadlines, where over TCP they would not; see docs/GO.md for what such
// a protocol can do.
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

	wmu sync.Mutex
}

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
	return &Stream{c: c}
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
	if c.closed.Load() {
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
				return 0, c.opErr("read", err)
			}
			c.consume(sc.n)
			s.have, s.n, s.off = true, int(sc.n), 0
			if sc.flags == slotInline {
				s.addr = 0
				copy(s.inline[:], sc.data[:sc.n])
				c.notifyTX(false, c.rxHead)
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
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if err := expired(&c.wrDeadline); err != nil {
		return 0, c.opErr("write", err)
	}
	if len(b) == 0 { // nothing to send, but a closed side says so, as TCP's does
		if c.closed.Load() || c.shutWr.Load() {
			return 0, c.opErr("write", c.sendError())
		}
		return 0, nil
	}
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
			m, err = c.sendSlotsLocked(b[n : n+k])
			n += m
		} else if err = c.sendLocked(b[n : n+k]); err == nil {
			n += k
		} else if errors.Is(err, errArenaFull) { // no block that large is free
			var m int
			m, err = c.sendSlotsLocked(b[n : n+k])
			n += m
		}
		if err != nil {
			if n > 0 && !c.dead.Load() {
				c.notifyRX()
			}
			return n, c.opErr("write", err)
		}
	}
	if n > 0 {
		c.notifyRX()
	}
	return n, nil
}

// CloseWrite shuts down the writing side: the peer reads io.EOF.
func (s *Stream) CloseWrite() error { return s.c.CloseWrite() }

// CloseRead shuts down the reading side: reads return io.EOF once what was
// queued is read, and the peer's writes fail with EPIPE.
func (s *Stream) CloseRead() error { return s.c.CloseRead() }

// Close closes the connection.
func (s *Stream) Close() error {
	err := s.c.Close()
	return err
}

// LocalAddr returns the service name.
func (s *Stream) LocalAddr() net.Addr { return s.c.LocalAddr() }

// RemoteAddr returns the service name.
func (s *Stream) RemoteAddr() net.Addr { return s.c.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (s *Stream) SetDeadline(t time.Time) error { return s.c.SetDeadline(t) }

// SetReadDeadline sets the read deadline.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.c.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.c.SetWriteDeadline(t) }
