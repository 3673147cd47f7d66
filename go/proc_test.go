// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Go to Go across processes: the child dials and echoes.
func TestCrossProcessEcho(t *testing.T) {
	name, l := newService(t)
	cmd := helperCmd("echo-server-conn", name)
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	if info := c.Info(); info.PeerPid != cmd.Process.Pid {
		t.Fatalf("peer pid %d, want %d", info.PeerPid, cmd.Process.Pid)
	}
	echoClient(t, c, 20000)
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// A Go peer killed with SIGKILL.
func TestCrossProcessKill(t *testing.T) { bothSleeps(t, testCrossProcessKill) }

func testCrossProcessKill(t *testing.T) {
	name, l := newService(t)
	cmd := helperCmd("hang", name)
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if m, err := c.ReadMsg(); err != nil || string(m.Bytes()) != "hello" {
		t.Fatalf("first message: %v", err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c.ReadMsg(); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	cmd.Process.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("want ECONNRESET, got %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("no error within 1 s")
	}
}

// Hostile peers: each broken descriptor (an empty inline message included:
// never end of stream nor an empty message) closes that connection with
// EPROTO; the server goes on serving.
func TestHostilePeer(t *testing.T) {
	name, l := newService(t)
	for _, role := range []string{"bad-buf", "bad-flags", "bad-inline", "bad-empty", "bad-empty-stream", "bad-seq", "bad-unwritten"} {
		t.Run(role, func(t *testing.T) {
			cmd := helperCmd(role, name)
			startReady(t, cmd)
			c, err := l.AcceptConn()
			if err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if role == "bad-empty-stream" {
				_, err = NewStream(c).Read(make([]byte, 64))
			} else {
				_, err = c.ReadMsg()
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || !errors.Is(err, syscall.EPROTO) {
				t.Fatalf("want a protocol error, got %v", err)
			}
			t.Logf("%s: %v", role, err)
			// Sticky: the connection stays closed for I/O.
			if _, err := c.ReadMsg(); !errors.Is(err, syscall.EPROTO) {
				t.Fatalf("second read: %v", err)
			}
			if err := c.Send([]byte("x")); !errors.Is(err, syscall.EPROTO) {
				t.Fatalf("send: %v", err)
			}
			c.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("helper did not see the hang-up as end of stream: %v: %s", err, cmd.Stderr)
			}
		})
	}
	// And a well-behaved client still works.
	cmd := helperCmd("echo-server-conn", name)
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	echoClient(t, c, 100)
	c.Close()
}

// A Buffer written only in part goes out whole, the rest of it zeros: the
// pages its sender never wrote are made before the peer, which refuses a
// buffer over pages nobody wrote, reads them.
func TestPartlyWrittenBuffer(t *testing.T) {
	name, l := newService(t)
	cmd := helperCmd("partial-buf", name)
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, err := c.ReadMsg()
	if err != nil {
		t.Fatalf("a partly written buffer: %v", err)
	}
	b := m.Bytes()
	if len(b) != 4<<20 || string(b[:8]) != "partial\x00" || b[len(b)/2] != 0 || b[len(b)-1] != 0 {
		t.Fatalf("a partly written buffer: %d bytes, %q...", len(b), b[:min(len(b), 8)])
	}
	m.Ack()
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// In-process hostile acks: an ack naming a buffer the peer does not hold.
func TestHostileAck(t *testing.T) {
	name, l := newService(t)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			return
		}
		m, _ := c.ReadMsg()
		if m != nil {
			c.ackPush(m.addr + 64) // not the buffer we were sent
		}
		c.ReadMsg()
		c.Close()
	}()
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Send(make([]byte, 1000))
		if errors.Is(err, syscall.EPROTO) {
			break
		}
		if err != nil && !errors.Is(err, syscall.EPIPE) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("bad ack not detected")
		}
		time.Sleep(time.Millisecond)
	}
	_ = io.EOF
}

