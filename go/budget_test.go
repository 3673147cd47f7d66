// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Peers that stop reading cannot take the whole arena: each connection's
// peer holds at most the connection budget, and less as the arena fills;
// writes to them block (here: time out), while a healthy connection's
// 256 KiB messages keep flowing both ways and a new connection still gets
// its block.
func TestConnBudget(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	budget := p.cfg.connBudget()
	expectArenaBack(t)
	name, l := newService(t)
	dial := func() (*Conn, *Conn) { t.Helper(); return dialPair(t, name, l) }
	// Stopped peers, each sent messages whose blocks are larger than
	// they are (1 MiB + 16 B takes 2 MiB), or 256 KiB, or zero-copy
	// buffers, until a write times out.
	sizes := []int{1<<20 + 16, 256 << 10, 100 << 10, 1<<20 + 16, 256 << 10}
	var held uint64
	for i, size := range sizes {
		c, _ := dial()
		msg := make([]byte, size)
		sent := 0
		for {
			c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			if i == 2 {
				var b *Buffer
				b, err = Alloc(size)
				if err == nil {
					if err = c.WriteMsg(b); err != nil {
						b.Free()
					}
				}
			} else {
				err = c.Send(msg)
			}
			if err != nil {
				break
			}
			sent++
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stopped peer %d: after %d messages of %d bytes: %v, want a timeout", i, sent, size, err)
		}
		info := c.Info()
		st, _ := ProcessStats()
		t.Logf("stopped peer %d: %d messages of %d bytes, %d buffers, %d KiB held (budget %d KiB); arena %d/%d KiB used",
			i, sent, size, info.BufsOutstanding, info.BytesOutstanding>>10, budget>>10, st.ArenaUsed>>10, st.ArenaSize>>10)
		if sent == 0 || info.BytesOutstanding == 0 || info.BytesOutstanding > budget {
			t.Fatalf("stopped peer %d holds %d bytes (%d messages); budget %d", i, info.BytesOutstanding, sent, budget)
		}
		held += info.BytesOutstanding
	}
	if held > p.cfg.ArenaSize {
		t.Fatalf("stopped peers hold %d bytes of a %d-byte arena", held, p.cfg.ArenaSize)
	}

	// A healthy peer: 256 KiB echoes.
	c, s := dial()
	go echoServer(s)
	out := make([]byte, 256<<10)
	in := make([]byte, len(out))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < 50; i++ {
		fill(out, int64(i))
		if err := c.Send(out); err != nil {
			t.Fatalf("healthy send %d: %v", i, err)
		}
		n, err := c.Recv(in)
		if err != nil {
			t.Fatalf("healthy recv %d: %v", i, err)
		}
		if !bytes.Equal(in[:n], out) {
			t.Fatalf("healthy echo %d differs", i)
		}
	}
	// And a new connection gets its block.
	c2, err := DialConn(name)
	if err != nil {
		t.Fatalf("dial with stopped peers: %v", err)
	}
	s2, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	s2.Close()
}

// A buffer the peer released comes back to the allocation that needs it,
// whichever connection the release came on and though nothing was sent on
// that connection since.  Blocks of a quarter of the arena plus a byte
// take half of it each, so a second fits only once the first is back.
func TestAllocReapsAcks(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	expectArenaBack(t)
	name, l := newService(t)
	a, as := dialPair(t, name, l)
	b, bs := dialPair(t, name, l)
	n := int(p.cfg.ArenaSize/4 + 1)
	buf, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if extra, err := Alloc(n); err == nil {
		extra.Free()
		t.Fatal("a second buffer fits beside the first: the test proves nothing")
	}
	if err := a.WriteMsg(buf); err != nil {
		t.Fatal(err)
	}
	m, err := as.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	// Released on a: a copying send on b finds the room.
	msg := bytes.Repeat([]byte{'c'}, n)
	if err := b.Send(msg); err != nil {
		t.Fatalf("send of %d bytes after the peer released what it held: %v", n, err)
	}
	got := make([]byte, n)
	if k, err := bs.Recv(got); err != nil || k != n || !bytes.Equal(got, msg) {
		t.Fatalf("receive: %d bytes, %v", k, err)
	}
	// Released on b: Alloc finds the room.
	buf, err = Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d) after the peer released what it held: %v", n, err)
	}
	buf.Free()
}

// dialPair dials service name and accepts the connection on l; both ends
// close when t ends.
func dialPair(t *testing.T, name string, l *Listener) (*Conn, *Conn) {
	t.Helper()
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// expectArenaBack fails t unless, within 5 s of its end, the arena is used
// no more than now: the closed connections give it back before the next
// test needs it.
func expectArenaBack(t *testing.T) {
	st0, _ := ProcessStats()
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, _ := ProcessStats()
			if st.ArenaUsed <= st0.ArenaUsed {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("arena use %d after the test, %d before", st.ArenaUsed, st0.ArenaUsed)
				return
			}
		}
	})
}

