// SPDX-License-Identifier: MIT

package rpal

import (
	"container/list"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Conn is one rpal connection: a pair of message rings between this
// process's arena and the peer's.  Messages keep their boundaries.  A Conn
// is safe for concurrent use; one send and one receive proceed in parallel,
// other callers of the same direction queue behind them.
//
// Memory ordering: every index and sequence word in an arena is loaded
// with sync/atomic (acquire, and more), and a slot's seq, tail and head
// are stored with storeRelease, as librpal stores them.  Before a send or
// receive looks at the peer's waiting word, a sequentially consistent
// store (on amd64 an XCHG) of tail or head is the full barrier W1 of
// docs/PROTOCOL.md §6; W0 is the locked RMW on our waiting word.
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
	// against wakeAll, which leaves them expired for good, and against
	// kicks (see kick).
	peerBell int
	drainBuf [2][1024]byte // per direction: what a waiter reads off our doorbell
	// Per direction, for a waiter asleep on the peer's futex word
	// (sleepFutex): a word of ours it also waits on, which only we
	// write, and whether it sleeps (see kickFutex).
	futexKick   [2]uint32
	futexAsleep [2]atomic.Bool
	bellMu      sync.Mutex
	wokeAll     bool
	kicked      [2]bool // per direction: its file's deadline is expired by a kick
	rxBell      *os.File
	txBell      *os.File
	rxRaw       syscall.RawConn
	txRaw       syscall.RawConn
	lastRungRX  atomic.Uint64 // the peer's waiting word when we last woke it for RX
	lastRungTX  atomic.Uint64
	watched     bool        // the socket watcher runs (see watch)
	watchEnded  atomic.Bool // it ended: the peer hung up, or the linger time passed
	// sockEmpty: sock refuses descriptors and held none after the
	// handshake; else release empties it before its close, which would
	// release what a peer queued there on our goroutine.
	sockEmpty bool

	txMu      sync.Mutex
	tail      uint64
	headCache uint64
	published uint64
	ackHead   uint64
	out       map[uint64]uint64 // my buffers the peer holds: address -> block size
	outBytes  uint64            // the sum of those block sizes
	outLimit  int
	// outBytesSeen is outBytes for Info while a sender holds txMu.
	outBytesSeen atomic.Uint64
	// shutWr: CloseWrite was called (any goroutine); a blocked send fails.
	shutWr atomic.Bool
	// shutRd: CloseRead was called; reads end once the ring is empty.
	shutRd atomic.Bool
	txSpin spinner

	rxMu      sync.Mutex
	rxHead    uint64
	rxChecked uint64
	// rxEOF: a read returned end of stream, and every later one does: a
	// slot the peer publishes after it breaks the protocol and is not read.
	rxEOF     bool
	rxSpin    spinner
	rxReadyFn func() bool // c.rxReady, made once: a method value allocates
	accepted  bool        // a Listener's: its reader waits for requests (see NewStream)

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

	// The counters (see stat.go): an entry of the statistics page while
	// the connection is open, then a private copy.
	st      atomic.Pointer[statEntry]
	statID  uint64        // st's id in the page
	adverts atomic.Uint64 // sleeps advertised on our doorbell (see bellDrainEvery)

	closeOnce sync.Once

	// A closed connection the peer may still read lingers (see Close):
	// lingering says so to the watcher; lingerEl is its place in the
	// process's list (under process.lingerMu); releaseOnce frees it once,
	// whether the watcher or an allocation that needs the room gets there
	// first.
	lingering   atomic.Bool
	lingerEl    *list.Element
	releaseOnce sync.Once
}

func (c *Conn) u32(base unsafe.Pointer, off uintptr) *uint32 {
	return (*uint32)(unsafe.Add(base, off))
}

func (c *Conn) u64(base unsafe.Pointer, off uintptr) *uint64 {
	return (*uint64)(unsafe.Add(base, off))
}

func (c *Conn) peerPtr(addr uint64) unsafe.Pointer {
	return unsafe.Add(c.peer.base, uintptr(addr-c.peer.addr))
}

// Addr is the address of an rpal service.
type Addr struct{ Service string }

// Network returns "rpal".
func (a Addr) Network() string { return "rpal" }

// String returns the service name.
func (a Addr) String() string { return a.Service }

// LocalAddr returns the service name.
func (c *Conn) LocalAddr() net.Addr { return Addr{c.service} }

// RemoteAddr returns the service name.
func (c *Conn) RemoteAddr() net.Addr { return Addr{c.service} }

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "rpal", Addr: Addr{c.service}, Err: err}
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

