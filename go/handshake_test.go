// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestConfigEnv(t *testing.T) {
	t.Setenv("RPAL_NR_SLOTS", "0x10")
	t.Setenv("RPAL_RING_ENTRIES", "010") // decimal ten, never octal
	c := DefaultConfig()
	if c.NrSlots != 16 || c.RingEntries != 10 {
		t.Fatalf("nr_slots %d ring_entries %d", c.NrSlots, c.RingEntries)
	}
	if err := c.check(); err == nil {
		t.Fatal("ring_entries 10 accepted")
	}
	t.Setenv("RPAL_RING_ENTRIES", "")
	// A bad value from the environment: the error gives it in decimal
	// and names the variable.
	t.Setenv("RPAL_ARENA_SIZE", "12")
	c = DefaultConfig()
	if err := c.check(); err == nil || !strings.Contains(err.Error(), "arena size 12 (0xc)") ||
		!strings.Contains(err.Error(), "from RPAL_ARENA_SIZE=12") {
		t.Fatalf("RPAL_ARENA_SIZE=12: %v", err)
	}
	t.Setenv("RPAL_ARENA_SIZE", "")
	t.Setenv("RPAL_HANDSHAKE_MS", "0")
	c = DefaultConfig()
	if err := c.check(); err == nil || !strings.Contains(err.Error(), "from RPAL_HANDSHAKE_MS=0") {
		t.Fatalf("RPAL_HANDSHAKE_MS=0: %v", err)
	}
	t.Setenv("RPAL_HANDSHAKE_MS", "")
	c = DefaultConfig()
	c.ArenaSize = 12
	if err := c.check(); err == nil || strings.Contains(err.Error(), "RPAL_") {
		t.Fatalf("ArenaSize 12 set in code: %v", err)
	}
	t.Setenv("RPAL_RING_ENTRIES", "12x")
	c = DefaultConfig()
	if err := c.check(); err == nil || c.RingEntries != DefaultRingEntries {
		t.Fatalf("malformed variable: %v, %d", err, c.RingEntries)
	}
	t.Setenv("RPAL_RING_ENTRIES", "")
	t.Setenv("RPAL_SPIN_US", "7")
	t.Setenv("RPAL_STREAM_SPIN_US", "0")
	c = DefaultConfig()
	if err := c.check(); err != nil || c.Spin != 7*time.Microsecond || c.StreamSpin != 0 {
		t.Fatalf("spin %v stream spin %v: %v", c.Spin, c.StreamSpin, err)
	}
	c.StreamSpin = 11 * time.Second
	if err := c.check(); err == nil {
		t.Fatal("stream spin of 11 s accepted")
	}
	for i, name := range []string{"adaptive", "spin", "sleep"} {
		t.Setenv("RPAL_WAIT", name)
		if c = DefaultConfig(); c.check() != nil || c.Wait != WaitPolicy(i) || c.Wait.String() != name {
			t.Fatalf("RPAL_WAIT=%s: %v (%v)", name, c.Wait, c.check())
		}
	}
	t.Setenv("RPAL_WAIT", "fast")
	if c = DefaultConfig(); c.check() == nil || !strings.Contains(c.check().Error(), "RPAL_WAIT") {
		t.Fatalf("RPAL_WAIT=fast: %v", c.check())
	}
	t.Setenv("RPAL_WAIT", "")
	c = DefaultConfig()
	c.Wait = 3
	if err := c.check(); err == nil {
		t.Fatal("wait policy 3 accepted")
	}
}

func TestDialErrors(t *testing.T) {
	if _, err := DialConn(uniqueName("nobody")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no such service: %v", err)
	}
	name, _ := newService(t)
	if _, err := Listen(name); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener: %v", err)
	}
	// A name with a NUL byte is refused: the kernel would end the socket
	// path there and reach another service's socket.
	path := t.TempDir() + "/s.sock"
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	for _, s := range []string{path + "\x00other", "a\x00b"} {
		c, err := DialConn(s)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("dial %q: %v; want EINVAL saying the name has a NUL byte", s, err)
		}
		if _, err := Listen(s); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("listen %q: %v; want EINVAL saying the name has a NUL byte", s, err)
		}
	}
}

func TestPolicyRefused(t *testing.T) {
	name := uniqueName("policy")
	lc := ListenConfig{Policy: &Policy{UIDs: []uint32{uint32(os.Geteuid()) + 12345}}}
	l, err := lc.Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = DialConn(name)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("want EACCES, got %v", err)
	}
	t.Log(err)
	// The client refuses a server it does not trust, too.
	name2, l2 := newService(t)
	d := Dialer{Policy: &Policy{GIDs: []uint32{999999}}}
	if _, err := d.DialContext(t.Context(), name2); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("client policy: %v", err)
	}
	// The server records the client's refusal as one, with its reason.
	var errs []error
	for end := time.Now().Add(2 * time.Second); len(errs) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		errs = l2.Refused()
	}
	if len(errs) != 1 || !errors.Is(errs[0], syscall.EACCES) || !strings.Contains(errs[0].Error(), "refused us") ||
		!strings.Contains(errs[0].Error(), "not allowed by policy") {
		t.Fatalf("the server's record of a client that refused it: %v; want EACCES, refused us, and the client's reason", errs)
	}
}

