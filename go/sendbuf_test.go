// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Both sides pipeline more short writes than the ring holds before they
// read: a client writes every request before it reads a reply, a server
// answers each request with a Write of its own.  Over a Unix socket this
// completes (its buffer takes 278 such writes); it does here because a
// Write that finds the ring full leaves its bytes in the send buffer.
func TestStreamPipelinedWrites(t *testing.T) { bothSleeps(t, testStreamPipelinedWrites) }

func testStreamPipelinedWrites(t *testing.T) {
	for _, tc := range []struct{ size, count int }{{100, 500}, {300, 200}, {24, 600}} {
		c1, c2, stop, err := streamPair(t)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		c1.SetDeadline(deadline)
		c2.SetDeadline(deadline)
		served := make(chan error, 1)
		go func() {
			req := make([]byte, tc.size)
			for i := 0; i < tc.count; i++ {
				if _, err := io.ReadFull(c2, req); err != nil {
					served <- err
					return
				}
				if _, err := c2.Write(req); err != nil {
					served <- err
					return
				}
			}
			served <- nil
		}()
		msg := make([]byte, tc.size)
		for i := 0; i < tc.count; i++ {
			binary.LittleEndian.PutUint32(msg, uint32(i))
			msg[tc.size-1] = byte(i)
			if _, err := c1.Write(msg); err != nil {
				t.Fatalf("%d B: request %d of %d: %v", tc.size, i, tc.count, err)
			}
		}
		for i := 0; i < tc.count; i++ {
			if _, err := io.ReadFull(c1, msg); err != nil {
				t.Fatalf("%d B: reply %d of %d: %v", tc.size, i, tc.count, err)
			}
			if binary.LittleEndian.Uint32(msg) != uint32(i) || msg[tc.size-1] != byte(i) {
				t.Fatalf("%d B: reply %d carries request %d", tc.size, i, binary.LittleEndian.Uint32(msg))
			}
		}
		if err := <-served; err != nil {
			t.Fatalf("%d B: server: %v", tc.size, err)
		}
		t.Logf("%d requests of %d B pipelined both ways", tc.count, tc.size)
		stop()
	}
}

// fillSendBuffer makes short writes to c, whose peer does not read, until
// one fails; it returns the bytes taken and that error.
func fillSendBuffer(t *testing.T, c net.Conn) (int, error) {
	msg := make([]byte, 100)
	total := 0
	for i := 0; ; i++ {
		for j := range msg {
			msg[j] = byte(total + j)
		}
		n, err := c.Write(msg)
		total += n
		if err != nil {
			return total, err
		}
		if i > 10000 {
			t.Fatal("10,000 writes went through to a peer that reads nothing")
		}
	}
}

// readCounting reads c to its end, checking that byte i is byte(i).
func readCounting(t *testing.T, c net.Conn) (int, error) {
	b := make([]byte, 4096)
	total := 0
	for {
		n, err := c.Read(b)
		for i := 0; i < n; i++ {
			if b[i] != byte(total+i) {
				t.Fatalf("byte %d is %d", total+i, b[i])
			}
		}
		total += n
		if err != nil {
			return total, err
		}
	}
}