// fail records that the peer broke the protocol and returns the first
// violation: the connection is closed for I/O for good, and its sleepers
// wake up to report it.
func (c *Conn) fail(what string, v uint64) error {
	e := &ProtocolError{Pid: c.peerPid, What: what, Val: v}
	if c.violation.CompareAndSwap(nil, e) {
		// Closed for I/O: tell the peer we neither read nor write.
		atomic.OrUint32(c.u32(c.me, bState), stateShutWr|stateClosed)
		c.statNote(statError, true)
		c.wakeAll()
	} else {
		c.statNote(0, true)
	}
	return c.violation.Load()
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
	c.statNote(statPeerGone, false)
	if c.txMu.TryLock() {
		// Take every ack it published, then the rest back: a peer whose
		// socket hung up may still run and read, so it is told first that
		// our block is no longer its connection (as release does).
		if !c.closed.Load() {
			c.drainAcks()
			c.retire()
			c.reclaim()
		}
		c.txMu.Unlock()
	}
	if !c.closed.Load() {
		c.wakeAll()
	}
}

// CloseWrite stops sending: after draining, the peer reads end of stream.
// A write blocked for room meanwhile fails with EPIPE, as over TCP.
func (c *Conn) CloseWrite() error {
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	c.shutWr.Store(true)
	c.kickFutex(1) // a blocked sender sees shutWr and lets go of txMu
	c.kick(1)
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	atomic.OrUint32(c.u32(c.me, bState), stateShutWr) // R3: after the last slot
	if !c.dead.Load() {
		c.notifyRX()
	}
	return nil
}

// CloseRead stops receiving, as a Unix socket's does: blocked and later
// reads return what was queued, then io.EOF, and the peer's sends fail
// with EPIPE (a send blocked on a full ring too).  We may go on sending.
func (c *Conn) CloseRead() error {
	// Under ackMu, which Close takes before it frees our block or unmaps
	// the peer's: a reader that sees shutRd may Close at once.
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	if c.shutRd.Swap(true) {
		return nil
	}
	atomic.OrUint32(c.u32(c.me, bState), stateClosed) // the peer reads "no longer reads"
	if !c.dead.Load() {
		// Its senders asleep on a full ring must look: rung whatever
		// our reader rang last (any goroutine may be here).
		w := atomic.LoadUint64(c.u64(c.pb, bWaiting))
		if w&waitTX != 0 {
			var never atomic.Uint64
			never.Store(^uint64(0))
			c.ringBell(w, waitTXFutex, waitTXBell, &never, &c.st.Load().rx.wakeups)
		}
	}
	c.kickFutex(0) // our blocked reader sees shutRd
	c.kick(0)
	return nil
}

// lingerTime bounds how long a closed connection keeps its block and the
// buffers the peer holds for a peer that does not close its end.
const lingerTime = 10 * time.Second

// Close closes the connection: blocked calls return net.ErrClosed and the
// peer reads what we sent, then end of stream.  As librpal does, our block
// and the buffers the peer holds are kept until the peer closes its end too
// (or dies, or 10 s pass), then return to the allocator; the peer's arena is
// unmapped with the last connection to it.  When a new connection's block
// finds no room, the oldest of those lingering connections go first, so a
// peer that never closes its end cannot keep new connections out; it then
// reads end of stream, or fails with EPROTO where it had not read
// everything.  Messages read from the connection must not be used after
// Close.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closed.Store(true)
		// The peer's senders stop at once; its reader is told of the end
		// of stream under txMu, after a send under way has published
		// (R3): the peer never reads a slot published after it.
		atomic.OrUint32(c.u32(c.me, bState), stateClosed)
		// Wake our sleepers; they see closed.
		c.kickFutex(0)
		c.kickFutex(1)
		shutBell(c.rxRaw)
		c.rxBell.Close()
		c.txBell.Close()
		c.rxMu.Lock()
		c.txMu.Lock()
		atomic.OrUint32(c.u32(c.me, bState), stateShutWr)
		c.ackMu.Lock()
		alive := !c.dead.Load()
		if alive {
			c.wakeRX()
			c.drainAcks()
		}
		closeFd(c.peerBell)
		c.statClose()
		c.p.connClosed(c)
		c.ackMu.Unlock()
		c.txMu.Unlock()
		c.rxMu.Unlock()
		// Without a watcher the handshake never ended: the peer
		// holds nothing of ours.
		if !alive || !c.watched {
			c.release()
			return
		}
		// The peer sees a hang-up now; we keep what it may still read.
		// The watcher frees it when the peer hangs up too, or at the
		// read deadline: no goroutine of its own per lingering one.
		_ = c.sock.CloseWrite()
		c.p.lingerAdd(c)
		_ = c.sock.SetReadDeadline(time.Now().Add(lingerTime))
		c.lingering.Store(true)
		if c.watchEnded.Load() { // it ended before it could see lingering
			c.release()
		}
	})
	if !first {
		return c.opErr("close", net.ErrClosed)
	}
	return nil
}