func TestConnBudgetConfig(t *testing.T) {
	t.Setenv("RPAL_CONN_BUDGET", "0x20000")
	c := DefaultConfig()
	if err := c.check(); err != nil || c.ConnBudget != 128<<10 || c.connBudget() != 128<<10 {
		t.Fatalf("budget %d: %v", c.ConnBudget, err)
	}
	t.Setenv("RPAL_CONN_BUDGET", "")
	c = DefaultConfig()
	if err := c.check(); err != nil || c.ConnBudget != 0 || c.connBudget() != c.ArenaSize/4 {
		t.Fatalf("default budget %d (%d): %v", c.ConnBudget, c.connBudget(), err)
	}
	for _, b := range []uint64{64<<10 - 1, c.ArenaSize + 4096} {
		c.ConnBudget = b
		if err := c.check(); err == nil || !strings.Contains(err.Error(), "budget") {
			t.Errorf("budget %d: %v", b, err)
		}
	}
}

// One Stream write larger than the connection budget: the writer waits for
// acks of messages it has not yet announced, so it must wake the reader
// before it sleeps.
func TestConnBudgetLongStreamWrite(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p, _ := ensure()
	out := make([]byte, 2*p.cfg.connBudget()+12345)
	fill(out, 9)
	c1.SetDeadline(time.Now().Add(10 * time.Second))
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := c1.Write(out)
		errc <- err
	}()
	in := make([]byte, len(out))
	if _, err := io.ReadFull(c2, in); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("stream data differs")
	}
}

// Many stream peers that stopped reading, each stopped in turn while the
// server writes to it: once the arena runs low, stream writes travel in
// ring slots, so a new connection still gets its block and a healthy
// stream still carries 256 KiB writes both ways.
func TestStreamStoppedPeers(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	expectArenaBack(t)
	name, l := newService(t)
	pair := func() (*Stream, *Stream) {
		t.Helper()
		c, err := DialConn(name)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		s, err := l.AcceptConn()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return NewStream(c), NewStream(s)
	}
	stopped := 48
	if testing.Short() {
		stopped = 24
	}
	msg := make([]byte, 1<<20)
	for i := 0; i < stopped; i++ {
		_, srv := pair()
		srv.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := srv.Write(msg)
		for err == nil {
			var m int
			m, err = srv.Write(msg)
			n += m
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stopped peer %d: after %d bytes: %v, want a timeout", i, n, err)
		}
	}
	st, _ := ProcessStats()
	t.Logf("%d stopped peers; arena %d of %d KiB used", stopped, st.ArenaUsed>>10, p.cfg.ArenaSize>>10)

	cli, srv := pair()
	out := make([]byte, 256<<10)
	in := make([]byte, len(out))
	cli.SetDeadline(time.Now().Add(10 * time.Second))
	srv.SetDeadline(time.Now().Add(10 * time.Second))
	go io.Copy(srv, srv)
	for i := 0; i < 20; i++ {
		fill(out, int64(i))
		// Write while reading: the echo's writes wait for ours to be read.
		werr := make(chan error, 1)
		go func() {
			_, err := cli.Write(out)
			werr <- err
		}()
		_, err := io.ReadFull(cli, in)
		if err := <-werr; err != nil {
			t.Fatalf("healthy write %d: %v", i, err)
		}
		if err != nil {
			t.Fatalf("healthy read %d: %v", i, err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("healthy echo %d differs", i)
		}
	}
}

// The sizes a message may not have are refused with errors that say so:
// an empty one (a buffer truncated to nothing too) and one larger than
// half the arena, which Alloc's error gives as the bound.
func TestMessageSizeErrors(t *testing.T) {
	a, _ := connPair(t)
	b, err := Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Truncate(0)
	if err := a.WriteMsg(b); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "empty message") {
		t.Errorf("WriteMsg of a buffer truncated to 0: %v; want EINVAL saying the message is empty", err)
	}
	if err := a.Send(nil); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "empty message") {
		t.Errorf("Send(nil): %v; want EINVAL saying the message is empty", err)
	}
	half := a.p.cfg.ArenaSize / 2
	_, err = Alloc(int(half) + 1)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), fmt.Sprintf("1..%d", half)) {
		t.Errorf("Alloc of half the arena and a byte: %v; want EINVAL giving the bound 1..%d", err, half)
	}
}
