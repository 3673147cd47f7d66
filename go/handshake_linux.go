// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerCred returns the credentials of a socket's peer (SO_PEERCRED).
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

// sendRefuse tells the peer why we refuse it (a REFUSE), if it still listens.
func sendRefuse(uc *net.UnixConn, errno syscall.Errno, why string) {
	r := refuse{Errno: int32(errno), Reason: why}
	_ = uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _, _ = uc.WriteMsgUnix(r.marshal(), nil, nil)
}

// closeFds closes descriptors a peer passed us without blocking on them.
// The peer may still hold any of them, and every read of a Unix socket
// first takes the socket's read lock, which a read of the peer's own that
// stalls in the middle of its copy (into memory that a FUSE file system it
// serves, or a userfaultfd of its own, never fills) keeps for as long as
// it likes, MSG_DONTWAIT or not: so those sockets are emptied by the
// closer goroutine (see closePeerFd), never on ours.
func closeFds(fds []int) {
	var socks []int
	for _, fd := range fds {
		if fd < 0 {
			continue
		}
		switch {
		case !preparePeerFd(fd):
			closeOrDefer(fd)
		case streamEmpty(fd):
			unix.Close(fd) // as an honest peer's doorbell is
		default:
			socks = append(socks, fd)
		}
	}
	deferClose(socks, false)
}

// streamEmpty says whether the Unix socket fd, which preparePeerFd shut for
// reading, is a stream with nothing queued: then nothing ever will be (a
// send that comes later fails), and its close releases nothing.  The look
// takes no lock a peer can hold.  A stream carries descriptors only with
// bytes; a seqpacket or datagram socket can queue them alone.
func streamEmpty(fd int) bool {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return false
	}
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && n == 0
}

// scmMaxFd is the most descriptors one message can carry (the kernel's
// SCM_MAX_FD).  A control buffer this large is never truncated, so the
// kernel never releases a peer's descriptor on our thread, where a
// lingering socket would block it.
const scmMaxFd = 253

// peerFdDrain is how many messages are taken out of one socket at a time:
// a socket shut for reading holds finitely many, and the closer comes back
// for the rest.
const peerFdDrain = 1024

// How many zero reads in a row end a seqpacket socket we shut, and one its
// peer shut first: more than its send buffer (at most 416 KiB unless raised
// by root) can queue empty messages (see drainPeerFds).
const (
	seqpacketEndRun     = 16
	seqpacketPeerEndRun = 1024
)

// rightsOf returns the descriptors in a control buffer.
func rightsOf(oob []byte) []int {
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for i := range msgs {
			if got, rerr := unix.ParseUnixRights(&msgs[i]); rerr == nil {
				fds = append(fds, got...)
			}
		}
	}
	return fds
}

// closePeerFd closes, without blocking on it, a socket of ours whose other
// end a peer holds (nothing the peer does holds our end's read lock).
// Releasing a socket with unsent data and SO_LINGER set waits for the
// linger time, on whichever thread drops the last reference, and a Unix
// socket releases the descriptors queued in it, Unix sockets among them,
// as deep as the kernel lets them nest.  So a socket's linger is turned
// off, and a Unix socket is shut for reading and emptied before it is
// closed (a listening one: its backlog accepted and emptied).  The
// caller's goroutine takes out at most one message that holds Unix
// sockets; those, and the rest, go to the closer goroutine, which empties
// them the same way, the innermost first.  Honest peers never nest them.
func closePeerFd(fd int) {
	if !preparePeerFd(fd) {
		closeOrDefer(fd)
		return
	}
	r, nested := drainPeerFds(fd)
	handOn(fd, nested, r, false)
}

// closePeerConn closes a Unix socket a peer writes to (a handshake's) as
// closePeerFd does: what it queued there is taken out first.
func closePeerConn(uc *net.UnixConn) {
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			if preparePeerFd(int(fd)) {
				handOnCopy(int(fd))
			}
		})
	}
	uc.Close()
}

// shutUnixDrain shuts the Unix socket fd, which its owner closes, for
// reading and empties it; what it cannot take out now goes with a copy of
// fd to the closer.
func shutUnixDrain(fd int) {
	_ = unix.Shutdown(fd, unix.SHUT_RD)
	handOnCopy(fd)
}