// A peer that closes right after sending: every message is still
// delivered (its block and buffers linger until we close), then io.EOF.
func TestCloseDeliversQueued(t *testing.T) {
	name, l := newService(t)
	const n = 100
	go func() {
		c, err := DialConn(name)
		if err != nil {
			return
		}
		for i := 0; i < n; i++ {
			b := make([]byte, 1000+i)
			fill(b, int64(i))
			if c.Send(b) != nil {
				return
			}
		}
		c.Close()
	}()
	s, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(50 * time.Millisecond) // let the sender close first
	in := make([]byte, 4096)
	for i := 0; i < n; i++ {
		k, err := s.Recv(in)
		if err != nil {
			t.Fatalf("message %d after the peer closed: %v", i, err)
		}
		want := make([]byte, 1000+i)
		fill(want, int64(i))
		if k != len(want) || string(in[:k]) != string(want) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	if _, err := s.Recv(in); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
	if err := s.Send([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("send to a closed peer: %v", err)
	}
}

// lingerConns is about three times what a 1 MiB arena holds of connection
// blocks.
const lingerConns = 100

// A peer that never closes its end cannot fill our arena with the blocks of
// the connections we closed: a server with a 1 MiB arena (a child process)
// answers each of lingerConns connections and closes it at once, while we
// close none; every connection is made, the newest reads the answer and
// end of stream, the oldest, whose block went first, EPROTO (or end of
// stream, had its block not been reused), without a hang.
func TestCloseLingerMakesRoom(t *testing.T) {
	name := fmt.Sprintf("gotest-linger-%d-%d", os.Getpid(), svcSeq.Add(1))
	cmd := helperCmd("linger-server", name)
	cmd.Env = append(cmd.Env, "RPAL_ARENA_SIZE=1048576", "RPAL_GO_ITERS="+strconv.Itoa(lingerConns))
	stdin, err := cmd.StdinPipe() // the server exits when we close it
	if err != nil {
		t.Fatal(err)
	}
	startReady(t, cmd)
	defer stdin.Close()
	conns := make([]*Conn, 0, lingerConns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range lingerConns {
		c, err := DialConn(name)
		if err != nil {
			t.Fatalf("connection %d of a peer that closes none: %v", i, err)
		}
		conns = append(conns, c)
	}
	in := make([]byte, 16)
	newest := conns[len(conns)-1]
	newest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := newest.Recv(in); err != nil || string(in[:n]) != "bye" {
		t.Fatalf("the newest connection's answer: %q, %v", in[:n], err)
	}
	if _, err := newest.Recv(in); err != io.EOF {
		t.Fatalf("the newest connection's end: %v", err)
	}
	oldest := conns[0]
	oldest.SetReadDeadline(time.Now().Add(5 * time.Second))
	var err2 error
	gotBye := false
	for range 2 {
		var n int
		if n, err2 = oldest.Recv(in); err2 != nil {
			break
		}
		if string(in[:n]) != "bye" {
			t.Fatalf("the oldest connection read %q", in[:n])
		}
		gotBye = true
	}
	t.Logf("the oldest connection: %v", err2)
	// Its answer, then the end; or EPROTO: never an end that hides it.
	if !(gotBye && err2 == io.EOF) && !errors.Is(err2, syscall.EPROTO) {
		t.Fatalf("the oldest connection: %v after its answer %v; want the answer and io.EOF, or EPROTO", err2, gotBye)
	}
}

// lingerServer is TestCloseLingerMakesRoom's server: it answers and closes
// RPAL_GO_ITERS connections, then waits for its stdin to close.
// A server whose arena has no room for another connection block says so
// to the client it refuses: ENOMEM, and why.
func TestRefusalSaysArenaFull(t *testing.T) {
	name := fmt.Sprintf("gotest-hold-%d-%d", os.Getpid(), svcSeq.Add(1))
	cmd := helperCmd("hold-server", name)
	cmd.Env = append(cmd.Env, "RPAL_ARENA_SIZE=1048576")
	stdin, err := cmd.StdinPipe() // the server exits when we close it
	if err != nil {
		t.Fatal(err)
	}
	startReady(t, cmd)
	defer stdin.Close()
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range lingerConns {
		c, err := DialConn(name)
		if err == nil {
			conns = append(conns, c)
			continue
		}
		if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "no room for a connection block") {
			t.Fatalf("connection %d to a server whose arena is full: %v; want ENOMEM saying there is no room for a connection block", len(conns), err)
		}
		t.Log(err)
		return
	}
	t.Fatalf("a server with a 1 MiB arena holding every connection took %d", len(conns))
}

// holdServer accepts connections and keeps them open until its stdin
// closes.
func holdServer(name string) int {
	l, err := Listen(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold server:", err)
		return 1
	}
	defer l.Close()
	var mu sync.Mutex
	var conns []*Conn
	go func() {
		for {
			c, err := l.AcceptConn()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func lingerServer(name string) int {
	n, _ := strconv.Atoi(os.Getenv("RPAL_GO_ITERS"))
	l, err := Listen(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linger server:", err)
		return 1
	}
	defer l.Close()
	fmt.Println("ready")
	for range n {
		c, err := l.AcceptConn()
		if err != nil {
			fmt.Fprintln(os.Stderr, "linger server:", err)
			return 1
		}
		if err := c.Send([]byte("bye")); err != nil {
			fmt.Fprintln(os.Stderr, "linger server:", err)
			return 1
		}
		c.Close()
	}
	io.Copy(io.Discard, os.Stdin)
	return 0
}
