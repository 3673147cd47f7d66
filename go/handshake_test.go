// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
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
}

func TestDialErrors(t *testing.T) {
	if _, err := Dial(uniqueName("nobody")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no such service: %v", err)
	}
	name, _ := newService(t)
	if _, err := Listen(name); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener: %v", err)
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
	_, err = Dial(name)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("want EACCES, got %v", err)
	}
	t.Log(err)
	// The client refuses a server it does not trust, too.
	name2, _ := newService(t)
	d := Dialer{Policy: &Policy{GIDs: []uint32{999999}}}
	if _, err := d.DialContext(t.Context(), name2); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("client policy: %v", err)
	}
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
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := parseRefuse(buf[:n])
	if !ok || r.Errno != int32(syscall.EPROTO) {
		t.Fatalf("want REFUSE/EPROTO, got %d bytes %+v", n, r)
	}
	t.Logf("refused: %s", r.Reason)

	// Silence: dropped after the handshake timeout.
	c2, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c2.Read(buf); err == nil {
		t.Fatal("a silent client was not dropped")
	}
	// And a real client still gets through.
	go func() {
		s, err := l.AcceptConn()
		if err == nil {
			echoServer(s)
		}
	}()
	cc, err := Dial(name)
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
