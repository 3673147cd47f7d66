// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The page's layout is PROTOCOL.md section 9's, offset by offset.
func TestStatLayout(t *testing.T) {
	var h statHdr
	var e statEntry
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"header size", unsafe.Sizeof(h), statHdrSize},
		{"nr_entries", unsafe.Offsetof(h.nrEntries), 12},
		{"pid", unsafe.Offsetof(h.pid), 16},
		{"started", unsafe.Offsetof(h.started), 32},
		{"nr_open", unsafe.Offsetof(h.nrOpen), 40},
		{"clock_ns", unsafe.Offsetof(h.clockNs), 48},
		{"name", unsafe.Offsetof(h.name), 64},
		{"sleep_cost_ns", unsafe.Offsetof(h.sleepCostNs), 160},
		{"wake_lat_ns", unsafe.Offsetof(h.wakeLatNs), 168},
		{"entry size", unsafe.Sizeof(e), statEntrySize},
		{"id", unsafe.Offsetof(e.id), 8},
		{"fd", unsafe.Offsetof(e.fd), 16},
		{"peer_pid", unsafe.Offsetof(e.peerPid), 20},
		{"flags", unsafe.Offsetof(e.flags), 36},
		{"since", unsafe.Offsetof(e.since), 40},
		{"status", unsafe.Offsetof(e.status), 48},
		{"service", unsafe.Offsetof(e.service), 56},
		{"pair", unsafe.Offsetof(e.pair), 120},
		{"tx", unsafe.Offsetof(e.tx), 128},
		{"tx.bufs_out", unsafe.Offsetof(e.tx) + unsafe.Offsetof(e.tx.bufsOut), 184},
		{"rx", unsafe.Offsetof(e.rx), 192},
		{"rx.violations", unsafe.Offsetof(e.rx) + unsafe.Offsetof(e.rx.violations), 240},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, the spec says %d", f.name, f.got, f.want)
		}
	}
}

// pageEntry is an entry as a reader decodes it from the file's bytes.
type pageEntry struct {
	state, flags, status, peerPid uint32
	service                       string
	pair                          uint64
	tx, rx                        [8]uint64
}

// readPage decodes this process's page from the file, as `rpal stat` does:
// header checks, then every open entry.
func readPage(t *testing.T) (hdr []byte, open []pageEntry) {
	t.Helper()
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	return decodePage(t, fmt.Sprintf("%s/stat.%d", p.rundir, p.slot))
}

// pageOfPid decodes the page in our runtime directory whose header names
// pid (a C peer's, say).
func pageOfPid(t *testing.T, pid int) []pageEntry {
	t.Helper()
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := filepath.Glob(p.rundir + "/stat.*")
	for _, path := range paths {
		if b, err := os.ReadFile(path); err == nil && len(b) >= statHdrSize &&
			binary.LittleEndian.Uint32(b[16:]) == uint32(pid) {
			_, open := decodePage(t, path)
			return open
		}
	}
	t.Fatalf("no statistics page of pid %d in %s", pid, p.rundir)
	return nil
}

func decodePage(t *testing.T, path string) (hdr []byte, open []pageEntry) {
	t.Helper()
	return decodeEntries(t, path, statOpen)
}

// decodeEntries is decodePage for the entries of one state.
func decodeEntries(t *testing.T, path string, state uint32) (hdr []byte, open []pageEntry) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no statistics page: %v", err)
	}
	le := binary.LittleEndian
	if len(b) < statHdrSize || le.Uint32(b) != statMagic || le.Uint16(b[4:]) != statVersion ||
		le.Uint16(b[6:]) != statHdrSize || le.Uint32(b[8:]) != statEntrySize {
		t.Fatalf("%s: bad header % x", path, b[:min(len(b), 16)])
	}
	n := min(int(le.Uint32(b[12:])), (len(b)-statHdrSize)/statEntrySize)
	for i := 0; i < n; i++ {
		e := b[statHdrSize+i*statEntrySize:][:statEntrySize]
		if le.Uint32(e)&1 != 0 || le.Uint32(e[4:]) != state {
			continue
		}
		pe := pageEntry{state: le.Uint32(e[4:]), peerPid: le.Uint32(e[20:]), flags: le.Uint32(e[36:]),
			status: le.Uint32(e[48:]), service: string(bytes.TrimRight(e[56:120], "\x00")),
			pair: le.Uint64(e[120:])}
		for k := range 8 {
			pe.tx[k] = le.Uint64(e[128+8*k:])
			pe.rx[k] = le.Uint64(e[192+8*k:])
		}
		open = append(open, pe)
	}
	return b[:statHdrSize], open
}

