// SPDX-License-Identifier: MIT

//go:build !linux

package rpal

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
)

// Every entry point fails with an error wrapping errors.ErrUnsupported.
func TestUnsupported(t *testing.T) {
	want := "rpal: not supported on " + runtime.GOOS
	var d Dialer
	var lc ListenConfig
	cfg := DefaultConfig()
	for name, f := range map[string]func() error{
		"Init":                   func() error { return Init(&cfg) },
		"Alloc":                  func() error { _, err := Alloc(64); return err },
		"ProcessStats":           func() error { _, err := ProcessStats(); return err },
		"Listen":                 func() error { _, err := Listen("x"); return err },
		"ListenConfig.Listen":    func() error { _, err := lc.Listen("x"); return err },
		"Dial":                   func() error { _, err := Dial("x"); return err },
		"DialConn":               func() error { _, err := DialConn("x"); return err },
		"Dialer.Dial":            func() error { _, err := d.Dial("x"); return err },
		"Dialer.DialContext":     func() error { _, err := d.DialContext(context.Background(), "x"); return err },
		"Dialer.DialConn":        func() error { _, err := d.DialConn("x"); return err },
		"Dialer.DialConnContext": func() error { _, err := d.DialConnContext(context.Background(), "x"); return err },
	} {
		if err := f(); !errors.Is(err, errors.ErrUnsupported) || err.Error() != want {
			t.Errorf("%s: %v, want %q wrapping errors.ErrUnsupported", name, err, want)
		}
	}
}

// Where rpal is not supported, ListenTCP serves TCP only and a TCPDialer
// dials TCP: a program that uses them runs everywhere.
func TestTCPOffLinux(t *testing.T) {
	l, err := ListenTCP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Service() != "" {
		t.Errorf("Service() = %q, want \"\"", l.Service())
	}
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	var d TCPDialer
	d.Fallback = func(a string, err error) { t.Errorf("fallback for %s: %v", a, err) }
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("a %T, want a *net.TCPConn", c)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "ok" {
		t.Fatalf("read %q, %v", b, err)
	}
}
