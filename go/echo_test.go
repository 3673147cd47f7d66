// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"
)

var svcSeq atomic.Int32

func newService(t testing.TB) (string, *Listener) {
	name := fmt.Sprintf("gotest-%d-%d", time.Now().UnixNano()%1000000, svcSeq.Add(1))
	l, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return name, l
}

func fill(b []byte, seed int64) {
	r := rand.New(rand.NewSource(seed))
	r.Read(b)
}

var testSizes = []int{1, 7, 39, 40, 41, 64, 100, 2048, 2049, 4096, 65536, 1 << 20}

// echoServer echoes every message with ReadMsg/Send until end of stream.
func echoServer(c *Conn) error {
	defer c.Close()
	for {
		m, err := c.ReadMsg()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.Send(m.Bytes()); err != nil {
			return err
		}
		if err := m.Ack(); err != nil {
			return err
		}
	}
}

// serveEcho accepts one connection on l and echoes it (echoServer); the
// channel gets the result.
func serveEcho(l *Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			done <- err
			return
		}
		done <- echoServer(c)
	}()
	return done
}

func TestEchoInProcess(t *testing.T) {
	name, l := newService(t)
	done := serveEcho(l)
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	st0, _ := ProcessStats()
	echoClient(t, c, 20000)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Both blocks linger until the other side has closed too.  The counts
	// are the process's: a connection an earlier test closed may linger
	// until lingerTime has passed.
	deadline := time.Now().Add(lingerTime + 3*time.Second)
	for {
		st, _ := ProcessStats()
		if st.ArenaUsed <= st0.ArenaUsed-2*blockBytesRounded() && st.Conns == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("arena use %d, was %d with the connection open; %d connections left", st.ArenaUsed, st0.ArenaUsed, st.Conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func blockBytesRounded() uint64 {
	n := blockBytes(DefaultRingEntries, DefaultRingEntries)
	r := uint64(64)
	for r < n {
		r *= 2
	}
	return r
}

// echoClient checks an echo server: every size one-copy and zero-copy, then
// pipelined random sizes, then end of stream.
func echoClient(t testing.TB, c *Conn, rounds int) {
	in := make([]byte, 1<<20)
	for i, n := range testSizes {
		out := make([]byte, n)
		fill(out, int64(i))
		if err := c.Send(out); err != nil {
			t.Fatalf("send %d: %v", n, err)
		}
		got, err := c.Recv(in)
		if err != nil {
			t.Fatalf("recv %d: %v", n, err)
		}
		if got != n || crc32.ChecksumIEEE(in[:got]) != crc32.ChecksumIEEE(out) {
			t.Fatalf("echo of %d bytes differs (got %d)", n, got)
		}
	}
	// Zero copy: our buffer out, the server's back.
	for i, n := range testSizes {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		fill(b.Bytes(), int64(100+i))
		want := crc32.ChecksumIEEE(b.Bytes())
		if err := c.WriteMsg(b); err != nil {
			t.Fatal(err)
		}
		m, err := c.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		if m.Len() != n || crc32.ChecksumIEEE(m.Bytes()) != want {
			t.Fatalf("zero-copy echo of %d differs", n)
		}
		if n > InlineMax && !m.InPlace() {
			t.Fatalf("large message not in place")
		}
		m.Ack()
	}
	// Pipelined random sizes.
	sent, got := 0, 0
	r := rand.New(rand.NewSource(7))
	lens := make([]int, rounds)
	for i := range lens {
		lens[i] = 1 + r.Intn(3000)
	}
	errc := make(chan error, 1)
	go func() {
		out := make([]byte, 3000)
		for sent < rounds {
			fill(out[:lens[sent]], int64(sent))
			if err := c.Send(out[:lens[sent]]); err != nil {
				errc <- err
				return
			}
			sent++
		}
		errc <- nil
	}()
	want := make([]byte, 3000)
	for got < rounds {
		n, err := c.Recv(in)
		if err != nil {
			t.Fatalf("message %d: %v", got, err)
		}
		fill(want[:lens[got]], int64(got))
		if n != lens[got] || !bytes.Equal(in[:n], want[:n]) {
			t.Fatalf("message %d corrupted: len %d want %d", got, n, lens[got])
		}
		got++
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send([]byte("x")); !errors.Is(err, errPipe) {
		t.Fatalf("send after CloseWrite: %v", err)
	}
	if _, err := c.Recv(in); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}