// A peer's refusal text is taken as printable ASCII only: it goes into
// our errors and logs, where escape sequences would drive a terminal.
func TestRefuseReasonPrintable(t *testing.T) {
	b := (&refuse{Errno: -5}).marshal()
	for i := 16; i < 128; i++ {
		b[i] = 0x80 // no NUL at all
	}
	copy(b[16:], "\x1b[2J%n\r\n\x7f")
	r, ok := parseRefuse(b)
	if !ok {
		t.Fatal("parseRefuse refused a well-formed REFUSE")
	}
	if r.Errno != eproto {
		t.Errorf("errno %d passed on", r.Errno)
	}
	if len(r.Reason) != 111 {
		t.Errorf("reason of %d bytes, want 111", len(r.Reason))
	}
	for i := 0; i < len(r.Reason); i++ {
		if c := r.Reason[i]; c < 0x20 || c > 0x7e {
			t.Fatalf("byte %#x at %d of %q", c, i, r.Reason)
		}
	}
}

// readRefusal reads the server's answer to a hello within 2 s and returns
// it as a REFUSE; ok is false for anything else.
func readRefusal(t *testing.T, c net.Conn) (r refuse, ok bool) {
	t.Helper()
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return parseRefuse(buf[:n])
}

// A client that sends garbage, or nothing, is refused without disturbing
// the listener.
func TestBadHello(t *testing.T) {
	name, l := newService(t)
	p, _ := ensure()
	path, _, _ := p.socketPath(name)
	c, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	junk := make([]byte, hsSize)
	copy(junk, "RPAL but not really")
	if _, err := c.Write(junk); err != nil {
		t.Fatal(err)
	}
	r, ok := readRefusal(t, c)
	if !ok || r.Errno != int32(syscall.EPROTO) {
		t.Fatalf("want REFUSE/EPROTO, got %+v", r)
	}
	t.Logf("refused: %s", r.Reason)

	// Silence: dropped after the handshake timeout.
	c2, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c2.Read(make([]byte, 256)); err == nil {
		t.Fatal("a silent client was not dropped")
	}
	// And a real client still gets through.
	go func() {
		s, err := l.AcceptConn()
		if err == nil {
			echoServer(s)
		}
	}()
	cc, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	echoClient(t, cc, 10)
	cc.Close()
	if errs := l.Refused(); len(errs) < 2 {
		t.Fatalf("refusals recorded: %v", errs)
	} else {
		t.Log(errs)
	}
}

// rawClientSetup makes a service to connect to by hand: this process, the
// service's name, its listener and socket path, and a connection block of
// our own for the hand-made hello (freed when the test ends).
func rawClientSetup(t *testing.T) (*process, string, *Listener, string, *side) {
	t.Helper()
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	name, l := newService(t)
	path, _, _ := p.socketPath(name)
	s, err := p.newSide()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.dropSide(s) })
	return p, name, l, path, s
}

// lockedPipe returns the read end of a pipe whose mutex a splice holds:
// one from an idle socket into the pipe waits for data with the mutex
// held, and every close or fcntl of the pipe waits for it.  release ends
// the splice and closes the rest.
func lockedPipe(t *testing.T) (fd int, release func()) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		unix.Splice(sp[0], nil, p[1], nil, 4096, 0)
		close(done)
	}()
	time.Sleep(100 * time.Millisecond) // the splice is waiting by then
	return p[0], func() {
		unix.Write(sp[1], []byte{1})
		<-done
		unix.Close(p[1])
		unix.Close(sp[0])
		unix.Close(sp[1])
	}
}

// refusedThenClosed sends the hello h with the descriptors fds to the
// listener l at path, closing ours of those in give (the listener then
// holds the only one, or ours is the last, whose close may wait: in a
// goroutine), and checks that it is refused at once (EPROTO, the reason
// saying want), and that l then closes within 2 s: neither waits on what
// the peer does with the descriptors.
func refusedThenClosed(t *testing.T, l *Listener, path string, h *hello, fds, give []int, want string) {
	t.Helper()
	nc, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uc := nc.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix(h.marshal(), unix.UnixRights(fds...), nil); err != nil {
		t.Fatal(err)
	}
	for _, fd := range give {
		go unix.Close(fd)
	}
	r, ok := readRefusal(t, uc)
	if !ok || r.Errno != int32(syscall.EPROTO) || !strings.Contains(r.Reason, want) {
		t.Fatalf("want REFUSE/EPROTO saying %q, got %+v", want, r)
	}
	t.Logf("refused: %s", r.Reason)
	closed := make(chan struct{})
	go func() {
		l.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Listener.Close still waits 2 s after the refusal")
	}
}

// A hello whose arena is a pipe that the peer keeps locked is refused at
// once, and the listener then closes: the pipe is closed in a goroutine of
// its own.
func TestLockedPipeArena(t *testing.T) {
	p, name, l, path, s := rawClientSetup(t)
	fd, release := lockedPipe(t)
	defer release()
	h := p.helloFor(hsHello, s, name)
	refusedThenClosed(t, l, path, &h, []int{fd, s.ringEnd}, []int{fd}, "not a memfd")
}