// handOnCopy empties the prepared fd, which its owner closes, handing the
// rest with a copy of it to the closer.
func handOnCopy(fd int) {
	r, nested := drainPeerFds(fd)
	if r == drained {
		deferClose(nested, false)
		return
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		deferClose(nested, false) // out of descriptors: fd's rest goes with its close
		return
	}
	handOn(d, nested, r, false)
}

// fileClosers bounds the goroutines closing other files at once (see
// closeAside); past it, the closer takes them.
var fileClosers = make(chan struct{}, 64)

// closeAside closes a file whose close may wait on whoever serves it (a
// FUSE file system the peer runs may never answer its flush) in a
// goroutine of its own: the descriptor leaves our table as that close
// starts (so a fork does not inherit it), and one file that never closes
// holds neither the caller nor the closer's sockets.
func closeAside(fd int) {
	select {
	case fileClosers <- struct{}{}:
		go func() {
			unix.Close(fd)
			<-fileClosers
		}()
	default:
		deferClose([]int{fd}, false)
	}
}

// closeOrDefer closes a descriptor that is no Unix socket.  Sockets
// (linger off) and memory files close at once; any other file may make its
// close wait on the peer (see closeAside): a FUSE file it serves, or a
// pipe, whose close (and any fcntl of it) takes the pipe's mutex, which
// the peer holds for as long as a splice from an idle socket into the pipe
// waits.  Each look reaches no file system and takes no lock the peer can
// hold.  Honest peers pass only sockets and memfds.
func closeOrDefer(fd int) {
	if _, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err == nil {
		unix.Close(fd)
	} else if _, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err == nil {
		unix.Close(fd)
	} else {
		closeAside(fd)
	}
}

// preparePeerFd turns a socket's linger off; a Unix socket it also shuts
// for reading, so that nothing more can be queued in it nor connect to it,
// and reports true: it is to be emptied before its close.  A seqpacket
// socket is shut once it reads empty (see drainPeerFds).
func preparePeerFd(fd int) bool {
	// setsockopt, not fstat: it reaches no file system (see closeOrDefer).
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{}); err == unix.ENOTSOCK {
		return false
	}
	if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
		return false
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_SEQPACKET {
		_ = unix.Shutdown(fd, unix.SHUT_RD)
	}
	return true
}

type drainResult int

const (
	drained drainResult = iota
	drainMore
	drainFailed
)

// peerShut says whether the connected socket fd is shut for reading: its
// peer closed or shut down writing, or we shut it on an earlier pass (taken
// as the peer's: the longer run, to be safe).
func peerShut(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, _ := unix.Poll(pfd, 0)
	return n == 1 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
}

