// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"
	"golang.org/x/sys/unix"
)

// streamPair returns the two ends of one connection as byte streams.
func streamPair(t testing.TB) (c1, c2 net.Conn, stop func(), err error) {
	name := uniqueName("stream")
	l, err := Listen(name)
	if err != nil {
		return nil, nil, nil, err
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	c1, err = Dial(name)
	if err != nil {
		l.Close()
		return nil, nil, nil, err
	}
	r := <-ch
	if r.err != nil {
		l.Close()
		c1.Close()
		return nil, nil, nil, r.err
	}
	stop = func() {
		c1.Close()
		r.c.Close()
		l.Close()
	}
	return c1, r.c, stop, nil
}

// The net.Conn conformance suite of golang.org/x/net/nettest: basic I/O,
// ping-pong, racy reads and writes, deadlines (past, future, racing),
// close semantics.
func TestStreamNetConn(t *testing.T) { bothSleeps(t, testStreamNetConn) }

func testStreamNetConn(t *testing.T) {
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) { return streamPair(t) })
}

func TestStreamDeadlineAndClose(t *testing.T) { bothSleeps(t, testStreamDeadlineAndClose) }

func testStreamDeadlineAndClose(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// A deadline wakes a blocked Read.
	c1.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	t0 := time.Now()
	_, err = c1.Read(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a timeout net.Error", err)
	}
	if d := time.Since(t0); d < 40*time.Millisecond || d > time.Second {
		t.Fatalf("deadline fired after %v", d)
	}
	// Extending the deadline makes the connection usable again.
	c1.SetReadDeadline(time.Time{})
	go c2.Write([]byte("ping"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(c1, b); err != nil || string(b) != "ping" {
		t.Fatalf("after the deadline: %q %v", b, err)
	}
	// Close wakes a blocked Read with net.ErrClosed.
	closeEndsRead(t, c1, "Close did not wake the reader")
	// The peer reads end of stream.
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c2.Read(b); err != io.EOF {
		t.Fatalf("peer of a closed conn: %v", err)
	}
	if _, err := c2.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
}

// Zero-length calls say whether the side is closed, as over TCP: nothing
// before, EPIPE for a Write after CloseWrite, net.ErrClosed after Close.
func TestZeroLengthAfterClose(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if n, err := c1.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) on an open stream: %d, %v", n, err)
	}
	if n, err := c1.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) on an open stream: %d, %v", n, err)
	}
	if err := c1.(*Stream).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := c1.Write(nil); n != 0 || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write(nil) after CloseWrite: %d, %v; want EPIPE", n, err)
	}
	if n, err := c1.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) after CloseWrite: %d, %v; reading is still open", n, err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := c2.Read(nil); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read(nil) after Close: %d, %v; want net.ErrClosed", n, err)
	}
	if n, err := c2.Write(nil); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write(nil) after Close: %d, %v; want net.ErrClosed", n, err)
	}
}

// CloseWrite and Info do not wait behind a Write blocked for room (the
// peer reads nothing): CloseWrite returns at once, the Write fails with
// EPIPE as over TCP, and the peer reads what was written, then io.EOF.
func TestCloseWriteWhileWriteBlocked(t *testing.T) { bothSleeps(t, testCloseWriteWhileWriteBlocked) }

func testCloseWriteWhileWriteBlocked(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	type res struct {
		n   int
		err error
	}
	wrote := make(chan res, 1)
	big := make([]byte, 64<<20) // more than the peer's budget: the Write blocks
	go func() {
		n, err := c1.Write(big)
		wrote <- res{n, err}
	}()
	until(t, "the Write to sleep for room", func() bool { return atomic.LoadUint64(s.c.u64(s.c.me, bWaiting))&waitTX != 0 })
	select {
	case r := <-wrote:
		t.Fatalf("the Write did not block: %d, %v", r.n, r.err)
	default:
	}
	info := make(chan ConnInfo, 1)
	go func() { info <- s.Conn().Info() }()
	select {
	case ci := <-info:
		if !ci.PeerAlive || ci.TxMsgs == 0 {
			t.Errorf("Info during the blocked Write: %+v", ci)
		}
	case <-time.After(time.Second):
		t.Fatal("Info waited behind the blocked Write")
	}
	done := make(chan error, 1)
	go func() { done <- s.CloseWrite() }()
	var r res
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		r = <-wrote
	case <-time.After(time.Second):
		t.Fatal("CloseWrite waited behind the blocked Write")
	}
	if !errors.Is(r.err, syscall.EPIPE) || r.n == 0 {
		t.Fatalf("the blocked Write after CloseWrite: %d bytes, %v; want some and EPIPE", r.n, r.err)
	}
	got, err := io.Copy(io.Discard, c2)
	if err != nil || got != int64(r.n) {
		t.Fatalf("the peer read %d bytes (%v), the Write reported %d", got, err, r.n)
	}
}