// stalledRead starts a read of fd into memory that a userfaultfd of ours
// never fills: it takes fd's read lock, finds what is queued and stalls in
// its copy with the lock held, until release.  Skips the test where
// userfaultfd is not allowed (it needs CAP_SYS_PTRACE, or
// vm.unprivileged_userfaultfd).
func stalledRead(t *testing.T, fd int) (release func()) {
	t.Helper()
	const (
		uffdAPI          = 0xaa
		uffdioAPI        = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
		uffdioRegister   = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
		uffdRegMissing   = 1
		uffdRegionLength = 4096
	)
	uffd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno != 0 {
		t.Skipf("SKIP: userfaultfd: %v", errno)
	}
	api := struct{ api, features, ioctls uint64 }{api: uffdAPI}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		unix.Close(int(uffd))
		t.Skipf("SKIP: UFFDIO_API: %v", errno)
	}
	buf, err := unix.Mmap(-1, 0, uffdRegionLength, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	reg := struct{ start, len, mode, ioctls uint64 }{uint64(uintptr(unsafe.Pointer(&buf[0]))), uffdRegionLength, uffdRegMissing, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		t.Fatalf("UFFDIO_REGISTER: %v", errno)
	}
	done := make(chan struct{})
	go func() {
		unix.Read(fd, buf[:64])
		close(done)
	}()
	time.Sleep(100 * time.Millisecond) // stalled by then
	return func() {
		unix.Close(int(uffd)) // the stalled copy fails, and the read lets go
		<-done
		unix.Munmap(buf)
	}
}

// A hello whose doorbell is refused (a byte queued in it) while the client
// holds the doorbell's read lock with a read of its own that stalls in the
// middle of its copy: the refusal comes at once and Listener.Close returns;
// the closer goroutine empties the doorbell once the read lets go.
func TestStalledDoorbell(t *testing.T) {
	p, name, l, path, s := rawClientSetup(t)
	bell, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bell[0])
	defer unix.Close(bell[1])
	if _, err := unix.Write(bell[0], []byte{1}); err != nil {
		t.Fatal(err)
	}
	release := stalledRead(t, bell[1])
	defer release()
	h := p.helloFor(hsHello, s, name)
	refusedThenClosed(t, l, path, &h, []int{p.memfd, bell[1]}, nil, "queued")
}

