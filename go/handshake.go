// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Policy says who may connect: a peer is accepted if AllowSameUID is set and
// its uid equals ours, or its uid is in UIDs, or its gid is in GIDs.  A nil
// *Policy means same uid only.  Both ends check the other.
type Policy struct {
	AllowSameUID bool
	UIDs         []uint32
	GIDs         []uint32
}

func (p *Policy) allows(uc *unix.Ucred) bool {
	if (p == nil || p.AllowSameUID) && int(uc.Uid) == os.Geteuid() {
		return true
	}
	if p == nil {
		return false
	}
	for _, u := range p.UIDs {
		if u == uc.Uid {
			return true
		}
	}
	for _, g := range p.GIDs {
		if g == uc.Gid {
			return true
		}
	}
	return false
}

// refusedError is a handshake that failed on our side or the peer's.
type refusedError struct {
	errno syscall.Errno
	msg   string
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.errno }

func refused(errno syscall.Errno, format string, a ...any) error {
	return &refusedError{errno: errno, msg: fmt.Sprintf(format, a...)}
}

// socketPath maps a service name to its socket address and lock path
// (docs/PROTOCOL.md §2).
func (p *process) socketPath(service string) (addr, lock string, err error) {
	switch {
	case service == "":
		return "", "", fmt.Errorf("empty service name: %w", syscall.EINVAL)
	case service[0] == '@':
		if len(service) > 108 {
			return "", "", fmt.Errorf("service name %s is too long: %w", service, syscall.ENAMETOOLONG)
		}
		return service, "", nil
	case service[0] == '/':
		addr = service
	case strings.Contains(service, "/"):
		return "", "", fmt.Errorf("service name %s contains '/' (use an absolute path): %w", service, syscall.EINVAL)
	default:
		addr = p.rundir + "/" + service + ".sock"
	}
	if len(addr) >= 108 {
		return "", "", fmt.Errorf("socket path for service %s is too long: %w", service, syscall.ENAMETOOLONG)
	}
	return addr, addr + ".lock", nil
}

func peerCred(uc *net.UnixConn) (*unix.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("cannot read peer credentials: %w", cerr)
	}
	return cred, nil
}

func sendRefuse(uc *net.UnixConn, errno syscall.Errno, why string) {
	r := refuse{Errno: int32(errno), Reason: why}
	_ = uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _, _ = uc.WriteMsgUnix(r.marshal(), nil, nil)
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// recvHandshake reads one datagram with at most two descriptors; extras,
// and any with a truncated message, are closed.
func recvHandshake(uc *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, hsSize+16)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if got, rerr := unix.ParseUnixRights(&msgs[i]); rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if err != nil {
		closeFds(fds)
		return nil, nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFds(fds)
		return nil, nil, refused(syscall.EPROTO, "truncated handshake message")
	}
	if n == 0 {
		closeFds(fds)
		return nil, nil, refused(syscall.ECONNRESET, "peer hung up during the handshake")
	}
	if len(fds) > 2 {
		closeFds(fds[2:])
		// Keep the count so the check below refuses it.
		fds = append(fds[:2:2], -1)
	}
	return buf[:n], fds, nil
}

// side is our half of a connection being set up: a fresh block and doorbell.
type side struct {
	blockAddr uint64
	block     unsafe.Pointer
	nonce     uint64
	ringEnt   uint32
	bell      int // our end of the doorbell socket pair: we sleep on it
	ringEnd   int // the other end: sent in our hello, then closed
	cpu       uint32
}

// noCPU is the "unknown" CPU hint.
const noCPU = 0xffffffff

// pinnedCPU returns the one CPU the calling thread may run on, or noCPU.
// Goroutines move between threads, so the Go side knows its CPU only when
// the process is pinned to one (threads inherit the affinity mask); then it
// publishes that CPU as both hints, and neither side spins for a thread
// that needs the CPU the spinner holds (docs/PROTOCOL.md §6).
func pinnedCPU() uint32 {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() != 1 {
		return noCPU
	}
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			return uint32(i)
		}
	}
	return noCPU
}

