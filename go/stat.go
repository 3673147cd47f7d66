// SPDX-License-Identifier: MIT

package rpal

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// The statistics page (PROTOCOL.md section 9, as librpal's src/stat.c):
// "<runtime dir>/stat.<slot>", mapped shared, one entry per open
// connection, so that `rpal stat` and `rpal top` read a Go process's
// counters as they read a C one's, without a word to it.  Counters are
// bumped in place.  Without a page (the runtime directory refuses it, or
// it holds statMaxConns entries) a connection keeps its counters in an
// entry of its own: Info still reports them; observers do not see them.

const (
	statMagic        = 0x54535052 // "RPST"
	statVersion      = 1
	statHdrSize      = 256
	statEntrySize    = 256
	statMaxConns     = 16384
	statFirstEntries = 15 // the first file: the header and 15 entries, one page
	statOpen         = 1  // an entry's state: a connection; 0 is free
	statListen       = 2  // a listener: rx.msgs counts connections made, rx.violations handshakes failed
	statAccepted     = 0x1
	statPeerGone     = 0x1 // status: hang-up or exit seen
	statError        = 0x2 // status: closed for I/O after a violation
)

// statHdr is the page's header.  Everything but nrEntries, nrOpen and
// overflow is written before the file gets its name.
type statHdr struct {
	magic       uint32
	version     uint16
	hdrSize     uint16
	entrySize   uint32
	nrEntries   atomic.Uint32 // grows, stored after the file did
	pid         uint32
	uid         uint32
	slot        uint32
	flags       uint32
	started     int64 // CLOCK_REALTIME seconds
	nrOpen      atomic.Uint32
	overflow    atomic.Uint32 // open connections without an entry
	clockNs     uint64        // CLOCK_MONOTONIC and the TSC at one instant:
	clockTSC    uint64        // readers convert spin cycles to ns with them
	name        [64]byte
	_           [4]uint64 // the hosted programs' call counters
	sleepCostNs atomic.Uint32
	wakeCostNs  atomic.Uint32
	wakeLatNs   atomic.Uint32 // stays 0: no wake page here to measure it on
	_           [84]byte
}

// statTX is what the sending side writes (one cache line).
type statTX struct {
	msgs, bytes    atomic.Uint64
	wakeups        atomic.Uint64 // rings for the peer's receiver
	wakeupsAvoided atomic.Uint64
	sleeps         atomic.Uint64 // sleeps waiting for room
	ringFull       atomic.Uint64
	spinTSC        atomic.Uint64
	bufsOut        atomic.Uint64 // gauge: our buffers the peer holds
}

// statRX is what the receiving side writes (one cache line).
type statRX struct {
	msgs, bytes atomic.Uint64
	wakeups     atomic.Uint64 // rings for the peer's sender
	sleeps      atomic.Uint64 // sleeps waiting for messages
	spinTSC     atomic.Uint64
	bufsHeld    atomic.Uint64
	violations  atomic.Uint64
	_           uint64
}

// statEntry is one connection.  seq is odd while the identity (everything
// before tx) is rewritten; state 0 is a free entry.
type statEntry struct {
	seq      atomic.Uint32
	state    uint32
	id       uint64
	fd       int32
	peerPid  uint32
	peerUID  uint32
	peerGID  uint32
	peerSlot uint32
	flags    uint32
	since    int64
	status   atomic.Uint32
	_        uint32
	service  [64]byte
	pair     uint64
	tx       statTX
	rx       statRX
}

// statID is what a new entry says of its connection.
type statID struct {
	listener                            bool // a listener's entry (statListen)
	fd                                  int32
	peerPid, peerUID, peerGID, peerSlot uint32
	flags                               uint32
	since                               int64
	service                             string
	pair                                uint64
}

// statPage is this process's page.
type statPage struct {
	mu   sync.Mutex
	hdr  *statHdr
	grow func(entries uint32) bool // makes the file hold that many entries
	free uint32                    // no free entry below this one
	ids  uint64
	// Go's clock at the header's clock pair, and the TSC's cycles per ns
	// (float64 bits) once measured from them (cycles).
	made     time.Time
	tscPerNs atomic.Uint64
}