// A peer already connected (so its arena is mapped here) that sends a
// second hello saying its arena is twice as large, its block past the
// mapping, is refused with EPROTO; its first connection works on.
func TestSecondHelloOfAnotherSize(t *testing.T) {
	a, b := connPair(t) // we are our own peer: our arena is mapped as one
	p, name, l, path, s := rawClientSetup(t)
	big, err := unix.MemfdCreate("twice", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(big)
	if err := unix.Ftruncate(big, int64(2*p.cfg.ArenaSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(big), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE); err != nil {
		t.Fatal(err)
	}
	h := p.helloFor(hsHello, s, name)
	h.Block = p.slotAddr(p.slot) + p.cfg.ArenaSize + pageSize
	h.ArenaSize *= 2
	nc, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uc := nc.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix(h.marshal(), unix.UnixRights(big, s.ringEnd), nil); err != nil {
		t.Fatal(err)
	}
	r, ok := readRefusal(t, uc)
	if !ok || r.Errno != int32(syscall.EPROTO) || !strings.Contains(r.Reason, "mapped here") {
		t.Fatalf("want REFUSE/EPROTO for the arena size, got %+v", r)
	}
	t.Logf("refused: %s", r.Reason)
	// The server notes the refusal after sending it.
	var errs []error
	for end := time.Now().Add(2 * time.Second); len(errs) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		errs = l.Refused()
	}
	if len(errs) != 1 {
		t.Fatalf("refusals recorded: %v", errs)
	}
	if err := a.Send([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if n, err := b.Recv(got); err != nil || string(got[:n]) != "still here" {
		t.Fatalf("the first connection after the refusal: %q, %v", got[:n], err)
	}
}

// A peer's arena must be sealed against shrinking, growing and future
// writes: without the last, its owner could punch holes in it, and a page
// we found written could read as a hole again, allocated at our cost.
func TestCheckMemfdSeals(t *testing.T) {
	const size = 1 << 20
	for _, c := range []struct {
		seals int
		want  string
	}{
		{0, "shrink and grow"},
		{unix.F_SEAL_SHRINK | unix.F_SEAL_GROW, "future writes"},
		{unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE, ""},
	} {
		fd, err := unix.MemfdCreate("seals", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, size); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, c.seals); err != nil {
			t.Fatal(err)
		}
		err = checkMemfd(fd, size)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Fatalf("seals %#x: %v, want %q", c.seals, err, c.want)
		}
	}
}

// A hugetlb memfd, sealed and of the right size, is refused as a peer's
// arena: it maps only while huge pages are free.
func TestCheckMemfdHugetlb(t *testing.T) {
	fd, err := unix.MemfdCreate("huge", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		t.Skipf("no hugetlb memfd here: %v", err)
	}
	defer unix.Close(fd)
	const size = 4 << 20
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Skipf("hugetlb memfd of %d bytes: %v", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE); err != nil {
		t.Fatal(err)
	}
	err = checkMemfd(fd, size)
	if err == nil || !strings.Contains(err.Error(), "hugetlb") {
		t.Fatalf("a hugetlb arena: %v, want a refusal", err)
	}
}

// The doorbell a peer hands over must be one end of a Unix stream socket
// pair with nothing queued in it: not a pipe, not a datagram socket, not
// unconnected, not connected to a named socket that could be a third
// party's.  An accepted one no longer takes the peer's sends.
func TestCheckDoorbell(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	pair := func(typ int, queued bool) int {
		fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		if queued {
			if _, err := unix.Write(fds[0], []byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		return fds[1]
	}
	lone, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lone)
	l, err := net.Listen("unix", "@rpal-test-doorbell-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	named, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	f, err := named.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name string
		fd   int
		want string // "" for accepted
	}{
		{"socket pair end", pair(unix.SOCK_STREAM, false), ""},
		{"socket pair end with a byte queued", pair(unix.SOCK_STREAM, true), "queued"},
		{"pipe write end", p[1], "not a socket"},
		{"datagram pair end", pair(unix.SOCK_DGRAM, false), "not a Unix stream socket"},
		{"unconnected socket", lone, "not connected"},
		{"connected to a named socket", int(f.Fd()), "named socket"},
	} {
		err := checkDoorbell(tc.fd)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// An accepted doorbell no longer takes the peer's sends.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := checkDoorbell(fds[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.SendmsgN(fds[0], []byte{1}, nil, nil, unix.MSG_NOSIGNAL); err != unix.EPIPE {
		t.Errorf("the peer's send into the end we hold: %v, want EPIPE", err)
	}
}

// A HELLO or WELCOME carrying more than two descriptors is refused (EPROTO)
// and every descriptor received is closed: the extras (copies of a pipe's
// write end here) no longer keep the pipe open.  With more than the
// receive buffer holds, the message is truncated and refused too.
func TestHandshakeExtraDescriptors(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	// extras returns n copies of a new pipe's write end and a check that
	// all of them were closed by the receiver once ours are.
	extras := func(n int) ([]int, func()) {
		var pp [2]int
		if err := unix.Pipe2(pp[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		fds := []int{pp[1]}
		for len(fds) < n {
			d, err := unix.Dup(pp[1])
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, d)
		}
		return fds, func() {
			t.Helper()
			closeFds(fds)
			defer unix.Close(pp[0])
			pfd := []unix.PollFd{{Fd: int32(pp[0]), Events: unix.POLLIN}}
			if n, _ := unix.Poll(pfd, 2000); n != 1 || pfd[0].Revents&unix.POLLHUP == 0 {
				t.Errorf("the receiver kept descriptors it refused")
			}
		}
	}

	// Server side: a HELLO with 3, then 10 descriptors (all received: the
	// control buffer has room for as many as a message can carry).
	name, _ := newService(t)
	path, _, _ := p.socketPath(name)
	for _, tc := range []struct {
		n    int
		want string
	}{{1, "carried 3 descriptors"}, {8, "carried 10 descriptors"}} {
		s, err := p.newSide()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := net.Dial("unixpacket", path)
		if err != nil {
			t.Fatal(err)
		}
		uc := nc.(*net.UnixConn)
		more, check := extras(tc.n)
		h := p.helloFor(hsHello, s, name)
		if _, _, err := uc.WriteMsgUnix(h.marshal(), unix.UnixRights(append([]int{p.memfd, s.ringEnd}, more...)...), nil); err != nil {
			t.Fatal(err)
		}
		r, ok := readRefusal(t, uc)
		if !ok || r.Errno != int32(syscall.EPROTO) || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%d descriptors: want REFUSE/EPROTO saying %q, got %+v", 2+tc.n, tc.want, r)
		}
		uc.Close()
		p.dropSide(s)
		check()
	}

	// Client side: a WELCOME with 3 descriptors (no WAKE_PAGE offered).
	sock := t.TempDir() + "/extra.sock"
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	more, check := extras(1)
	go func() {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		_, fds, err := recvHandshake(uc)
		if err != nil {
			return
		}
		closeFds(fds)
		s, err := p.newSide()
		if err != nil {
			return
		}
		defer p.dropSide(s)
		w := p.helloFor(hsWelcome, s, "")
		uc.WriteMsgUnix(w.marshal(), unix.UnixRights(p.memfd, s.ringEnd, more[0]), nil)
		uc.SetReadDeadline(time.Now().Add(2 * time.Second))
		uc.Read(make([]byte, 256)) // the client's REFUSE
	}()
	_, err = DialConn(sock)
	if !errors.Is(err, syscall.EPROTO) || !strings.Contains(err.Error(), "carried 3 descriptors") {
		t.Fatalf("WELCOME with 3 descriptors: %v", err)
	}
	check()
}

// lingeringSocket returns a TCP socket with unsent data and SO_LINGER of
// 30 s: releasing it blocks whoever drops the last reference, for that
// long, unless its linger is turned off first.
func lingeringSocket(t *testing.T) int {
	t.Helper()
	// A small receive window, never read: what we write stays unsent.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // held, never read
		}
	}()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: ln.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-accepted:
		t.Cleanup(func() { c.Close() })
	case <-time.After(2 * time.Second):
		t.Fatal("loopback accept")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 65536)
	for full := 0; full < 5; {
		if _, err := unix.Write(fd, chunk); err != nil {
			full++ // the receiver's window and our buffer fill up
			time.Sleep(10 * time.Millisecond)
		} else {
			full = 0
		}
	}
	var outq int
	if q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ); err == nil {
		outq = q
	}
	if outq == 0 {
		t.Skip("could not leave data unsent on a loopback socket")
	}
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 30}); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	return fd
}