func (p *process) newSide() (*side, error) {
	n := p.cfg.RingEntries
	size := blockBytes(n, n)
	addr, ok := p.allocBytes(size)
	if !ok {
		return nil, fmt.Errorf("arena exhausted: no room for a connection block: %w", syscall.ENOMEM)
	}
	b := p.ptr(addr)
	clear(unsafe.Slice((*byte)(b), size))
	s := &side{blockAddr: addr, block: b, nonce: randomU64() | 1, ringEnt: n, cpu: pinnedCPU()}
	*(*uint32)(unsafe.Add(b, bMagic)) = blockMagic
	*(*uint16)(unsafe.Add(b, bVersion)) = WireVersion
	*(*uint16)(unsafe.Add(b, bHdrSize)) = blockHdrSize
	*(*uint64)(unsafe.Add(b, bNonce)) = s.nonce
	*(*uint32)(unsafe.Add(b, bRingEntries)) = n
	*(*uint32)(unsafe.Add(b, bAckEntries)) = n
	*(*uint32)(unsafe.Add(b, bRingOff)) = blockHdrSize
	*(*uint32)(unsafe.Add(b, bAckOff)) = blockHdrSize + n*slotSize
	*(*uint32)(unsafe.Add(b, bTxCPU)) = s.cpu // noCPU unless pinned to one
	*(*uint32)(unsafe.Add(b, bRxCPU)) = s.cpu
	// The doorbell: a Unix stream socket pair (ringSocket says why not a
	// pipe).  Our end refuses passed descriptors where the kernel can
	// (6.16 on): a peer could otherwise make our drain the last holder
	// of a file whose release blocks.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		p.freeBytes(addr)
		return nil, fmt.Errorf("cannot create a doorbell: %w", err)
	}
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0) // ENOPROTOOPT before 6.16
	s.bell, s.ringEnd = fds[0], fds[1]
	return s, nil
}

func (p *process) dropSide(s *side) {
	*(*uint32)(unsafe.Add(s.block, bMagic)) = 0
	*(*uint64)(unsafe.Add(s.block, bNonce)) = 0
	p.freeBytes(s.blockAddr)
	unix.Close(s.bell)
	unix.Close(s.ringEnd)
}

func (p *process) helloFor(typ uint16, s *side, service string) hello {
	h := hello{
		Magic: helloMagic, Version: WireVersion, Type: typ, Size: hsSize,
		Pid: uint32(os.Getpid()), Slot: p.slot, NrSlots: p.cfg.NrSlots,
		RegionBase: p.cfg.RegionBase, SlotSize: p.cfg.SlotSize, ArenaSize: p.cfg.ArenaSize,
		ArenaNonce: p.nonce, Block: s.blockAddr, BlockNonce: s.nonce,
		RingEntries: s.ringEnt, AckEntries: s.ringEnt,
	}
	copy(h.Service[:39], service)
	return h
}

// checkPeer checks a hello's geometry against our address map
// (hello_check_peer()); nothing is mapped yet.
func (p *process) checkPeer(h *hello) error {
	c := &p.cfg
	if h.RegionBase != c.RegionBase || h.SlotSize != c.SlotSize || h.NrSlots != c.NrSlots {
		return refused(syscall.EPROTO, "peer's region %#x x %d x %#x differs from ours %#x x %d x %#x",
			h.RegionBase, h.NrSlots, h.SlotSize, c.RegionBase, c.NrSlots, c.SlotSize)
	}
	if h.Slot >= c.NrSlots {
		return refused(syscall.EPROTO, "peer slot %d out of range", h.Slot)
	}
	if h.Slot == p.slot && int(h.Pid) != os.Getpid() {
		return refused(syscall.EADDRINUSE, "peer claims our own slot %d", h.Slot)
	}
	if h.ArenaSize < 1<<20 || h.ArenaSize > c.SlotSize || h.ArenaSize%pageSize != 0 {
		return refused(syscall.EPROTO, "peer arena size %#x invalid", h.ArenaSize)
	}
	for _, e := range []uint32{h.RingEntries, h.AckEntries} {
		if !pow2(uint64(e)) || e < 8 || e > 65536 {
			return refused(syscall.EPROTO, "peer ring or ack entries %d invalid", e)
		}
	}
	base := h.RegionBase + uint64(h.Slot)*h.SlotSize
	bsize := blockBytes(h.RingEntries, h.AckEntries)
	if h.Block%cacheLine != 0 || h.Block < base+pageSize || h.Block >= base+h.ArenaSize || bsize > base+h.ArenaSize-h.Block {
		return refused(syscall.EPROTO, "peer block %#x is not inside its arena", h.Block)
	}
	return nil
}