// retire tells a peer that reads on that our block is no longer its
// connection: it sees the nonce change and stops, before the buffers it
// may hold are handed out again.
func (c *Conn) retire() {
	atomic.StoreUint32(c.u32(c.me, bMagic), 0)
	atomic.StoreUint64(c.u64(c.me, bNonce), 0)
}

// release frees our block and the buffers the peer held, and drops the
// peer's mapping: the end of a closed connection.  Only the first call
// does; a later one returns once that is done.
func (c *Conn) release() {
	c.releaseOnce.Do(func() {
		c.p.lingerDel(c)
		if c.sockEmpty {
			c.sock.Close()
		} else {
			closePeerConn(c.sock) // its descriptors closed without blocking
		}
		c.pidfd.Close()
		c.retire()
		c.txMu.Lock()
		c.reclaim()
		c.txMu.Unlock()
		c.p.freeBytes(c.meAddr)
		c.p.putPeer(c.peer)
	})
}

// SetDeadline sets the read and write deadlines (net.Conn semantics).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds ReadMsg, PeekMsg and Recv; os.ErrDeadlineExceeded
// after.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.rdDeadline.Store(deadlineNano(t))
	c.kickFutex(0)
	return c.setBellDeadline(c.rxBell, t)
}

// SetWriteDeadline bounds Send, SendBatch and WriteMsg while they wait for
// room.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.wrDeadline.Store(deadlineNano(t))
	c.kickFutex(1)
	return c.setBellDeadline(c.txBell, t)
}

// setBellDeadline passes a deadline on to the file a waiter parks on,
// unless wakeAll has expired it for good.
func (c *Conn) setBellDeadline(f *os.File, t time.Time) error {
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	if c.wokeAll || (f == c.rxBell && c.kicked[0]) || (f == c.txBell && c.kicked[1]) {
		return nil // the waiter sets the new deadline when it takes the kick
	}
	if err := f.SetReadDeadline(t); err != nil {
		return c.opErr("set", err)
	}
	return nil
}

func deadlineNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// expired reports a deadline in the past: as with net.Conn, calls fail
// with os.ErrDeadlineExceeded even when they could proceed.
func expired(d *atomic.Int64) error {
	if v := d.Load(); v != 0 && nowNano() >= v {
		return os.ErrDeadlineExceeded
	}
	return nil
}

func nowNano() int64 { return time.Now().UnixNano() }

// ConnInfo is what we know about a connection.
type ConnInfo struct {
	PeerPid, PeerUID, PeerGID int
	PeerSlot                  uint32
	PeerAlive                 bool
	TxMsgs, RxMsgs            uint64
	Wakeups                   uint64 // wake-ups made for the peer (futex or doorbell)
	Sleeps                    uint64 // times we slept waiting on this connection
	BufsOutstanding           int    // our buffers the peer holds
	BytesOutstanding          uint64 // the arena those buffers take (allocator blocks); see Config.ConnBudget
}

// Info returns the connection's counters; it also takes the peer's acks
// unless a send blocked for room holds the sending side.
func (c *Conn) Info() ConnInfo {
	st := c.st.Load()
	// Not behind a sender blocked for room: what it last saw then.
	if c.txMu.TryLock() {
		if !c.closed.Load() {
			c.drainAcks()
			if c.dead.Load() {
				c.reclaim()
			}
		}
		c.txMu.Unlock()
	}
	out, outBytes := int(st.tx.bufsOut.Load()), c.outBytesSeen.Load()
	return ConnInfo{
		PeerPid: c.peerPid, PeerUID: c.peerUID, PeerGID: c.peerGID, PeerSlot: c.peer.slot,
		PeerAlive: !c.dead.Load(), TxMsgs: st.tx.msgs.Load(), RxMsgs: st.rx.msgs.Load(),
		Wakeups: c.rings(), Sleeps: st.tx.sleeps.Load() + st.rx.sleeps.Load(),
		BufsOutstanding: out, BytesOutstanding: outBytes,
	}
}