// Before Linux 6.16 a doorbell cannot refuse passed descriptors: a peer can
// queue a socket set to linger with unsent data in ours, whose last close
// blocks for the linger time.  The drain receives and closes it at once.
func TestBellDrainClosesPassedFds(t *testing.T) {
	linger := lingeringSocket(t)
	bell, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bell[0])
	defer unix.Close(bell[1])
	if err := unix.Sendmsg(bell[1], []byte{1}, unix.UnixRights(linger), nil, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(linger) // the doorbell holds the last reference
	was := bellsRefuseFds.Load()
	bellsRefuseFds.Store(false)
	defer bellsRefuseFds.Store(was)
	fds := openFds(t)
	done := make(chan bool, 1)
	go func() { done <- drainBell(bell[0], make([]byte, 64)) }()
	select {
	case rung := <-done:
		if !rung {
			t.Fatal("the drain did not read the ring")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the drain blocked on a lingering socket passed in the doorbell")
	}
	if n := openFds(t); n != fds {
		t.Fatalf("%d descriptors open after the drain, %d before: the passed one was kept", n, fds)
	}
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list /proc/self/fd: %v", err)
	}
	return len(ents)
}

// The same where no drain ran before Close: what a peer queued in our
// doorbell is closed at once, not dropped with the doorbell's last
// descriptor for the kernel to release on the closing thread.
func TestCloseWithPassedFdInBell(t *testing.T) {
	a, b := connPair(t)
	was := bellsRefuseFds.Load()
	bellsRefuseFds.Store(false)
	defer bellsRefuseFds.Store(was)
	// Let our doorbell take descriptors, as it does before 6.16.
	_ = b.rxRaw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 1) })
	linger := lingeringSocket(t)
	if err := unix.Sendmsg(a.peerBell, []byte{1}, unix.UnixRights(linger), nil, unix.MSG_DONTWAIT); err != nil {
		t.Fatalf("queueing a descriptor in the doorbell: %v", err)
	}
	unix.Close(linger)
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on a lingering socket queued in the doorbell")
	}
}

// nestedLingering returns a Unix socket holding, queued in it, a Unix
// socket holding ... depth levels deep, with a lingering socket at the
// bottom.
func nestedLingering(t *testing.T, depth int) int {
	t.Helper()
	inner := lingeringSocket(t)
	for range depth {
		sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Sendmsg(sv[0], []byte{1}, unix.UnixRights(inner), nil, 0); err != nil {
			t.Skipf("the kernel does not nest Unix sockets this deep: %v", err)
		}
		unix.Close(inner) // the queued copy keeps it
		unix.Close(sv[0])
		inner = sv[1]
	}
	return inner
}

// sendAll sends datagrams (an empty one where msgs[i] is empty) with one
// sendmmsg(2), so that the later ones usually wait already when the
// receiver reads the first, and returns how many went: a receiver woken on
// our CPU may run first, and shut the socket before the rest.
func sendAll(t *testing.T, sock int, msgs, oobs [][]byte) int {
	t.Helper()
	type mmsghdr struct {
		hdr unix.Msghdr
		n   uint32
		_   [4]byte
	}
	hdrs := make([]mmsghdr, len(msgs))
	iovs := make([]unix.Iovec, len(msgs))
	for i := range msgs {
		if len(msgs[i]) > 0 {
			iovs[i].Base = &msgs[i][0]
			iovs[i].SetLen(len(msgs[i]))
			hdrs[i].hdr.Iov = &iovs[i]
			hdrs[i].hdr.SetIovlen(1)
		}
		if len(oobs[i]) > 0 {
			hdrs[i].hdr.Control = &oobs[i][0]
			hdrs[i].hdr.SetControllen(len(oobs[i]))
		}
	}
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(sock), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
	if errno != 0 {
		t.Fatalf("sendmmsg: %v", errno)
	}
	return int(n)
}