// closeWaitsForPeer checks a Close under way (its result comes on closed)
// while its send buffer holds bytes: it has not returned, the peer c reads
// all total bytes, then io.EOF, and the Close then returns nil.
func closeWaitsForPeer(t *testing.T, closed <-chan error, c net.Conn, total int) {
	t.Helper()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the peer read the send buffer", err)
	default:
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := readCounting(t, c); err != io.EOF || got != total {
		t.Fatalf("the peer of a closed stream read %d of %d bytes, then %v", got, total, err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// The send buffer is bounded, its bytes are sent after the write deadline
// that ended the Write which found it full, and CloseWrite and Close send
// them first.
func TestStreamSendBuffer(t *testing.T) { bothSleeps(t, testStreamSendBuffer) }

func testStreamSendBuffer(t *testing.T) {
	// A full buffer: the Write waits until its deadline, having taken
	// what the ring and the buffer hold, and no more.
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	ringBytes := int(s.c.ringMask+1) * InlineMax
	c1.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	total, err := fillSendBuffer(t, c1)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the Write that found the buffer full: %v; want the deadline", err)
	}
	if total < sendBufferMax || total > ringBytes+sendBufferMax {
		t.Fatalf("%d bytes taken; want the buffer's %d and at most the ring's %d more", total, sendBufferMax, ringBytes)
	}
	// The deadline passed: what was taken still goes as the peer reads,
	// then end of stream after CloseWrite, which does not wait for it.
	t0 := time.Now()
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("CloseWrite waited %v", d)
	}
	c1.SetWriteDeadline(time.Time{})
	if _, err := c1.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write after CloseWrite: %v; want EPIPE", err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := readCounting(t, c2)
	if err != io.EOF || got != total {
		t.Fatalf("the peer read %d of %d bytes, then %v; want all, then io.EOF", got, total, err)
	}

	// Close waits for the buffer to go.
	c1, c2, stop2, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	total = 0
	msg := make([]byte, 100)
	for total < sendBufferMax {
		for j := range msg {
			msg[j] = byte(total + j)
		}
		n, err := c1.Write(msg)
		if total += n; err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c1.Close() }()
	time.Sleep(50 * time.Millisecond)
	closeWaitsForPeer(t, closed, c2, total)

	// Close after the deadline: what the peer did not read is dropped,
	// and Close says how much.
	c1, c2, stop3, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	s = c1.(*Stream)
	c1.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if total, err = fillSendBuffer(t, c1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	s.pmu.Lock()
	unsent := len(s.pend)
	s.pmu.Unlock()
	t0 = time.Now()
	err = c1.Close()
	if !errors.Is(err, syscall.ETIMEDOUT) || time.Since(t0) > time.Second {
		t.Fatalf("Close after the write deadline, %d bytes unsent: %v after %v; want ETIMEDOUT at once", unsent, err, time.Since(t0))
	}
	if s.flushing {
		t.Fatal("the flush goes on after Close")
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := readCounting(t, c2); err != io.EOF || got != total-unsent {
		t.Fatalf("the peer read %d bytes, then %v; want %d sent of %d, then io.EOF", got, err, total-unsent, total)
	}
}

// A peer that closes while our send buffer holds bytes: the next Write
// fails with EPIPE.
func TestStreamSendBufferPeerCloses(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c1.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := fillSendBuffer(t, c1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	c1.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c2.Close()
	var werr error
	until(t, "a Write to fail", func() bool {
		_, werr = c1.Write([]byte("x"))
		return werr != nil
	})
	if !errors.Is(werr, syscall.EPIPE) {
		t.Fatalf("Write after the peer closed: %v; want EPIPE", werr)
	}
}

// The connection closed under a Stream whose send buffer holds bytes (by
// its Conn's Close, while the flush waits to look again): a short Write
// fails with net.ErrClosed instead of leaving its bytes in a buffer
// nobody will send.
func TestStreamSendBufferConnClosed(t *testing.T) {
	c1, _, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	ringBytes := int(s.c.ringMask+1) * InlineMax
	msg := make([]byte, 100)
	for total := 0; total < ringBytes+1000; {
		n, err := c1.Write(msg)
		if total += n; err != nil {
			t.Fatal(err)
		}
	}
	// The flush's wait ends at the deadline; it then looks every 50 ms.
	c1.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	c := s.Conn()
	c.SetWriteDeadline(time.Time{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if n, err := c1.Write(msg); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write %d after Close: %d, %v; want net.ErrClosed", i, n, err)
		}
	}
}

// Close while the send buffer waits for a peer that does not read: a
// blocked Write and a blocked Read return net.ErrClosed at once, Close
// returns once the peer has read everything, and later calls fail with
// net.ErrClosed, an expired deadline notwithstanding.
func TestStreamCloseWhileFlushing(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c1.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	total, err := fillSendBuffer(t, c1)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	c1.SetWriteDeadline(time.Time{})
	blocked := make(chan error, 2)
	go func() {
		_, err := c1.Write(make([]byte, 100)) // no room: it waits
		blocked <- err
	}()
	go func() {
		_, err := c1.Read(make([]byte, 10)) // nothing comes
		blocked <- err
	}()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- c1.Close() }()
	for i := 0; i < 2; i++ {
		select {
		case err := <-blocked:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("a call blocked when Close came: %v; want net.ErrClosed", err)
			}
		case <-time.After(time.Second):
			t.Fatal("Close left a blocked call blocked while it waited for the send buffer")
		}
	}
	closeWaitsForPeer(t, closed, c2, total)
	c1.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v; want net.ErrClosed", err)
	}
	if err := c1.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a second Close: %v; want net.ErrClosed", err)
	}
}

