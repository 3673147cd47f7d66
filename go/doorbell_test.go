// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"fmt"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Both directions of a connection sleep on one doorbell, so a wake-up
// rung for the writer may be drained by the reader.  With no spinning at
// all, streams in both directions, writes that mix ring slots with
// buffers (acks ring the writer while its ring is still full) and reads
// in small pieces (a buffer is acknowledged long after its slot is
// consumed), no wake-up may be lost: every byte arrives, in order, and no
// call waits out its 5 s deadline.
func TestSharedDoorbellNoLostWakeup(t *testing.T) { bothSleeps(t, testSharedDoorbellNoLostWakeup) }

func testSharedDoorbellNoLostWakeup(t *testing.T) {
	name, l := newService(t)
	a, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := NewStream(a), NewStream(b)
	defer sa.Close()
	defer sb.Close()
	sleepAtOnce(a, b)
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
	}
	const stall = 5 * time.Second
	pattern := make([]byte, 1<<20)
	fill(pattern, 1)
	sizes := []int{slotsMax - 20, 3000, 77, 1500, slotsMax}
	end := time.Now().Add(run)
	var sent, received [2]int
	send := func(s *Stream, d int) error {
		for i := 0; time.Now().Before(end); i++ {
			n := sizes[i%len(sizes)]
			off := sent[d] % len(pattern)
			if off+n > len(pattern) {
				n = len(pattern) - off
			}
			s.SetWriteDeadline(time.Now().Add(stall))
			if _, err := s.Write(pattern[off : off+n]); err != nil {
				return fmt.Errorf("write at byte %d: %w", sent[d], err)
			}
			sent[d] += n
		}
		return s.CloseWrite()
	}
	recv := func(s *Stream, d int) error {
		piece := make([]byte, 100)
		got := 0
		for {
			s.SetReadDeadline(time.Now().Add(stall))
			n, err := s.Read(piece)
			for i := 0; i < n; i++ {
				if piece[i] != pattern[(got+i)%len(pattern)] {
					return fmt.Errorf("byte %d differs", got+i)
				}
			}
			got += n
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("read after %d bytes: %w", got, err)
			}
		}
		received[d] = got
		return nil
	}
	errs := make(chan error, 4)
	go func() { errs <- send(sa, 0) }()
	go func() { errs <- send(sb, 1) }()
	go func() { errs <- recv(sb, 0) }()
	go func() { errs <- recv(sa, 1) }()
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if received != sent {
		t.Fatalf("received %v bytes, %v sent", received, sent)
	}
	// Rings left unread must stay far below what the socket holds (a few
	// hundred), or a ring would fail and a wake-up be lost.
	for _, c := range []*Conn{a, b} {
		if n, sleeps := unreadRings(t, c), sleepsOf(c); n > 64 {
			t.Fatalf("%d rings unread in a doorbell after %d sleeps", n, sleeps)
		}
	}
	t.Logf("%d and %d bytes in %v with no spinning, %d and %d sleeps", sent[0], sent[1], run,
		sleepsOf(a), sleepsOf(b))
}

// sleepsOf is how many times c's waiters slept, both directions.
func sleepsOf(c *Conn) uint64 {
	st := c.st.Load()
	return st.rx.sleeps.Load() + st.tx.sleeps.Load()
}

// unreadRings is how many bytes wait in c's doorbell.
func unreadRings(t *testing.T, c *Conn) int {
	raw, err := c.rxBell.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}