// listenerHolding returns a listening Unix socket with a connection in its
// backlog, never accepted, that holds fd queued in it.
func listenerHolding(t *testing.T, fd int) int {
	t.Helper()
	l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrUnix{Name: "@rpal-test-backlog-" + strconv.Itoa(os.Getpid())}
	if err := unix.Bind(l, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(l, 4); err != nil {
		t.Fatal(err)
	}
	c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(c, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(c, []byte{1}, unix.UnixRights(fd), nil, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd) // the queued copy keeps it
	unix.Close(c)
	return l
}

// A peer's descriptors are closed without blocking: a lingering socket sent
// beside the hello, queued inside the doorbell it sends, at the bottom of
// Unix sockets nested 8 deep beside the hello, in a connection waiting in
// the backlog of a listening socket sent beside the hello, or sent with a
// message queued behind a hello that is refused (next to it, or after an
// empty one), is refused at once and the listener closes at once.
func TestPeerDescriptorsDoNotBlock(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	for _, where := range []string{"beside the hello", "inside the doorbell", "nested 8 deep beside the hello",
		"in a listener's backlog", "behind a refused hello", "behind a refused hello and an empty message"} {
		t.Run(where, func(t *testing.T) {
			name, l := newService(t)
			path, _, _ := p.socketPath(name)
			accepted := make(chan error, 1)
			go func() {
				_, err := l.Accept()
				accepted <- err
			}()
			var linger int
			switch where {
			case "nested 8 deep beside the hello":
				linger = nestedLingering(t, 8)
			case "in a listener's backlog":
				linger = listenerHolding(t, lingeringSocket(t))
			default:
				linger = lingeringSocket(t)
			}
			bell, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			fds := []int{p.memfd, bell[1]}
			switch where {
			case "beside the hello", "nested 8 deep beside the hello", "in a listener's backlog":
				fds = append(fds, linger)
			case "inside the doorbell":
				if err := unix.Sendmsg(bell[0], []byte{1}, unix.UnixRights(linger), nil, 0); err != nil {
					t.Fatal(err)
				}
			}
			s, err := p.newSide()
			if err != nil {
				t.Fatal(err)
			}
			h := p.helloFor(hsHello, s, name)
			p.dropSide(s)
			bad := h.marshal()
			bad[0] ^= 1 // its magic
			// Connected and sent with nothing between; tried again
			// until every message was queued before the listener
			// read the first.
			var sock int
			for try := 0; ; try++ {
				if sock, err = unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0); err != nil {
					t.Fatal(err)
				}
				if err := unix.Connect(sock, &unix.SockaddrUnix{Name: path}); err != nil {
					t.Fatal(err)
				}
				var msgs, oobs [][]byte
				switch where {
				case "behind a refused hello":
					msgs, oobs = [][]byte{bad, {1}}, [][]byte{unix.UnixRights(fds...), unix.UnixRights(linger)}
				case "behind a refused hello and an empty message":
					msgs, oobs = [][]byte{bad, nil, {1}}, [][]byte{unix.UnixRights(fds...), nil, unix.UnixRights(linger)}
				default:
					msgs, oobs = [][]byte{h.marshal()}, [][]byte{unix.UnixRights(fds...)}
				}
				if sendAll(t, sock, msgs, oobs) == len(msgs) {
					break
				}
				unix.Close(sock)
				if try == 50 {
					t.Skip("the listener read every first message before the rest came")
				}
			}
			f := os.NewFile(uintptr(sock), "client")
			nc, err := net.FileConn(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			uc := nc.(*net.UnixConn)
			// The listener now holds the last references.
			unix.Close(linger)
			unix.Close(bell[0])
			unix.Close(bell[1])
			t0 := time.Now()
			buf := make([]byte, 256)
			uc.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, err := uc.Read(buf)
			if err != nil {
				t.Fatalf("%s: no answer: %v", where, err)
			}
			if r, ok := parseRefuse(buf[:k]); !ok {
				t.Errorf("%s: want a REFUSE, got %d bytes", where, k)
			} else {
				t.Logf("%s: refused in %v: %s", where, time.Since(t0).Round(time.Millisecond), r.Reason)
			}
			uc.Close()
			closed := make(chan struct{})
			go func() { l.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: Listener.Close still blocked after 5 s: a peer's descriptor holds it", where)
			}
			<-accepted
			if d := time.Since(t0); d > 3*time.Second {
				t.Errorf("%s: refusing and closing took %v", where, d)
			}
		})
	}
}

// A listener nobody accepts from holds no more than a socket's backlog
// would let it: maxReady connections made, the rest refused (EAGAIN)
// within their handshake timeout; what Accept takes makes room for the
// next.
func TestListenerBoundsUnaccepted(t *testing.T) {
	name, l := newService(t)
	const clients = 3 * maxReady
	var wg sync.WaitGroup
	var made, again atomic.Int32
	var conns sync.Map
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := DialConn(name)
			switch {
			case err == nil:
				made.Add(1)
				conns.Store(i, c)
			case errors.Is(err, syscall.EAGAIN):
				again.Add(1)
			default:
				t.Errorf("dial %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d clients: %d connections made, %d refused", clients, made.Load(), again.Load())
	if made.Load() != maxReady || again.Load() != clients-maxReady {
		t.Fatalf("without Accept: %d made and %d refused, want %d and %d", made.Load(), again.Load(),
			maxReady, clients-maxReady)
	}
	accepted, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	c, err := DialConn(name)
	if err != nil {
		t.Fatalf("a dial after one Accept: %v", err)
	}
	c.Close()
	conns.Range(func(_, v any) bool { v.(*Conn).Close(); return true })
}

// Clients that connect and never speak cannot hold every handshake: the
// oldest of them makes room for the next client, who is served at once.
func TestListenerDropsSilentClients(t *testing.T) {
	// A few more than the handshakes, and a flood: the real client must
	// not wait a poll interval per silent one ahead of it.
	for _, n := range []int{maxHandshakes + 8, 1000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { testDropsSilentClients(t, n) })
	}
}

// dialRaw connects a bare socket to a listener's path, as a client that
// has not spoken yet; it is closed when the test ends.
func dialRaw(t *testing.T, path string) int {
	t.Helper()
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	return s
}

func testDropsSilentClients(t *testing.T, n int) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
		if m, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && m < n {
			n = m // the rest would wait to connect
		}
	}
	name, l := newService(t)
	path, _, _ := p.socketPath(name)
	for range n {
		dialRaw(t, path)
	}
	go func() {
		for {
			c, err := l.AcceptConn()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if n < 2*maxHandshakes {
		time.Sleep(50 * time.Millisecond) // the silent ones take every handshake
	} // else most still wait in the backlog, ahead of the real client
	t0 := time.Now()
	c, err := DialConn(name)
	if err != nil {
		t.Fatalf("a client behind %d silent ones: %v", n, err)
	}
	c.Close()
	d := time.Since(t0)
	t.Logf("a client behind %d silent ones: served in %v", n, d)
	if d > p.cfg.HandshakeTimeout/2 {
		t.Fatalf("a client behind %d silent ones took %v", n, d)
	}
}

// Listener.Close ends the handshakes under way at once: clients that
// connected and never speak (or speak slowly) do not hold it for the
// handshake timeout.
func TestListenerCloseEndsHandshakes(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	name, l := newService(t)
	path, _, _ := p.socketPath(name)
	for range 3 {
		dialRaw(t, path)
	}
	until(t, "the silent clients' handshakes never started", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.running) == 3
	})
	t0 := time.Now()
	l.Close()
	d := time.Since(t0)
	t.Logf("Close with 3 silent clients: %v (handshake timeout %v)", d, p.cfg.HandshakeTimeout)
	if d > p.cfg.HandshakeTimeout/4 {
		t.Fatalf("Close waited %v for clients that never spoke", d)
	}
}