func checkMemfd(fd int, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refused(syscall.EPROTO, "peer's arena descriptor is not a regular file")
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return refused(syscall.EPROTO, "peer's arena is not a memfd (no seals)")
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return refused(syscall.EPROTO, "peer's arena is not sealed against shrink and grow (seals %#x)", seals)
	}
	if uint64(st.Size) != size {
		return refused(syscall.EPROTO, "peer's arena is %d bytes, its hello says %d", st.Size, size)
	}
	return nil
}

// checkDoorbell: the peer's doorbell must be a connected Unix stream socket
// whose other end is unnamed, as socketpair makes (doorbell_check() in C);
// one connected to a named socket could be a third party's.  On success the
// end is shut for reading (we only send on it).
func checkDoorbell(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return refused(syscall.EPROTO, "peer's doorbell is not a socket")
	}
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err1 != nil || err2 != nil || dom != unix.AF_UNIX || typ != unix.SOCK_STREAM {
		return refused(syscall.EPROTO, "peer's doorbell is not a Unix stream socket")
	}
	// The raw call: unix.Getpeername shows an unnamed address and the
	// abstract name "\x00" alike; only the length tells them apart.
	var sa unix.RawSockaddrUnix
	n := uint32(unsafe.Sizeof(sa))
	_, _, e := unix.Syscall(unix.SYS_GETPEERNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return refused(syscall.EPROTO, "peer's doorbell is not connected: %v", e)
	}
	if n != uint32(unsafe.Sizeof(sa.Family)) {
		return refused(syscall.EPROTO, "peer's doorbell is connected to a named socket, not to the peer's own end")
	}
	// Nothing may wait in the end we hold: we never read it, so closing
	// it would release whatever descriptors the peer sent into it, and
	// releasing a lingering socket blocks.  Shut for reading, it refuses
	// the peer's later sends; what came before must be nothing.
	if err := unix.Shutdown(fd, unix.SHUT_RD); err != nil {
		return refused(syscall.EPROTO, "cannot shut the peer's doorbell for reading: %v", err)
	}
	if q, err := unix.IoctlGetInt(fd, unix.SIOCINQ); err != nil || q != 0 {
		return refused(syscall.EPROTO, "peer's doorbell came with %d bytes queued in it", q)
	}
	return nil
}

// checkBlock compares the peer's mapped block with its hello (block_check()).
func checkBlock(pb unsafe.Pointer, h *hello) error {
	u32 := func(off uintptr) uint32 { return *(*uint32)(unsafe.Add(pb, off)) }
	u16 := func(off uintptr) uint16 { return *(*uint16)(unsafe.Add(pb, off)) }
	if u32(bMagic) != blockMagic || u16(bVersion) != WireVersion || *(*uint64)(unsafe.Add(pb, bNonce)) != h.BlockNonce {
		return refused(syscall.EPROTO, "peer block header does not match its hello")
	}
	if u32(bRingEntries) != h.RingEntries || u32(bAckEntries) != h.AckEntries || u16(bHdrSize) != blockHdrSize ||
		u32(bRingOff) != blockHdrSize || u32(bAckOff) != blockHdrSize+h.RingEntries*slotSize {
		return refused(syscall.EPROTO, "peer block geometry does not match its hello")
	}
	return nil
}