// CloseRead wakes a blocked Read with io.EOF (after what was queued), the
// peer's writes fail with EPIPE, and ours still arrive.
func TestCloseRead(t *testing.T) { bothSleeps(t, testCloseRead) }

func testCloseRead(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	read := make(chan error, 1)
	go func() {
		_, err := c1.Read(make([]byte, 16))
		read <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.CloseRead(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err != io.EOF {
			t.Fatalf("the blocked Read after CloseRead: %v, want io.EOF", err)
		}
	case <-time.After(time.Second):
		t.Fatal("CloseRead did not wake the blocked Read")
	}
	if _, err := c2.Write([]byte("late")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("the peer's Write after our CloseRead: %v, want EPIPE", err)
	}
	if _, err := c1.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c2, b); err != nil || string(b) != "back" {
		t.Fatalf("our write after CloseRead: %q, %v", b, err)
	}
	if _, err := c1.Read(b); err != io.EOF {
		t.Fatalf("a later Read: %v, want io.EOF", err)
	}
}

// End of stream is final: a slot a hostile peer publishes after the
// io.EOF we read (after its CloseWrite, or after our CloseRead) is never
// returned, by the Stream or by the Conn under it.
func TestEOFIsFinal(t *testing.T) {
	for _, ours := range []bool{false, true} {
		c1, c2, stop, err := streamPair(t)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c2.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		if ours {
			err = c1.(*Stream).CloseRead()
		} else {
			err = c2.(*Stream).CloseWrite()
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c1)
		if string(b) != "a" || err != nil {
			t.Fatalf("before the end: %q, %v", b, err)
		}
		peer := c2.(*Stream).c
		peer.txMu.Lock()
		peer.publish([]byte("b"), 1, 0, slotInline)
		peer.notifyRX()
		peer.txMu.Unlock()
		buf := make([]byte, 8)
		if n, err := c1.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Stream.Read after io.EOF (CloseRead %v): %d bytes %q, %v", ours, n, buf[:n], err)
		}
		if n, err := c1.(*Stream).c.Recv(buf); n != 0 || err == nil || !errors.Is(err, io.EOF) {
			t.Fatalf("Conn.Recv after io.EOF (CloseRead %v): %d bytes %q, %v", ours, n, buf[:n], err)
		}
		stop()
	}
}

// A peer's Write blocked because we read nothing fails with EPIPE when we
// CloseRead.
func TestCloseReadEndsBlockedPeerWrite(t *testing.T) {
	bothSleeps(t, testCloseReadEndsBlockedPeerWrite)
}

func testCloseReadEndsBlockedPeerWrite(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	wrote := make(chan error, 1)
	big := make([]byte, 64<<20)
	go func() {
		_, err := c2.Write(big)
		wrote <- err
	}()
	until(t, "the peer's Write to sleep for room", func() bool {
		p := c2.(*Stream).c
		return atomic.LoadUint64(p.u64(p.me, bWaiting))&waitTX != 0
	})
	if err := c1.(*Stream).CloseRead(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("the peer's blocked Write: %v, want EPIPE", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the peer's Write still blocks a second after CloseRead")
	}
}

// An empty message on the connection socket is no hang-up: the watcher
// reads it as io.EOF, as the end, and must tell the two apart.
func TestEmptyMessageOnSocketIsNoHangup(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := c1.(*Stream).Conn(), c2.(*Stream).Conn()
	raw, err := b.sock.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	if err := raw.Control(func(fd uintptr) { _, sendErr = unix.SendmsgN(int(fd), nil, nil, nil, 0) }); err != nil || sendErr != nil {
		t.Fatalf("sending an empty message on the socket: %v %v", err, sendErr)
	}
	time.Sleep(200 * time.Millisecond) // a's watcher has read it
	if a.dead.Load() {
		t.Fatal("an empty message on the socket marked the peer gone")
	}
	if err := b.Send([]byte("still here")); err != nil {
		t.Fatalf("Send after the empty message: %v", err)
	}
	var buf [64]byte
	n, err := a.Recv(buf[:])
	if err != nil || string(buf[:n]) != "still here" {
		t.Fatalf("Recv after an empty message on the socket: %q, %v", buf[:n], err)
	}
	if err := a.Send([]byte("and here")); err != nil {
		t.Fatalf("Send to the peer that sent an empty message on its socket: %v", err)
	}
	if n, err = b.Recv(buf[:]); err != nil || string(buf[:n]) != "and here" {
		t.Fatalf("Recv from the peer: %q, %v", buf[:n], err)
	}
}
