// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listen takes the service's lock file (a live rpal server holds it),
// removes a stale socket left at the path, binds the unixpacket socket and
// starts the accept loop.
func (lc *ListenConfig) listen(service string) (*Listener, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	path, lockPath, err := p.socketPath(service)
	if err != nil {
		return nil, err
	}
	l := &Listener{p: p, service: service, policy: lc.Policy, conns: make(chan *Conn, maxReady),
		ready: make(chan struct{}, maxReady), done: make(chan struct{}), path: path,
		running: make(map[*handshake]struct{}), exited: make(chan struct{}, 1)}
	if lockPath != "" {
		fd, err := lockName(lockPath, service)
		if err != nil {
			return nil, err
		}
		if err := lockFileOurs(fd, lockPath); err != nil {
			unix.Close(fd) // someone's file: not removed
			return nil, err
		}
		l.lock = os.NewFile(uintptr(fd), lockPath)
		if err := removeStaleSocket(path, service); err != nil {
			l.releaseName(false)
			l.lock.Close()
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		if l.lock != nil {
			l.releaseName(false)
			l.lock.Close()
		}
		return nil, err
	}
	if lockPath != "" {
		_ = os.Chmod(path, 0o600)
	}
	ln.SetUnlinkOnClose(false) // Close removes the file before emptying the backlog
	l.ln = ln
	l.statListen()
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// lockName takes a name's lock: flock(LOCK_EX) on "<socket path>.lock",
// which a listener holds while it serves and removes when it stops (as
// librpal does).  A file removed or replaced between our open and our lock
// was a listener's that has stopped since: we lock the file at the path
// then, so that two listeners never each hold a lock of one name.
func lockName(lockPath, service string) (int, error) {
	for tries := 0; ; tries++ {
		fd, err := unix.Open(lockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", lockPath, err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("service %s is already served by a live process: %w", service, syscall.EADDRINUSE)
		}
		if sameFile(fd, lockPath) {
			return fd, nil
		}
		unix.Close(fd)
		if tries == 100 {
			return -1, fmt.Errorf("the lock file %s keeps being replaced: %w", lockPath, syscall.EAGAIN)
		}
	}
}

// lockFileOurs says whether fd is a name's lock file: an empty regular file
// (none is ever written).  Anything else at "<socket path>.lock" is
// someone's, and stays.
func lockFileOurs(fd int, lockPath string) error {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 {
		return nil
	}
	return fmt.Errorf("%s is in the way: it is not a lock file of rpal (an empty file), and is left alone: %w",
		lockPath, syscall.EEXIST)
}

// removeStaleSocket removes the socket at path that a listener which has
// stopped left; it fails, removing nothing, where anything else is there.
// Our lock says no rpal listener holds the name, not that nobody serves
// there (a listener whose lock file was removed, another program's
// socket): only a refused connection shows the socket stale, and any
// other answer leaves it serving (EADDRINUSE).  unlink, not os.Remove,
// which would remove an empty directory put there meanwhile.
func removeStaleSocket(path, service string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("cannot look at %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is in the way: it is not a socket, and is left alone: %w", path, syscall.EEXIST)
	}
	err := probeSocket(path)
	switch err {
	case unix.ECONNREFUSED:
		_ = unix.Unlink(path)
		return nil
	case unix.ENOENT:
		return nil
	case nil:
		return fmt.Errorf("service %s is in use: its socket %s is live (a connect was accepted), and is left alone: %w",
			service, path, syscall.EADDRINUSE)
	}
	var probe probeError
	if errors.As(err, &probe) {
		return fmt.Errorf("cannot probe the socket %s: %w", path, probe.err)
	}
	return fmt.Errorf("service %s is in use: its socket %s is live (a connect failed: %v), and is left alone: %w",
		service, path, err, syscall.EADDRINUSE)
}

// probeError: no probe could be made (no socket for it).
type probeError struct{ err error }

func (e probeError) Error() string { return e.err.Error() }

// probeSocket connects to the socket at path and closes the connection at
// once (a listener of ours drops it as an empty handshake): nil if it was
// accepted, else the connect error, or a probeError.
func probeSocket(path string) error {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return probeError{err}
	}
	defer unix.Close(s)
	return unix.Connect(s, &unix.SockaddrUnix{Name: path})
}

// sameFile says whether the file at path (not followed) is fd's.
func sameFile(fd int, path string) bool {
	var held, there unix.Stat_t
	return unix.Fstat(fd, &held) == nil && unix.Lstat(path, &there) == nil &&
		held.Ino == there.Ino && held.Dev == there.Dev
}