// accept checks a received HELLO or WELCOME with its descriptors and builds
// the connection.  Every descriptor received is consumed (kept or closed).
func (p *process) accept(uc *net.UnixConn, msg []byte, fds []int, typ uint16, cred *unix.Ucred, s *side, service string) (*Conn, error) {
	h, err := checkShape(msg, typ)
	if err != nil {
		closeFds(fds)
		return nil, refused(syscall.EPROTO, "%v", err)
	}
	fail := func(e error) (*Conn, error) { closeFds(fds); return nil, e }
	if int(h.Pid) != int(cred.Pid) {
		return fail(refused(syscall.EPROTO, "hello says pid %d, the socket says %d", h.Pid, cred.Pid))
	}
	if len(fds) != 2 {
		return fail(refused(syscall.EPROTO, "hello carried %d descriptors, expected 2", len(fds)))
	}
	if err := p.checkPeer(&h); err != nil {
		return fail(err)
	}
	if err := checkMemfd(fds[0], h.ArenaSize); err != nil {
		return fail(err)
	}
	if err := checkDoorbell(fds[1]); err != nil {
		return fail(err)
	}
	pm, err := p.mapPeer(fds[0], &h, int(cred.Pid))
	if err != nil {
		var re *refusedError
		if errors.As(err, &re) {
			return fail(err)
		}
		errno := syscall.EPROTO
		errors.As(err, &errno)
		return fail(refused(errno, "%v", err))
	}
	unix.Close(fds[0]) // the mapping keeps the memory
	peerBell := fds[1]
	pb := unsafe.Add(pm.base, uintptr(h.Block-pm.addr))
	if err := checkBlock(pb, &h); err != nil {
		p.putPeer(pm)
		unix.Close(peerBell)
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(int(cred.Pid), unix.PIDFD_NONBLOCK)
	if err != nil {
		p.putPeer(pm)
		unix.Close(peerBell)
		return nil, refused(syscall.EPROTO, "cannot open a pidfd for peer pid %d: %v", cred.Pid, err)
	}
	unix.CloseOnExec(pidfd)
	c := &Conn{
		p: p, service: service, sock: uc, pidfd: os.NewFile(uintptr(pidfd), "rpal-pidfd"),
		me: s.block, meAddr: s.blockAddr,
		ring: unsafe.Add(s.block, blockHdrSize), ringMask: uint64(s.ringEnt - 1),
		acks: unsafe.Add(s.block, uintptr(blockHdrSize+s.ringEnt*slotSize)), ackMask: uint64(s.ringEnt - 1),
		peer: pm, pb: pb,
		pring: unsafe.Add(pb, blockHdrSize), pringMask: uint64(h.RingEntries - 1),
		packs: unsafe.Add(pb, uintptr(blockHdrSize+uint64(h.RingEntries)*slotSize)), packMask: uint64(h.AckEntries - 1),
		pnonce: h.BlockNonce, bufLo: pm.addr + pageSize, bufHi: pm.addr + pm.size, peerBell: peerBell,
		out: make(map[uint64]uint64), outLimit: int(h.AckEntries),
		peerPid: int(cred.Pid), peerUID: int(cred.Uid), peerGID: int(cred.Gid),
		cpu: s.cpu,
	}
	c.lastRungRX.Store(math.MaxUint64)
	c.lastRungTX.Store(math.MaxUint64)
	c.txSpin.init(p.cfg.Spin)
	c.rxSpin.init(p.cfg.Spin)
	c.rxReadyFn = c.rxReady
	dup, err := unix.FcntlInt(uintptr(s.bell), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		p.putPeer(pm)
		unix.Close(peerBell)
		c.pidfd.Close()
		return nil, refused(syscall.EMFILE, "cannot duplicate the doorbell: %v", err)
	}
	c.rxBell = os.NewFile(uintptr(s.bell), "rpal-doorbell")
	c.txBell = os.NewFile(uintptr(dup), "rpal-doorbell")
	c.rxRaw, _ = c.rxBell.SyscallConn()
	c.txRaw, _ = c.txBell.SyscallConn()
	p.conns.Add(1)
	return c, nil
}

// Dialer holds options for connecting to a service.
type Dialer struct {
	// Policy checks the server's credentials; nil means same uid.
	Policy *Policy
}

// Dial connects to a service with the default policy (same uid).
func Dial(service string) (*Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), service)
}