// A Go process publishes its connections' counters where `rpal stat` reads
// them: the file is locked while the process lives, each open connection
// has an entry with its peer, service and counts, and a closed one's entry
// is free again.
func TestStatPage(t *testing.T) {
	name, l := newService(t)
	done := serveEcho(l)
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	const small, big = 300, 20
	payload := 0
	for i := range small + big {
		n := 32
		if i >= small {
			n = 4096
		}
		payload += n
		if err := c.Send(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		m, err := c.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	hdr, open := readPage(t)
	le := binary.LittleEndian
	if pid := le.Uint32(hdr[16:]); pid != uint32(os.Getpid()) {
		t.Errorf("header pid %d, want %d", pid, os.Getpid())
	}
	if prog := string(bytes.TrimRight(hdr[64:128], "\x00")); !strings.HasPrefix(prog, "rpal") {
		t.Errorf("header name %q, want the test binary's", prog)
	}
	var dialed, accepted *pageEntry
	for i := range open {
		if open[i].service != name {
			continue
		}
		if open[i].flags&statAccepted != 0 {
			accepted = &open[i]
		} else {
			dialed = &open[i]
		}
	}
	if dialed == nil || accepted == nil {
		t.Fatalf("entries for %s: dialed %v, accepted %v, of %d open", name, dialed, accepted, len(open))
	}
	if dialed.pair == 0 || dialed.pair != accepted.pair {
		t.Errorf("pair values %#x and %#x: the two ends of one connection must name it alike", dialed.pair, accepted.pair)
	}
	want := uint64(small + big)
	for _, e := range []*pageEntry{dialed, accepted} {
		if e.peerPid != uint32(os.Getpid()) {
			t.Errorf("peer pid %d, want ours", e.peerPid)
		}
		if e.tx[0] != want || e.rx[0] != want || e.tx[1] != uint64(payload) || e.rx[1] != uint64(payload) {
			t.Errorf("msgs %d/%d bytes %d/%d sent/received, want %d and %d", e.tx[0], e.rx[0], e.tx[1], e.rx[1], want, payload)
		}
	}
	// Each Send looks whether the receiver sleeps after it published: a
	// wake-up, or one avoided.  The client's sends have all returned (the
	// echo server's last look may still be under way).
	if e := dialed; e.tx[2]+e.tx[3] != want {
		t.Errorf("%d wake-ups and %d avoided for %d sends", e.tx[2], e.tx[3], want)
	}
	// Alive: our exclusive lock stays on the file.
	p, _ := ensure()
	f, err := os.Open(fmt.Sprintf("%s/stat.%d", p.rundir, p.slot))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		t.Error("a reader could lock the page of a live process: it would read it as stale")
	}
	openBefore := le.Uint32(hdr[40:])
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	hdr, open = readPage(t)
	for _, e := range open {
		if e.service == name {
			t.Errorf("an entry of %s is still open after both ends closed", name)
		}
	}
	// Other tests' connections may still be closing: at most two fewer.
	if n := le.Uint32(hdr[40:]); n > openBefore-2 {
		t.Errorf("nr_open %d after closing both ends, was %d", n, openBefore)
	}
	if info := c.Info(); info.TxMsgs != want || info.RxMsgs != want {
		t.Errorf("Info after Close: %d sent, %d received, want %d", info.TxMsgs, info.RxMsgs, want)
	}
}

// A listener has an entry of its own from Listen to Close, so that a
// server with no connection is found by its service: it counts the
// connections made and the handshakes that failed, and is not counted
// among the open connections.
func TestStatListener(t *testing.T) {
	p, err := ensure()
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("%s/stat.%d", p.rundir, p.slot)
	listeners := func() []pageEntry {
		_, ls := decodeEntries(t, path, statListen)
		return ls
	}
	of := func(name string) *pageEntry {
		for _, e := range listeners() {
			if e.service == name {
				return &e
			}
		}
		return nil
	}
	hdr, _ := readPage(t)
	openBefore := binary.LittleEndian.Uint32(hdr[40:])
	name, l := newService(t)
	e := of(name)
	if e == nil {
		t.Fatalf("no listener entry for %s after Listen: %+v", name, listeners())
	}
	if e.rx[0] != 0 || e.rx[6] != 0 {
		t.Errorf("a new listener counts %d made and %d failed", e.rx[0], e.rx[6])
	}
	hdr, _ = readPage(t)
	if n := binary.LittleEndian.Uint32(hdr[40:]); n != openBefore {
		t.Errorf("nr_open %d after Listen, was %d: a listener is no connection", n, openBefore)
	}

	// One client that says nonsense, one that gets through.
	raw, err := net.Dial("unixpacket", l.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write([]byte("not a hello")); err != nil {
		t.Fatal(err)
	}
	if _, ok := readRefusal(t, raw); !ok {
		t.Error("the nonsense was not refused")
	}
	raw.Close()
	go func() {
		if s, err := l.AcceptConn(); err == nil {
			echoServer(s)
		}
	}()
	c, err := DialConn(name)
	if err != nil {
		t.Fatal(err)
	}
	echoClient(t, c, 3)
	c.Close()
	if e = of(name); e == nil || e.rx[0] != 1 || e.rx[6] != 1 {
		t.Errorf("after one refusal and one connection the entry is %+v, want rx.msgs 1 and rx.violations 1", e)
	}
	l.Close()
	if e = of(name); e != nil {
		t.Errorf("the listener's entry is still there after Close: %+v", e)
	}
}

// entryOf is the open entry of the connection accepted for service, or nil.
func entryOf(t *testing.T, service string) *pageEntry {
	_, open := readPage(t)
	for i := range open {
		if open[i].service == service && open[i].flags&statAccepted != 0 {
			return &open[i]
		}
	}
	return nil
}

// The failure paths show on the page: a peer that breaks the protocol
// leaves the error status and a violation, one killed with SIGKILL the
// peer-gone status; each entry is free once the connection is closed.
func TestStatPageFailures(t *testing.T) {
	name, l := newService(t)
	cmd := helperCmd("bad-flags", name)
	startReady(t, cmd)
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.ReadMsg(); !errors.Is(err, syscall.EPROTO) {
		t.Fatalf("want a protocol error, got %v", err)
	}
	if e := entryOf(t, name); e == nil || e.status&statError == 0 || e.rx[6] == 0 {
		t.Errorf("after a violation: entry %+v, want the error status and a violation", e)
	}
	c.Close()
	if e := entryOf(t, name); e != nil {
		t.Errorf("entry still open after Close: %+v", e)
	}
	cmd.Wait()

	cmd = helperCmd("hang", name)
	startReady(t, cmd)
	if c, err = l.AcceptConn(); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ReadMsg(); err != nil {
		t.Fatal(err)
	}
	if e := entryOf(t, name); e == nil || e.status != 0 {
		t.Fatalf("a live peer's entry: %+v, want status 0", e)
	}
	cmd.Process.Kill()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.ReadMsg(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("want ECONNRESET, got %v", err)
	}
	if e := entryOf(t, name); e == nil || e.status&statPeerGone == 0 || e.status&statError != 0 {
		t.Errorf("after the peer's death: entry %+v, want the peer-gone status alone", e)
	}
}