func (sp *statPage) entry(i uint32) *statEntry {
	return (*statEntry)(unsafe.Add(unsafe.Pointer(sp.hdr), statHdrSize+uintptr(i)*statEntrySize))
}

func (sp *statPage) holds(e *statEntry) bool {
	p := uintptr(unsafe.Pointer(e))
	return sp != nil && p >= uintptr(unsafe.Pointer(sp.entry(0))) && p < uintptr(unsafe.Pointer(sp.entry(statMaxConns)))
}

// find returns a free entry, growing the file if need be; nil when full.
// Caller holds mu.
func (sp *statPage) find() *statEntry {
	n := sp.hdr.nrEntries.Load()
	for i := sp.free; i < n; i++ {
		if e := sp.entry(i); e.state == 0 {
			sp.free = i + 1
			return e
		}
	}
	if n >= statMaxConns {
		return nil
	}
	more := min(2*n+1, statMaxConns)
	if !sp.grow(more) {
		return nil
	}
	// After the file grew: a reader that sees the count may read that far.
	sp.hdr.nrEntries.Store(more)
	sp.free = n + 1
	return sp.entry(n)
}

// open returns an entry for a new connection, or a listener, filled with
// id and zeroed counters: one of the page's (sp may be nil), else one of
// its own.
func (sp *statPage) open(id *statID) *statEntry {
	state := uint32(statOpen)
	if id.listener {
		state = statListen
	}
	var e *statEntry
	if sp != nil {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		if e = sp.find(); e == nil && !id.listener {
			sp.hdr.overflow.Add(1)
		}
	}
	if e == nil {
		return &statEntry{state: state, since: id.since}
	}
	// Odd while the identity changes (readers retry).  The load after
	// the add keeps the stores below after it on arm64 too, where an add
	// without LSE is a store-release that later stores may pass.
	e.seq.Add(1)
	_ = e.seq.Load()
	sp.ids++
	e.state = state
	e.id = sp.ids
	e.fd = id.fd
	e.peerPid, e.peerUID, e.peerGID, e.peerSlot = id.peerPid, id.peerUID, id.peerGID, id.peerSlot
	e.flags = id.flags
	e.since = id.since
	e.status.Store(0)
	e.service = [64]byte{}
	copy(e.service[:len(e.service)-1], id.service)
	e.pair = id.pair
	e.tx = statTX{}
	e.rx = statRX{}
	e.seq.Add(1)
	if state == statOpen {
		sp.hdr.nrOpen.Add(1)
	}
	return e
}

// close frees the entry of a closed connection or listener.
func (sp *statPage) close(e *statEntry) {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	conn := e.state == statOpen
	if !sp.holds(e) {
		if conn {
			sp.hdr.overflow.Add(^uint32(0))
		}
		return
	}
	e.seq.Add(1)
	_ = e.seq.Load() // see open
	e.state = 0
	e.seq.Add(1)
	if conn {
		sp.hdr.nrOpen.Add(^uint32(0))
	}
	if i := uint32((uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(sp.entry(0)))) / statEntrySize); i < sp.free {
		sp.free = i
	}
}

// statNote records a rare event in c's entry: status bits, a violation.
// It may come after Close gave the entry back (a peer's death, seen by its
// watcher): under the page's lock, and only while the entry is still c's.
func (c *Conn) statNote(status uint32, violation bool) {
	sp, e := c.p.stat, c.st.Load()
	if sp.holds(e) {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		if e.state != statOpen || e.id != c.statID {
			return
		}
	}
	if violation {
		e.rx.violations.Add(1)
	}
	e.status.Or(status)
}