// DialContext connects to a service: it checks the server's credentials,
// exchanges arenas and doorbells, and maps the server's arena read-only.
// Errors unwrap to an errno: ENOENT/ECONNREFUSED (no such service), EACCES
// (credentials refused by either side), EPROTO (the peer spoke garbage),
// ETIMEDOUT, EADDRINUSE (the peer claims our slot).
func (d *Dialer) DialContext(ctx context.Context, service string) (*Conn, error) {
	c, err := d.dial(ctx, service)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rpal", Addr: Addr{service}, Err: err}
	}
	return c, nil
}

func (d *Dialer) dial(ctx context.Context, service string) (*Conn, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	path, _, err := p.socketPath(service)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.cfg.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	ok := false
	defer func() {
		if !ok {
			uc.Close()
		}
	}()
	if err := uc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Cancelling ctx ends the handshake at once.
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cred, err := peerCred(uc)
	if err != nil {
		return nil, err
	}
	if !d.Policy.allows(cred) {
		why := fmt.Sprintf("peer pid %d uid %d gid %d is not allowed by policy", cred.Pid, cred.Uid, cred.Gid)
		sendRefuse(uc, syscall.EACCES, why)
		return nil, refused(syscall.EACCES, "refused server of %s: %s", service, why)
	}
	s, err := p.newSide()
	if err != nil {
		return nil, err
	}
	name := service
	if service[0] == '/' {
		name = ""
	}
	h := p.helloFor(hsHello, s, name)
	if _, _, err := uc.WriteMsgUnix(h.marshal(), unix.UnixRights(p.memfd, s.ringEnd), nil); err != nil {
		p.dropSide(s)
		return nil, fmt.Errorf("cannot send hello to %s: %w", service, err)
	}
	msg, fds, err := recvHandshake(uc)
	if err != nil {
		p.dropSide(s)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, refused(syscall.ETIMEDOUT, "no answer from %s within %v", service, p.cfg.HandshakeTimeout)
		}
		var re *refusedError
		if errors.As(err, &re) && re.errno == syscall.ECONNRESET {
			return nil, refused(syscall.ECONNREFUSED, "%s closed the connection during the handshake", service)
		}
		return nil, err
	}
	if r, isRefuse := parseRefuse(msg); isRefuse {
		closeFds(fds)
		p.dropSide(s)
		return nil, refused(syscall.Errno(r.Errno), "%s refused us: %s", service, r.Reason)
	}
	c, err := p.accept(uc, msg, fds, hsWelcome, cred, s, service)
	if err != nil {
		sendRefuse(uc, refusalErrno(err), err.Error())
		p.dropSide(s)
		return nil, fmt.Errorf("bad welcome from %s: %w", service, err)
	}
	unix.Close(s.ringEnd) // the peer has it: we keep no copy (wakeAll says why)
	_ = uc.SetDeadline(time.Time{})
	ok = true
	c.watch()
	return c, nil
}

// Listener accepts rpal connections on a service name.  Handshakes run
// concurrently: a client that stalls is dropped after the handshake timeout
// without delaying others.
type Listener struct {
	p       *process
	service string
	ln      *net.UnixListener
	lock    *os.File
	policy  *Policy
	conns   chan *Conn
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	refused []error
}

// ListenConfig holds options for listening.
type ListenConfig struct {
	// Policy checks each client's credentials; nil means same uid.
	Policy *Policy
}

// Listen serves a service name with the default policy (same uid).
func Listen(service string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(service)
}

// Listen serves a service name: "<runtime dir>/<name>.sock", a path
// starting with '/', or an abstract name starting with '@'.  It fails with
// EADDRINUSE while a live process serves the name; a stale socket left by a
// dead one is removed.
func (lc *ListenConfig) Listen(service string) (*Listener, error) {
	l, err := lc.listen(service)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rpal", Addr: Addr{service}, Err: err}
	}
	return l, nil
}