// releaseName removes the socket file where we bound it, then the lock file
// we hold (only that one: a file that replaced it is another's); the lock
// keeps anyone from taking the name until its file is gone.
func (l *Listener) releaseName(bound bool) {
	if bound {
		_ = os.Remove(l.path)
	}
	if sameFile(int(l.lock.Fd()), l.lock.Name()) {
		_ = os.Remove(l.lock.Name())
	}
}

// drainBacklog accepts the connections waiting in ln's backlog and closes
// them as sockets a peer writes to (closePeerFd).
func drainBacklog(ln *net.UnixListener) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		for range 4096 { // the backlog Go asks for: net.core.somaxconn, 4096 by default
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				return
			}
			closePeerFd(nfd)
		}
	})
}

// backlogWaiting says whether a client waits in ln's backlog.
func backlogWaiting(ln *net.UnixListener) bool {
	return pollIn(ln.SyscallConn)
}

// hasMessage says whether a message (a HELLO) waits on uc.
func hasMessage(uc *net.UnixConn) bool {
	return pollIn(uc.SyscallConn)
}

func pollIn(sc func() (syscall.RawConn, error)) bool {
	raw, err := sc()
	if err != nil {
		return false
	}
	in := false
	_ = raw.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		in = err == nil && n > 0 && pfd[0].Revents&unix.POLLIN != 0
	})
	return in
}

// serverHandshake runs the server's side of the handshake with one client
// (docs/PROTOCOL.md §3): HELLO in, checks, WELCOME out.
func (l *Listener) serverHandshake(h *handshake) (*Conn, error) {
	p, uc := l.p, h.uc
	msg, fds, err := recvHandshake(uc)
	l.spoke(h)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if l.isClosed() {
				return nil, fmt.Errorf("a client's handshake ended by the listener's close: %w", net.ErrClosed)
			}
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
	// A client whose policy refuses us answers with a REFUSE instead of a
	// HELLO and hangs up: say that, not that it broke the protocol.
	if r, ok := parseRefuse(msg); ok {
		closeFds(fds)
		return nil, refused(syscall.Errno(r.Errno), "client pid %d refused us: %s", cred.Pid, r.Reason)
	}
	if !l.policy.allows(cred.Uid, cred.Gid) {
		closeFds(fds)
		why := fmt.Sprintf("peer pid %d uid %d gid %d is not allowed by policy", cred.Pid, cred.Uid, cred.Gid)
		sendRefuse(uc, syscall.EACCES, why)
		return nil, refused(syscall.EACCES, "refused a client: %s", why)
	}
	// Only now does the client cost us a connection: not more of them
	// than Accept takes, however many clients come.
	if !l.waitReady(h.start.Add(p.cfg.HandshakeTimeout / 2)) {
		closeFds(fds)
		why := fmt.Sprintf("server is not accepting connections: %d made are waiting for Accept", maxReady)
		sendRefuse(uc, syscall.EAGAIN, why)
		return nil, refused(syscall.EAGAIN, "refused client pid %d: %s", cred.Pid, why)
	}
	c, err := l.makeConn(h, msg, fds, cred)
	if err != nil {
		<-l.ready
	}
	return c, err
}

// makeConn answers a client whose HELLO passed the policy: the rest of
// the server's handshake.
func (l *Listener) makeConn(h *handshake, msg []byte, fds []int, cred *unix.Ucred) (*Conn, error) {
	p, uc := l.p, h.uc
	s, err := p.newSide()
	if err != nil {
		closeFds(fds)
		// The client's only clue: say why (no room in our arena, no
		// descriptor for a doorbell), with the errno of that cause.
		errno := syscall.ENOMEM
		var e syscall.Errno
		if errors.As(err, &e) {
			errno = e
		}
		sendRefuse(uc, errno, "server cannot create a connection: "+err.Error())
		return nil, fmt.Errorf("refused client pid %d: %w", cred.Pid, err)
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
		if l.isClosed() {
			return nil, fmt.Errorf("client pid %d: handshake ended by the listener's close: %w", cred.Pid, net.ErrClosed)
		}
		return nil, fmt.Errorf("client pid %d went away during the handshake: %w", cred.Pid, err)
	}
	// Out of the running set before its deadline is cleared: Close expires
	// the deadlines of the handshakes it finds there, and one expired now
	// would end the connection's watcher, which takes that for a hang-up.
	l.mu.Lock()
	delete(l.running, h)
	closing := l.closing
	l.mu.Unlock()
	if closing {
		c.Close()
		return nil, fmt.Errorf("client pid %d: handshake ended by the listener's close: %w", cred.Pid, net.ErrClosed)
	}
	_ = uc.SetDeadline(time.Time{})
	c.accepted = true
	c.watch()
	return c, nil
}