// Before Linux 6.16 a connection's socket cannot refuse passed
// descriptors either: a peer can queue a socket set to linger with unsent
// data behind more than the watcher has taken out, and whoever drops our
// socket's last descriptor would release it and block for the linger
// time.  Here the socket goes when the connection lingers after Close and
// a new block needs its room (as it goes at the linger's end, or at Close
// where the peer died with a child holding its socket): it is emptied
// first.
func TestReleaseWithPassedFdsInSocket(t *testing.T) {
	a, b := connPair(t)
	// Let b's socket take descriptors, as it does before 6.16.
	if raw, err := b.sock.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 1) })
	}
	b.sockEmpty = false
	linger := lingeringSocket(t)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	raw, err := a.sock.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	send := func(rights []byte) (err error) {
		_ = raw.Control(func(fd uintptr) { err = unix.Sendmsg(int(fd), []byte{1}, rights, nil, unix.MSG_DONTWAIT) })
		return err
	}
	// The hostile peer (a) fills b's socket with harmless descriptors,
	// then queues the lingering socket behind them as soon as there is
	// room: the watcher has all the others to take out first.
	filler := unix.UnixRights(pipe[0], pipe[0], pipe[0], pipe[0], pipe[0], pipe[0], pipe[0], pipe[0])
	n := 0
	for send(filler) == nil {
		n++
	}
	for send(unix.UnixRights(linger)) != nil {
	}
	unix.Close(linger) // b's socket holds the last reference
	fds := openFds(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for b.p.evictLingering() {
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("releasing a connection blocked on a lingering socket queued in its socket behind %d messages", n)
	}
	until(t, "what was queued in the socket is not closed", func() bool { return openFds(t) < fds })
}

// A client that queues a socket set to linger behind its HELLO, before the
// server's socket refuses descriptors, and hangs up before the WELCOME:
// the server's failed handshake closes the connection it made without
// blocking on what was queued.
func TestWelcomeFailsWithPassedFdQueued(t *testing.T) {
	p, name, l, path, s := rawClientSetup(t)
	// The server refuses descriptors once it has read the HELLO: where it
	// did before our second message, the client tries again.
	for try := 1; ; try++ {
		linger := lingeringSocket(t)
		cs, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Connect(cs, &unix.SockaddrUnix{Name: path}); err != nil {
			t.Fatal(err)
		}
		h := p.helloFor(hsHello, s, name)
		if err := unix.Sendmsg(cs, h.marshal(), unix.UnixRights(p.memfd, s.ringEnd), nil, 0); err != nil {
			t.Fatal(err)
		}
		err = unix.Sendmsg(cs, []byte{1}, unix.UnixRights(linger), nil, 0)
		unix.Close(linger)
		unix.Close(cs)
		if err == nil {
			break
		}
		if err != unix.EPERM || try == 100 {
			t.Fatalf("queueing the lingering socket, try %d: %v", try, err)
		}
	}
	var errs []error
	for end := time.Now().Add(2 * time.Second); len(errs) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		errs = l.Refused()
	}
	t.Logf("the server: %v", errs)
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's handshake blocked on a lingering socket its client queued behind its HELLO")
	}
}

// A Config literal that sets only the runtime directory is refused with an
// error that says to start from DefaultConfig, not with the first zero
// field's limit.
func TestConfigLiteralRefused(t *testing.T) {
	c := Config{RuntimeDir: t.TempDir()}
	err := c.check()
	if err == nil || !strings.Contains(err.Error(), "DefaultConfig()") {
		t.Fatalf("check of a Config with only RuntimeDir set: %v; want an error pointing to DefaultConfig()", err)
	}
	d := DefaultConfig()
	d.RuntimeDir = c.RuntimeDir
	if err := d.check(); err != nil {
		t.Fatalf("DefaultConfig with RuntimeDir set: %v", err)
	}
}