func (lc *ListenConfig) listen(service string) (*Listener, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	path, lockPath, err := p.socketPath(service)
	if err != nil {
		return nil, err
	}
	l := &Listener{p: p, service: service, policy: lc.Policy, conns: make(chan *Conn, 16), done: make(chan struct{})}
	if lockPath != "" {
		fd, err := unix.Open(lockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("cannot open %s: %w", lockPath, err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("service %s is already served by a live process: %w", service, syscall.EADDRINUSE)
		}
		l.lock = os.NewFile(uintptr(fd), lockPath)
		_ = os.Remove(path) // holding the lock proves it stale
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		if l.lock != nil {
			l.lock.Close()
		}
		return nil, err
	}
	if lockPath != "" {
		_ = os.Chmod(path, 0o600)
	}
	l.ln = ln
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		uc, err := l.ln.AcceptUnix()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and the like
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.serverHandshake(uc)
			if err != nil {
				uc.Close()
				l.mu.Lock()
				if len(l.refused) < 64 {
					l.refused = append(l.refused, err)
				}
				l.mu.Unlock()
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

func (l *Listener) serverHandshake(uc *net.UnixConn) (*Conn, error) {
	p := l.p
	if err := uc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout)); err != nil {
		return nil, err
	}
	msg, fds, err := recvHandshake(uc)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, refused(syscall.ETIMEDOUT, "a client connected but sent no hello within %v", p.cfg.HandshakeTimeout)
		}
		var re *refusedError
		if errors.As(err, &re) && re.errno == syscall.EPROTO { // truncated
			sendRefuse(uc, re.errno, re.msg)
			return nil, fmt.Errorf("refused a client: %w", err)
		}
		return nil, fmt.Errorf("a client hung up during the handshake: %w", err)
	}
	cred, err := peerCred(uc)
	if err != nil {
		closeFds(fds)
		sendRefuse(uc, syscall.EACCES, "cannot read peer credentials")
		return nil, err
	}
	if !l.policy.allows(cred) {
		closeFds(fds)
		why := fmt.Sprintf("peer pid %d uid %d gid %d is not allowed by policy", cred.Pid, cred.Uid, cred.Gid)
		sendRefuse(uc, syscall.EACCES, why)
		return nil, refused(syscall.EACCES, "refused a client: %s", why)
	}
	s, err := p.newSide()
	if err != nil {
		closeFds(fds)
		sendRefuse(uc, syscall.ENOMEM, "server cannot create a connection")
		return nil, err
	}
	c, err := p.accept(uc, msg, fds, hsHello, cred, s, l.service)
	if err != nil {
		sendRefuse(uc, refusalErrno(err), err.Error())
		p.dropSide(s)
		return nil, fmt.Errorf("refused client pid %d: %w", cred.Pid, err)
	}
	w := p.helloFor(hsWelcome, s, "")
	_, _, err = uc.WriteMsgUnix(w.marshal(), unix.UnixRights(p.memfd, s.ringEnd), nil)
	unix.Close(s.ringEnd) // the peer has it: we keep no copy (wakeAll says why)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("client pid %d went away during the handshake: %w", cred.Pid, err)
	}
	_ = uc.SetDeadline(time.Time{})
	c.watch()
	return c, nil
}

// AcceptConn waits for the next connection and returns it with its message
// API.
func (l *Listener) AcceptConn() (*Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rpal", Addr: Addr{l.service}, Err: net.ErrClosed}
	}
}

// Accept waits for the next connection and returns it as a byte stream
// (net.Listener).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptConn()
	if err != nil {
		return nil, err
	}
	return NewStream(c), nil
}

// Refused returns (and forgets) the errors of handshakes refused since the
// last call: at most 64 are kept.
func (l *Listener) Refused() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.refused
	l.refused = nil
	return r
}

// Close stops listening; connections already accepted stay open.
func (l *Listener) Close() error {
	first := false
	l.once.Do(func() {
		first = true
		close(l.done)
		l.ln.Close()
		l.wg.Wait()
		for {
			select {
			case c := <-l.conns:
				c.Close()
				continue
			default:
			}
			break
		}
		if l.lock != nil {
			l.lock.Close()
		}
	})
	if !first {
		return &net.OpError{Op: "close", Net: "rpal", Addr: Addr{l.service}, Err: net.ErrClosed}
	}
	return nil
}

// Addr returns the service name.
func (l *Listener) Addr() net.Addr { return Addr{l.service} }

// refusalErrno is the errno a REFUSE carries for err: the one a check chose,
// or EPROTO.
func refusalErrno(err error) syscall.Errno {
	var re *refusedError
	if errors.As(err, &re) {
		return re.errno
	}
	return syscall.EPROTO
}
