// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The C programs of go/interop/c, built against librpal by
// scripts/go-test.sh, which points RPAL_INTEROP_BIN at them.
func interopBin(t *testing.T, name string) string {
	dir := os.Getenv("RPAL_INTEROP_BIN")
	if dir == "" {
		t.Skip("RPAL_INTEROP_BIN not set (scripts/go-test.sh builds the C peers)")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s: %v", p, err)
	}
	return p
}

// startReady starts cmd and waits for it to print "ready".
func startReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedBuf{}
	// The child dies with us even if a test times out before its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- nil
				io.Copy(io.Discard, out)
				return
			}
		}
		ready <- fmt.Errorf("%s exited before ready: %s", cmd.Path, cmd.Stderr)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not ready after 10s", cmd.Path)
	}
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), svcSeq.Add(1))
}

// Go client, C server: message API and byte stream.
func TestInteropGoClientCServer(t *testing.T) { bothSleeps(t, testInteropGoClientCServer) }

func testInteropGoClientCServer(t *testing.T) {
	bin := interopBin(t, "echo_server")
	name := uniqueName("cserver")
	srv := exec.Command(bin, name)
	startReady(t, srv)

	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	// rpal stat pairs the two ends of a connection by the entries' pair
	// value: the C server's entry must carry the one ours does.
	if err := c.Send([]byte("pair")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	_, ours := readPage(t)
	theirs := pageOfPid(t, srv.Process.Pid)
	var mine, its uint64
	for _, e := range ours {
		if e.service == name && e.peerPid == uint32(srv.Process.Pid) {
			mine = e.pair
		}
	}
	for _, e := range theirs {
		if e.peerPid == uint32(os.Getpid()) {
			its = e.pair
		}
	}
	if mine == 0 || mine != its {
		t.Errorf("pair values: ours %#x, the C server's %#x", mine, its)
	}
	echoClient(t, c, 20000)
	c.Close()

	// The byte stream over the C echo: chunks come back in order.
	var d Dialer
	sc, err := d.DialContext(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for _, n := range []int{1, 40, 41, 1000, 65536, 1 << 20, 3<<20 + 5} {
		out := make([]byte, n)
		fill(out, int64(n))
		errc := make(chan error, 1)
		go func() { _, err := sc.Write(out); errc <- err }()
		in := make([]byte, n)
		if _, err := io.ReadFull(sc, in); err != nil {
			t.Fatalf("stream read of %d: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if crc32.ChecksumIEEE(in) != crc32.ChecksumIEEE(out) {
			t.Fatalf("stream echo of %d bytes differs", n)
		}
	}
	sc.(*Stream).CloseWrite()
	if n, err := sc.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("stream: want EOF after CloseWrite, got %d, %v", n, err)
	}
}

// C client, Go server.
func TestInteropCClientGoServer(t *testing.T) { bothSleeps(t, testInteropCClientGoServer) }

func testInteropCClientGoServer(t *testing.T) {
	bin := interopBin(t, "echo_client")
	name, l := newService(t)
	done := serveEcho(l)
	out, err := exec.Command(bin, name, "echo", "20000").CombinedOutput()
	if err != nil {
		t.Fatalf("C client: %v\n%s", err, out)
	}
	t.Logf("C client:\n%s", out)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A C peer killed with SIGKILL: the Go server sees an error within a
// second, reclaims its buffers and serves the next connection.
func TestInteropKillCPeer(t *testing.T) { bothSleeps(t, testInteropKillCPeer) }

func testInteropKillCPeer(t *testing.T) {
	bin := interopBin(t, "echo_client")
	name, l := newService(t)
	cmd := exec.Command(bin, name, "hang")
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.ReadMsg()
	if err != nil || string(m.Bytes()) != "hello" {
		t.Fatalf("first message: %v %v", m, err)
	}
	// Leave a buffer of ours with the peer.
	big := make([]byte, 5000)
	if err := c.Send(big); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c.ReadMsg(); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("want ECONNRESET, got %v", err)
		}
		t.Logf("peer death seen after %v: %v", time.Since(t0), err)
	case <-time.After(time.Second):
		t.Fatal("no error within 1 s of the peer's death")
	}
	if err := c.Send([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("send to a dead peer: %v", err)
	}
	if info := c.Info(); info.BufsOutstanding != 0 || info.PeerAlive {
		t.Fatalf("after death: %+v", info)
	}
	c.Close()

	// The next client is served.
	done := serveEcho(l)
	out, err := exec.Command(interopBin(t, "echo_client"), name, "echo", "1000").CombinedOutput()
	if err != nil {
		t.Fatalf("second C client: %v\n%s", err, out)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// lockedBuf is a Buffer safe for a writer and a reader goroutine.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A hostile Go client against the C server: librpal closes that connection
// (EPROTO) and goes on serving.
func TestInteropHostileGoClientCServer(t *testing.T) {
	bin := interopBin(t, "echo_server")
	name := uniqueName("cserver-hostile")
	srv := exec.Command(bin, name)
	startReady(t, srv)
	for _, role := range []string{"bad-buf", "bad-flags", "bad-inline", "bad-seq", "bad-unwritten"} {
		cmd := helperCmd(role, name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: the C server did not close the connection: %v\n%s", role, err, out)
		}
	}
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	echoClient(t, c, 100)
	c.Close()
	time.Sleep(50 * time.Millisecond)
	log := srv.Stderr.(*lockedBuf).String()
	if strings.Count(log, "broke the protocol") < 5 {
		t.Fatalf("C server log lacks the violations:\n%s", log)
	}
	t.Logf("C server:\n%s", log)
}

// A C client that sends and exits at once (librpal keeps its block for us,
// but the process is gone): every message arrives, then end of stream.
func TestInteropCBurstThenExit(t *testing.T) {
	bin := interopBin(t, "echo_client")
	name, l := newService(t)
	const n = 200
	if out, err := exec.Command(bin, name, "burst", fmt.Sprint(n)).CombinedOutput(); err != nil {
		t.Fatalf("C client: %v\n%s", err, out)
	}
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		m, err := c.ReadMsg()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		b := m.Bytes()
		if len(b) != 1000+i {
			t.Fatalf("message %d: %d bytes", i, len(b))
		}
		for j := range b {
			if b[j] != byte(i+j) {
				t.Fatalf("message %d byte %d corrupted", i, j)
			}
		}
		m.Ack()
	}
	if _, err := c.ReadMsg(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

// A C peer that shuts down reading (rpal_shutdown SHUT_RD) ends our Write
// blocked on the full ring with EPIPE, and what it sends after still
// arrives.
func TestInteropCPeerShutsDownReading(t *testing.T) {
	bin := interopBin(t, "echo_client")
	name, l := newService(t)
	cmd := exec.Command(bin, name, "shutrd")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wrote := make(chan error, 1)
	go func() {
		for {
			if err := c.Send([]byte("fill")); err != nil {
				wrote <- err
				return
			}
		}
	}()
	select {
	case err := <-wrote:
		if !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("the blocked write: %v, want EPIPE", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write still blocks 5 s after the C peer shut down reading")
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "shut\n" {
		t.Fatalf("the C peer said %q (%v)", line, err)
	}
	m, err := c.ReadMsg()
	if err != nil || string(m.Bytes()) != "after" {
		t.Fatalf("what it sent after SHUT_RD: %v", err)
	}
	m.Ack()
}