// Init after the process is initialised says that it is, and that Init
// must come before the calls that initialise it with DefaultConfig.
func TestInitAfterFirstUse(t *testing.T) {
	if _, err := ensure(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	err := Init(&cfg)
	if err == nil || !strings.Contains(err.Error(), "already initialised") || !strings.Contains(err.Error(), "call Init before") {
		t.Fatalf("Init after first use: %v; want it to say the process is initialised and Init comes first", err)
	}
}

// Listen removes only a stale listener's socket: a file or a directory at
// the path, or a lock file that is not an empty one, stay as they were, and
// Listen fails with EEXIST; a live socket without a lock file (another
// program's, or a listener's whose lock file was removed) stays and still
// answers, and Listen fails with EADDRINUSE; a stale socket is taken over.
func TestListenLeavesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "svc")
	lock := path + ".lock"
	if err := os.WriteFile(path, []byte("important"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, syscall.EEXIST) || !strings.Contains(err.Error(), "is in the way") {
		t.Fatalf("Listen over a file: %v, want EEXIST", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "important" {
		t.Fatalf("the file now holds %q", b)
	}
	if _, err := os.Lstat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a lock file is left beside the file (%v)", err)
	}
	os.Remove(path)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("Listen over a directory: %v, want EEXIST", err)
	}
	if st, err := os.Lstat(path); err != nil || !st.IsDir() {
		t.Fatalf("the directory is gone (%v)", err)
	}
	os.Remove(path)
	if err := os.WriteFile(lock, []byte("notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("Listen beside a foreign lock file: %v, want EEXIST", err)
	}
	if b, _ := os.ReadFile(lock); string(b) != "notes" {
		t.Fatalf("the lock file now holds %q", b)
	}
	os.Remove(lock)

	// A live socket without a lock file: another program's, or a
	// listener's whose lock file was removed.  Left serving.
	foreign, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "is live") {
		t.Fatalf("Listen over another program's live socket: %v, want EADDRINUSE", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the foreign listener no longer answers: %v", err)
	} else {
		c.Close()
	}
	foreign.Close()
	first, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second listener of one path, the first's lock file removed: %v, want EADDRINUSE", err)
	}
	go func() {
		if c, err := first.Accept(); err == nil {
			c.Write([]byte("ping"))
			c.Close()
		}
	}()
	c, err := Dial(path)
	if err != nil {
		t.Fatalf("the first listener no longer answers: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("the first listener's connection: %q, %v", buf, err)
	}
	c.Close()
	first.Close()

	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	unix.Close(s) // a stale socket: nobody listens on it
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
}

// A listener removes its socket and lock files when it closes, so a
// runtime directory keeps no file per name ever served; while it serves,
// a second listener of the name is refused, and once it has closed the
// name is free.  A lock file replaced after it was opened is not the one
// at the path (sameFile), so lockName would take the new one instead.
func TestListenerRemovesItsFiles(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName("files")
	path, lockPath, err := p.socketPath(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, lockPath} {
		if _, err := os.Lstat(f); err != nil {
			t.Fatalf("serving: %v", err)
		}
	}
	if _, err := Listen(name); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second listener: %v, want EADDRINUSE", err)
	}
	l.Close()
	for _, f := range []string{path, lockPath} {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("closed: %s is left (%v)", f, err)
		}
	}
	l, err = Listen(name)
	if err != nil {
		t.Fatalf("the name after its listener closed: %v", err)
	}
	l.Close()

	fd, err := unix.Open(lockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer os.Remove(lockPath)
	if !sameFile(fd, lockPath) {
		t.Fatal("sameFile: a file is not the one at its own path")
	}
	os.Remove(lockPath)
	if nfd, err := unix.Open(lockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600); err == nil {
		unix.Close(nfd)
	}
	if sameFile(fd, lockPath) {
		t.Fatal("sameFile: a replaced file is the one at the path")
	}
}

// One memfd lookup notes every page from the range's first up to the
// peer's first hole as written, so that later messages over those pages
// need none; a range into the hole is refused.
func TestPagesWrittenUpToHole(t *testing.T) {
	const size, written = 4 << 20, 1 << 20
	fd, err := unix.MemfdCreate("written", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, bytes.Repeat([]byte{1}, written), 0); err != nil {
		t.Fatal(err)
	}
	pm := &peerMap{addr: 1 << 30, size: size, memfd: fd, written: make([]uint64, size/pageSize/64)}
	if !pm.pagesWritten(pm.addr+8192, 100) {
		t.Fatal("a written page refused")
	}
	for _, off := range []uint64{300 << 10, written - 64} {
		first, want := off/pageSize, uint64(1)<<((off/pageSize)%64)
		if pm.written[first/64]&want == 0 {
			t.Fatalf("page at %d, after the one looked up and before the hole, not noted as written", off)
		}
	}
	if pm.pagesWritten(pm.addr+written-64, 128) || pm.pagesWritten(pm.addr+written+4096, 1) {
		t.Fatal("a range into the hole accepted")
	}
}
