// SPDX-License-Identifier: MIT

package rpal

import (
	"container/list"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// process is this process's place in the address map: the reserved region,
// the slot it owns, its arena and the peers' arenas it maps.
type process struct {
	cfg        Config
	rundir     string
	region     unsafe.Pointer // cfg.RegionBase
	regionSize uint64
	slot       uint32
	lockFile   *os.File // holds the OFD lock on byte slot of slots.lock
	lockFd     uintptr  // lockFile's descriptor: our mapped-byte locks too
	memfd      int
	arena      unsafe.Pointer // slot base; our arena, read-write
	arenaAddr  uint64
	nonce      uint64
	alloc      *allocator

	stat *statPage // nil without a statistics page

	mu    sync.Mutex // peers
	peers map[uint32]*peerMap
	conns atomic.Int32

	liveMu sync.Mutex
	live   map[*Conn]struct{} // open connections (reapAcks)

	lingerMu  sync.Mutex
	lingerers list.List // closed connections whose block lingers, oldest first
}

// proc is this process's place, set by the first successful Init.
var (
	procMu sync.Mutex
	proc   *process
)

// Init reserves the region, claims a slot and creates this process's arena,
// like rpal_init().  cfg may be nil (DefaultConfig).  Other functions
// (Dial, Listen, Alloc, ProcessStats and the like) initialise with
// DefaultConfig on first use, so a Config of one's own must be given to
// Init before any of them: once the process is initialised, by Init or by
// them, Init fails.
func Init(cfg *Config) error {
	procMu.Lock()
	defer procMu.Unlock()
	if proc != nil {
		// Often by a Dial or Listen that came first, with DefaultConfig:
		// cfg was not applied, and the caller should know why.
		return errors.New("rpal: already initialised (by an earlier Init, or with DefaultConfig by the first Dial, Listen, Alloc or ProcessStats): call Init before them")
	}
	_, err := initLocked(cfg)
	return err
}

// ensure returns the process's place, initialising it with DefaultConfig on
// first use.
func ensure() (*process, error) {
	procMu.Lock()
	defer procMu.Unlock()
	if proc != nil {
		return proc, nil
	}
	return initLocked(nil)
}

func initLocked(cfg *Config) (*process, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	p := &process{memfd: -1, peers: make(map[uint32]*peerMap), live: make(map[*Conn]struct{})}
	if cfg != nil {
		p.cfg = *cfg
	} else {
		p.cfg = DefaultConfig()
	}
	if err := p.cfg.check(); err != nil {
		return nil, &InitError{Err: err}
	}
	if err := p.setup(); err != nil {
		return nil, &InitError{Err: err}
	}
	proc = p
	return p, nil
}

// addrPtr turns an address of the region into a pointer.  The region is
// not Go memory; the garbage collector ignores pointers into it.
func addrPtr(a uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(nil), uintptr(a))
}

func (p *process) slotAddr(slot uint32) uint64 {
	return p.cfg.RegionBase + uint64(slot)*p.cfg.SlotSize
}

// allocBytes returns the address of n bytes of our arena, or false.
func (p *process) allocBytes(n uint64) (uint64, bool) {
	off, ok := p.alloc.get(n)
	if !ok {
		return 0, false
	}
	return p.arenaAddr + off, true
}

// allocData returns the address of a message buffer of n bytes for a
// connection whose peer holds held bytes of our arena, within the reserve
// and the connection budget (allocator.getData), or false.
func (p *process) allocData(n, held uint64) (uint64, bool) {
	off, ok := p.alloc.getData(n, p.cfg.dataReserve(), held, p.cfg.connBudget())
	if !ok {
		return 0, false
	}
	return p.arenaAddr + off, true
}

// connOpened and connClosed keep the count and the set of open connections.
func (p *process) connOpened(c *Conn) {
	p.conns.Add(1)
	p.liveMu.Lock()
	p.live[c] = struct{}{}
	p.liveMu.Unlock()
}

func (p *process) connClosed(c *Conn) {
	p.conns.Add(-1)
	p.liveMu.Lock()
	delete(p.live, c)
	p.liveMu.Unlock()
}

// lingerAdd and lingerDel keep the list of lingering connections.
func (p *process) lingerAdd(c *Conn) {
	p.lingerMu.Lock()
	c.lingerEl = p.lingerers.PushBack(c)
	p.lingerMu.Unlock()
}

func (p *process) lingerDel(c *Conn) {
	p.lingerMu.Lock()
	if c.lingerEl != nil {
		p.lingerers.Remove(c.lingerEl)
		c.lingerEl = nil
	}
	p.lingerMu.Unlock()
}

// evictLingering frees the oldest lingering connection before its time, for
// an allocation that found no room: without it, a peer that never closes
// its end could keep every new connection out for the linger time.  False
// if none lingers.
func (p *process) evictLingering() bool {
	p.lingerMu.Lock()
	e := p.lingerers.Front()
	if e == nil {
		p.lingerMu.Unlock()
		return false
	}
	c := e.Value.(*Conn)
	p.lingerers.Remove(e)
	c.lingerEl = nil
	p.lingerMu.Unlock()
	c.release() // or wait for the watcher's, already under way
	return true
}