// drainPeerFds takes out what waits in the prepared Unix socket fd
// (messages, or a listener's backlog), closing what came with it, until
// it is empty or something brings Unix sockets: those are returned
// (prepared), and fd has more to take after them.
func drainPeerFds(fd int) (drainResult, []int) {
	var nested []int
	msgs, zeros, run := 0, 0, 0 // run: 0 until the socket is shut
	listening, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	typ, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	var buf [4096]byte
	oob := make([]byte, unix.CmsgSpace(scmMaxFd*4))
	for msgs < peerFdDrain {
		if listening != 0 {
			s, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EAGAIN {
				return drained, nested
			}
			if err != nil {
				return drainFailed, nested
			}
			preparePeerFd(s) // a connected Unix socket, what its client sent queued
			if nested = append(nested, s); len(nested) == scmMaxFd {
				return drainMore, nested
			}
			continue
		}
		n, oobn, _, _, err := unix.Recvmsg(fd, buf[:], oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		// Once shut for reading (by us, or by the peer's close or
		// shutdown), a seqpacket socket reads 0 both at its end and for
		// an empty message.  So it is read while not shut, until empty
		// (EAGAIN), then shut: what came in between is read after it,
		// and a run of zero reads longer than such a burst can be is its
		// end; where the peer shut it first, longer than all the empty
		// messages it could queue.  A stream reads 0 only at its end.
		if err == unix.EAGAIN && typ == unix.SOCK_SEQPACKET && run == 0 {
			_ = unix.Shutdown(fd, unix.SHUT_RD)
			run = seqpacketEndRun
			continue
		}
		if err == nil && n == 0 && oobn == 0 && typ == unix.SOCK_SEQPACKET {
			if run == 0 && !peerShut(fd) {
				msgs++ // an empty message
				continue
			}
			if run == 0 {
				run = seqpacketPeerEndRun
			}
			if zeros++; zeros < run {
				continue
			}
		}
		if err == unix.EAGAIN || (err == nil && n == 0 && oobn == 0) {
			return drained, nested
		}
		// A reset (the peer closed with our data unread) is reported
		// once; what waits behind it is still there to take.
		if err != nil && err != unix.ECONNRESET && err != unix.EPIPE {
			return drainFailed, nested
		}
		msgs++
		if err != nil {
			continue
		}
		zeros = 0
		for _, got := range rightsOf(oob[:oobn]) {
			if preparePeerFd(got) {
				nested = append(nested, got)
			} else {
				closeOrDefer(got)
			}
		}
		if len(nested) > 0 {
			break
		}
	}
	// More to take later: no more to come meanwhile.  (The closer may
	// then take a long run of empty messages for the end, and block on
	// what follows them; only the closer.)
	if typ == unix.SOCK_SEQPACKET && run == 0 {
		_ = unix.Shutdown(fd, unix.SHUT_RD)
	}
	return drainMore, nested
}

// handOn closes the drained fd, or hands it to the closer below what it
// brought; one that failed to empty is the closer's to close (only it may
// block on one).
func handOn(fd int, nested []int, r drainResult, onCloser bool) {
	if r == drained || (r == drainFailed && onCloser) {
		unix.Close(fd)
		deferClose(nested, onCloser)
		return
	}
	deferClose(append([]int{fd}, nested...), onCloser)
}

// closerMax: past this many, the closer closes what it finds instead of
// keeping it, so the descriptor table never runs out (only the closer may
// then block).
const closerMax = 4096

// The closer: one goroutine, running while it has sockets to empty.  Its
// list is a stack: what a socket brings is emptied before the rest of that
// socket, so a nest costs about its depth in descriptors held.
var closer struct {
	mu      sync.Mutex
	fds     []int
	running bool
}

func deferClose(fds []int, onCloser bool) {
	if len(fds) == 0 {
		return
	}
	closer.mu.Lock()
	var drop []int
	for _, fd := range fds {
		if onCloser && len(closer.fds) >= closerMax {
			drop = append(drop, fd)
		} else {
			closer.fds = append(closer.fds, fd)
		}
	}
	start := !closer.running && len(closer.fds) > 0
	closer.running = closer.running || start
	closer.mu.Unlock()
	for _, fd := range drop {
		unix.Close(fd)
	}
	if start {
		go runCloser()
	}
}

func runCloser() {
	for {
		closer.mu.Lock()
		if len(closer.fds) == 0 {
			closer.running = false
			closer.mu.Unlock()
			return
		}
		fd := closer.fds[len(closer.fds)-1]
		closer.fds = closer.fds[:len(closer.fds)-1]
		closer.mu.Unlock()
		r, nested := drainPeerFds(fd)
		handOn(fd, nested, r, true)
	}
}

// takeQueued takes out, without blocking, the messages queued in a
// connection's socket, closing what came with them (closePeerFd); true if
// the socket is empty then.  Once it refuses descriptors, its close can
// then release nothing that blocks.
func takeQueued(fd int) bool {
	var buf [hsSize]byte
	oob := make([]byte, unix.CmsgSpace(scmMaxFd*4))
	for range peerFdDrain {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf[:], oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if err == unix.EAGAIN {
			return true
		}
		if err != nil || (n == 0 && oobn == 0 && peerShut(fd)) {
			return false // gone, or at its end: emptied at the close
		}
		closeFds(rightsOf(oob[:oobn]))
	}
	return false
}

// recvHandshake reads one datagram with at most two descriptors; extras,
// and any with a truncated message, are closed.
func recvHandshake(uc *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, hsSize+16)
	oob := make([]byte, unix.CmsgSpace(scmMaxFd*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		fds = rightsOf(oob[:oobn])
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
		// Keep the count, for the check below to refuse and name it.
		for i := 2; i < len(fds); i++ {
			fds[i] = -1
		}
	}
	return buf[:n], fds, nil
}

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

// newSide allocates and initialises our block of a new connection and
// creates its doorbell.
func (p *process) newSide() (*side, error) {
	n := p.cfg.RingEntries
	size := blockBytes(n, n)
	addr, ok := p.allocBytes(size)
	for !ok && p.evictLingering() {
		addr, ok = p.allocBytes(size)
	}
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
	bellsRefuseFds.Store(unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0) == nil) // ENOPROTOOPT before 6.16
	s.bell, s.ringEnd = fds[0], fds[1]
	return s, nil
}