// statClose gives the page's entry back at Close.  The counters go on in a
// private copy, for Info.
func (c *Conn) statClose() {
	e := c.st.Load()
	priv := &statEntry{state: statOpen, since: e.since}
	priv.status.Store(e.status.Load())
	for i := range e.counters() {
		priv.counters()[i].Store(e.counters()[i].Load())
	}
	c.st.Store(priv)
	c.p.stat.close(e)
}

// counters are the entry's tx and rx lines, one word each.
func (e *statEntry) counters() *[16]atomic.Uint64 {
	return (*[16]atomic.Uint64)(unsafe.Pointer(&e.tx))
}

// bump adds n to a counter with one writer (the direction's lock holder):
// a load and a store, no locked instruction on the message path.
func bump(a *atomic.Uint64, n uint64) {
	storeRelease64((*uint64)(unsafe.Pointer(a)), a.Load()+n)
}

// rings counts the wake-ups we made for the peer, both directions.
func (c *Conn) rings() uint64 {
	st := c.st.Load()
	return st.tx.wakeups.Load() + st.rx.wakeups.Load()
}

// countSleep counts a sleep of the waiter in direction bit.
func (c *Conn) countSleep(bit uint64) {
	if st := c.st.Load(); bit == waitRX {
		st.rx.sleeps.Add(1)
	} else {
		st.tx.sleeps.Add(1)
	}
}

// countSpin counts a spin of d by the waiter in direction bit, who holds
// the direction's lock.  Only the page's readers see spin times.
func (c *Conn) countSpin(bit uint64, d time.Duration) {
	sp := c.p.stat
	if sp == nil {
		return
	}
	cycles := sp.cycles(d)
	if st := c.st.Load(); bit == waitRX {
		bump(&st.rx.spinTSC, cycles)
	} else {
		bump(&st.tx.spinTSC, cycles)
	}
}

// tscCalibration is how long after the page's making the TSC's rate is
// taken, for good, from the TSC and the clock then and at the making: the
// reads' own jitter, tens of ns, is lost in it.
const tscCalibration = time.Millisecond

// cycles converts a spin's length to TSC cycles, the page's unit, at the
// rate measured once: the spin is timed with the clock the wait reads
// anyway, and no TSC is read per spin.  0 until the rate is known.
func (sp *statPage) cycles(d time.Duration) uint64 {
	rate := math.Float64frombits(sp.tscPerNs.Load())
	if rate == 0 {
		age, tsc := time.Since(sp.made), rdtsc()
		if age < tscCalibration || tsc <= sp.hdr.clockTSC {
			return 0
		}
		rate = float64(tsc-sp.hdr.clockTSC) / float64(age)
		sp.tscPerNs.Store(math.Float64bits(rate))
	}
	return uint64(float64(d) * rate)
}

// statOpen gives a new connection its entry.
func (c *Conn) statOpen(fd int32, accepted bool) {
	id := statID{
		fd: fd, peerPid: uint32(c.peerPid), peerUID: uint32(c.peerUID), peerGID: uint32(c.peerGID),
		peerSlot: c.peer.slot, since: time.Now().Unix(),
		// Both ends map both blocks at the same address: the lower one
		// names the connection in both entries.
		pair: min(c.meAddr, uint64(uintptr(c.pb))),
	}
	if accepted {
		id.flags = statAccepted
	}
	id.service = serviceLabel(c.service)
	e := c.p.stat.open(&id)
	c.statID = e.id
	c.st.Store(e)
}

// serviceLabel is the service as the page shows it: a path names no
// service, its last component does, as librpal shows it.
func serviceLabel(service string) string {
	if i := strings.LastIndexByte(service, '/'); service != "" && service[0] == '/' && i < len(service)-1 {
		return service[i+1:]
	}
	return service
}

// statListen gives a new listener its entry: a server is found by its
// service before its first client.
func (l *Listener) statListen() {
	id := statID{listener: true, fd: -1, since: time.Now().Unix(), service: serviceLabel(l.service)}
	if rc, err := l.ln.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { id.fd = int32(fd) })
	}
	l.st = l.p.stat.open(&id)
}