// reapAcks takes back what the peers of every open connection have
// acknowledged: an allocation that found the arena short may fit then,
// though the acknowledgements came on connections nobody sends on.  A
// connection whose sender is busy is left to take its own.  Returns
// whether anything came back.
func (p *process) reapAcks() bool {
	p.liveMu.Lock()
	conns := make([]*Conn, 0, len(p.live))
	for c := range p.live {
		conns = append(conns, c)
	}
	p.liveMu.Unlock()
	n := 0
	for _, c := range conns {
		if c.txMu.TryLock() {
			if !c.closed.Load() && !c.dead.Load() {
				n += c.drainAcks()
			}
			c.txMu.Unlock()
		}
	}
	return n > 0
}

// blockSize is the size of the allocator block at addr of our arena.
func (p *process) blockSize(addr uint64) uint64 {
	return p.alloc.blockSize(addr - p.arenaAddr)
}

func (p *process) freeBytes(addr uint64) bool {
	if addr < p.arenaAddr || addr >= p.arenaAddr+p.cfg.ArenaSize {
		return false
	}
	return p.alloc.put(addr - p.arenaAddr)
}

// ptr turns an address of our own arena into a pointer.
func (p *process) ptr(addr uint64) unsafe.Pointer {
	return unsafe.Add(p.arena, uintptr(addr-p.arenaAddr))
}

// peerMap is a peer's arena mapped read-only at its slot, shared by every
// connection to that incarnation of the peer.  A peer in another process
// is mapped while we hold the read lock on its slot's mapped byte, so the
// slot cannot be claimed anew, and the memory cannot change, until the
// last connection to it is released.
type peerMap struct {
	slot  uint32
	pid   int
	nonce uint64
	addr  uint64
	size  uint64
	base  unsafe.Pointer
	refs  int  // connections using it; under process.mu
	dead  bool // under process.mu

	// Pages of the arena known written, one bit each, and the arena's
	// memfd to look up the others (see pagesWritten); nil and -1 for our
	// own arena.
	written []uint64
	memfd   int
}

// pagesWritten says whether the peer has written every page of
// [addr, addr+n) of its arena (a range inside it, n > 0).  Reading a page
// of a memory file that nobody wrote allocates it, and charges it to the
// reader: a peer that published buffers over its untouched pages would
// fill our memory cgroup at no cost of its own.  Pages once written stay
// so (the arena's future-write seal forbids punching holes), so each is
// looked up once (pagesCheck, also for a range of more than 64 pages,
// which this inline look leaves to it).
func (pm *peerMap) pagesWritten(addr, n uint64) bool {
	if pm.written == nil {
		return true
	}
	first, last := (addr-pm.addr)/pageSize, (addr+n-1-pm.addr)/pageSize
	if first/64 == last/64 {
		want := ^uint64(0) << (first % 64) & (^uint64(0) >> (63 - last%64))
		if atomic.LoadUint64(&pm.written[first/64])&want == want {
			return true
		}
	}
	return pm.pagesCheck(addr, n)
}

func (p *process) markPeerDead(pm *peerMap) {
	p.mu.Lock()
	pm.dead = true
	p.mu.Unlock()
}

// putPeer drops one connection's reference; the last one unmaps and then
// lets the slot go.
func (p *process) putPeer(pm *peerMap) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pm.refs--
	if pm.refs > 0 {
		return
	}
	if p.peers[pm.slot] == pm {
		delete(p.peers, pm.slot)
	}
	if pm.pid != os.Getpid() {
		p.unmapPeer(pm.slot, pm.addr, pm.size)
		closeFd(pm.memfd)
	}
}

// Stats are process-wide counters.
type Stats struct {
	Slot        uint32
	ArenaBase   uint64
	ArenaSize   uint64
	ArenaUsed   uint64 // bytes handed out by the allocator
	ConnBudget  uint64 // bytes of the arena one connection's peer may hold
	BufsInUse   int    // live blocks, connection blocks included
	Conns       int    // open connections
	PeersMapped int    // peer arenas currently mapped
	RuntimeDir  string
	RegionBase  uint64
	SlotSize    uint64
	NrSlots     uint32
}

// ProcessStats reports the process-wide counters; it initialises rpal.
func ProcessStats() (Stats, error) {
	p, err := ensure()
	if err != nil {
		return Stats{}, err
	}
	used, n := p.alloc.stats()
	p.mu.Lock()
	peers := len(p.peers)
	p.mu.Unlock()
	return Stats{
		Slot: p.slot, ArenaBase: p.arenaAddr, ArenaSize: p.cfg.ArenaSize, ArenaUsed: used, ConnBudget: p.cfg.connBudget(),
		BufsInUse: n, Conns: int(p.conns.Load()), PeersMapped: peers, RuntimeDir: p.rundir,
		RegionBase: p.cfg.RegionBase, SlotSize: p.cfg.SlotSize, NrSlots: p.cfg.NrSlots,
	}, nil
}
