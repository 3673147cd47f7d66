// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/nettest"
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