// Close while a send is under way (the flush holds txMu, past its last
// look at the connection, and publishes after Close began): the peer
// reads that message before end of stream, which Close marks only after
// the send.  Here the test holds txMu and publishes in the flush's place.
func TestStreamCloseAfterSendInFlight(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	c := s.Conn()
	c1.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := fillSendBuffer(t, c1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	c1.SetWriteDeadline(time.Now().Add(-time.Second)) // Close drops the buffer at once
	c.txMu.Lock()
	closed := make(chan error, 1)
	go func() { closed <- c1.Close() }()
	until(t, "Close to close the connection", func() bool { return c.closed.Load() })
	time.Sleep(20 * time.Millisecond) // Close goes as far as it can without txMu
	// The peer reads the ring: what was there, then nothing yet.
	c2.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b := make([]byte, 4096)
	for {
		_, err := c2.Read(b)
		if err == io.EOF {
			c.txMu.Unlock()
			<-closed
			t.Fatal("the peer read end of stream while a send was under way")
		}
		if err != nil {
			break
		}
	}
	if !c.reserve() {
		t.Fatal("the ring is still full")
	}
	c.publish([]byte("last"), 4, 0, slotInline)
	c.notifyRX()
	c.txMu.Unlock()
	if err := <-closed; !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Close: %v; want ETIMEDOUT (the buffer was dropped)", err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.ReadFull(c2, b[:4])
	if err != nil || string(b[:n]) != "last" {
		t.Fatalf("the peer read %q, %v; want the message sent during Close", b[:n], err)
	}
	if n, err := c2.Read(b); err != io.EOF {
		t.Fatalf("after it: %d bytes, %v; want io.EOF", n, err)
	}
}

// Several goroutines write at once, short writes (which the send buffer
// takes while the peer does not read) mixed with long ones (which wait
// for it to drain): each Write arrives whole, never interleaved with
// another's, and each goroutine's in the order it made them.
func TestStreamConcurrentWriters(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := c1.(*Stream)
	const writers, per = 4, 200
	// A Write: its length, writer and index, then bytes that depend on
	// all three.
	body := func(n, w, i int) []byte {
		b := make([]byte, n)
		binary.LittleEndian.PutUint32(b[0:], uint32(n))
		binary.LittleEndian.PutUint32(b[4:], uint32(w))
		binary.LittleEndian.PutUint32(b[8:], uint32(i))
		for j := 12; j < n; j++ {
			b[j] = byte(w*31 + i + j)
		}
		return b
	}
	c1.SetWriteDeadline(time.Now().Add(10 * time.Second))
	werr := make(chan error, writers)
	buffered := make(chan bool, 1)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < per; i++ {
				n := 12 + (i*7919+w*104729)%309 // short: 12..320 bytes
				if i%5 == 4 {
					n = 321 + (i*7919)%20000
				}
				if m, err := c1.Write(body(n, w, i)); err != nil || m != n {
					werr <- fmt.Errorf("writer %d, write %d: %d of %d bytes, %v", w, i, m, n, err)
					return
				}
				s.pmu.Lock()
				if s.flushing {
					select {
					case buffered <- true:
					default:
					}
				}
				s.pmu.Unlock()
			}
			werr <- nil
		}()
	}
	time.Sleep(20 * time.Millisecond) // the ring fills
	next := make([]int, writers)
	hdr := make([]byte, 12)
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	for k := 0; k < writers*per; k++ {
		if _, err := io.ReadFull(c2, hdr); err != nil {
			t.Fatalf("write %d of %d: %v", k, writers*per, err)
		}
		n := int(binary.LittleEndian.Uint32(hdr[0:]))
		w := int(binary.LittleEndian.Uint32(hdr[4:]))
		i := int(binary.LittleEndian.Uint32(hdr[8:]))
		if n < 12 || n > 21000 || w >= writers || i != next[w] {
			t.Fatalf("write %d of %d: length %d, writer %d, index %d; want writer %d's index %d next", k, writers*per, n, w, i, w, next[w])
		}
		next[w]++
		b := make([]byte, n)
		copy(b, hdr)
		if _, err := io.ReadFull(c2, b[12:]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, body(n, w, i)) {
			t.Fatalf("writer %d's write %d arrived with other bytes", w, i)
		}
		if k%64 == 0 {
			time.Sleep(200 * time.Microsecond) // a slow reader
		}
	}
	for w := 0; w < writers; w++ {
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-buffered:
	default:
		t.Fatal("no Write went through the send buffer")
	}
}

// A Stream whose peer reads slowly fills and empties its send buffer over
// and over: the buffer's array is kept, not allocated anew for each fill
// (2 MiB of 100-byte writes allocated about 8 MiB that way, 0.4-1.9 MiB
// with the array kept, as appends outgrow a tail the flush has not sent).
func TestStreamSendBufferReusesItsArray(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const total = 20972 * 100 // about 2 MiB
	done := make(chan int64)
	go func() {
		buf := make([]byte, 4096)
		var n int64
		for n < total {
			k, err := c2.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
			time.Sleep(20 * time.Microsecond)
		}
		done <- n
	}()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	msg := make([]byte, 100)
	sent := 0
	for ; sent < total; sent += len(msg) {
		if _, err := c1.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	got := <-done
	runtime.ReadMemStats(&ms1)
	allocated := ms1.TotalAlloc - ms0.TotalAlloc
	t.Logf("%d bytes written in 100-byte writes, %d read; %d KiB allocated meanwhile", sent, got, allocated>>10)
	if got != int64(sent) {
		t.Fatalf("read %d of %d bytes", got, sent)
	}
	// Under the race detector this run allocates 2 to 4 MiB, near the
	// limit, from one run to the next: only a run without it can tell.
	if raceEnabled {
		t.Log("allocations not checked under the race detector")
		return
	}
	if allocated > 4<<20 {
		t.Errorf("%d KiB allocated for %d KiB written through the send buffer", allocated>>10, sent>>10)
	}
}