// dropSide undoes newSide for a handshake that failed.
func (p *process) dropSide(s *side) {
	*(*uint32)(unsafe.Add(s.block, bMagic)) = 0
	*(*uint64)(unsafe.Add(s.block, bNonce)) = 0
	p.freeBytes(s.blockAddr)
	closePeerFd(s.bell) // the peer may have queued descriptors in it
	unix.Close(s.ringEnd)
}

// checkMemfd: the peer's arena must be a memfd sealed against shrinking and
// growing (so our mapping can never fault) of the size its hello says.
func checkMemfd(fd int, size uint64) error {
	// Seals first: only memory files have them, and the look reaches no
	// file system, so a file a peer serves itself (FUSE) cannot block it.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return refused(syscall.EPROTO, "peer's arena is not a memfd (no seals)")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refused(syscall.EPROTO, "peer's arena descriptor is not a regular file")
	}
	// A hugetlb memfd maps only while huge pages are free.
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		return refused(syscall.EPROTO, "peer's arena is not an ordinary memfd (hugetlb?)")
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return refused(syscall.EPROTO, "peer's arena is not sealed against shrink and grow (seals %#x)", seals)
	}
	// Nobody else can map it writable, and nobody can punch holes in it:
	// a page we found written stays so (see pagesWritten).
	if seals&unix.F_SEAL_FUTURE_WRITE == 0 {
		return refused(syscall.EPROTO, "peer's arena is not sealed against future writes (seals %#x)", seals)
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
	// getsockopt, not fstat: it reaches no file system (see checkMemfd).
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err1 == unix.ENOTSOCK {
		return refused(syscall.EPROTO, "peer's doorbell is not a socket")
	}
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
		what := "hello"
		if typ == hsWelcome {
			what = "welcome"
		}
		return fail(refused(syscall.EPROTO, "%s carried %d descriptors, expected 2", what, len(fds)))
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
	if err := checkMapped(&h, pm); err != nil {
		p.putPeer(pm)
		closeFds([]int{peerBell})
		return nil, err
	}
	pb := unsafe.Add(pm.base, uintptr(h.Block-pm.addr))
	if err := checkBlock(pb, &h); err != nil {
		p.putPeer(pm)
		closeFds([]int{peerBell})
		return nil, err
	}
	pidfd, err := unix.PidfdOpen(int(cred.Pid), unix.PIDFD_NONBLOCK)
	if err != nil {
		p.putPeer(pm)
		closeFds([]int{peerBell})
		return nil, refused(syscall.EPROTO, "cannot open a pidfd for peer pid %d: %v", cred.Pid, err)
	}
	unix.CloseOnExec(pidfd)
	// The connection socket carries nothing after the handshake: refuse
	// descriptors on it where the kernel can (6.16 on), and take out what
	// the peer queued before that; the watcher closes what an older
	// kernel lets through (closePeerFd), and release empties the socket
	// first unless it is known empty (sockEmpty).
	sockEmpty := false
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			sockEmpty = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0) == nil && takeQueued(int(fd))
		})
	}
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
		cpu: s.cpu, sockEmpty: sockEmpty,
	}
	c.lastRungRX.Store(math.MaxUint64)
	c.lastRungTX.Store(math.MaxUint64)
	c.txSpin.init(p.cfg.Spin, p.cfg.Wait)
	c.rxSpin.init(p.cfg.Spin, p.cfg.Wait)
	c.rxReadyFn = c.rxReady
	dup, err := unix.FcntlInt(uintptr(s.bell), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		p.putPeer(pm)
		closeFds([]int{peerBell})
		c.pidfd.Close()
		return nil, refused(syscall.EMFILE, "cannot duplicate the doorbell: %v", err)
	}
	c.rxBell = os.NewFile(uintptr(s.bell), "rpal-doorbell")
	c.txBell = os.NewFile(uintptr(dup), "rpal-doorbell")
	c.rxRaw, _ = c.rxBell.SyscallConn()
	c.txRaw, _ = c.txBell.SyscallConn()
	sockFd := int32(-1)
	if raw, err := uc.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { sockFd = int32(fd) })
	}
	c.statOpen(sockFd, typ == hsHello)
	p.connOpened(c)
	return c, nil
}
