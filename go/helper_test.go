// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// runHelper runs a child-process role of a test (RPAL_GO_HELPER=role,
// RPAL_GO_SERVICE=name).  It prints "ready" once connected.
func runHelper(role string) int {
	name := os.Getenv("RPAL_GO_SERVICE")
	if r := benchHelper(role, name); r >= 0 {
		return r
	}
	if r := slotHelper(role, name); r >= 0 {
		return r
	}
	if role == "linger-server" {
		return lingerServer(name)
	}
	if role == "hold-server" {
		return holdServer(name)
	}
	c, err := DialConn(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	switch role {
	case "echo-server-conn": // the dialer echoes (roles reversed)
		fmt.Println("ready")
		if err := echoServer(c); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		return 0
	case "hang":
		if err := c.Send([]byte("hello")); err != nil {
			return 1
		}
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	case "partial-buf":
		// 4 MiB of which we write 8 bytes: the rest of its pages are
		// not there until WriteMsg makes them.
		const n = 4 << 20
		b, err := Alloc(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		copy(b.Bytes(), "partial")
		start := b.addr &^ (pageSize - 1)
		vec := make([]byte, (b.addr-start+n+pageSize-1)/pageSize)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(addrPtr(start)), uintptr(len(vec)*pageSize), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			fmt.Fprintln(os.Stderr, "helper: mincore:", e)
			return 1
		}
		if !bytes.ContainsFunc(vec, func(r rune) bool { return r&1 == 0 }) {
			fmt.Fprintln(os.Stderr, "helper: every page of a fresh 4 MiB buffer is already there")
			return 1
		}
		if err := c.WriteMsg(b); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		fmt.Println("ready")
		if _, err := c.ReadMsg(); err != io.EOF {
			return 3
		}
		return 0
	case "bad-buf", "bad-flags", "bad-inline", "bad-empty", "bad-empty-stream", "bad-seq", "bad-unwritten":
		fmt.Println("ready")
		time.Sleep(100 * time.Millisecond) // let the server fall asleep first
		c.txMu.Lock()
		switch role {
		case "bad-buf": // a pointer outside our arena
			c.publish(nil, 100, c.p.arenaAddr+c.p.cfg.ArenaSize, slotBuf)
		case "bad-unwritten": // 1 MiB of our arena that nobody wrote
			off := int64(c.p.cfg.ArenaSize / 2)
			if d, err := unix.Seek(c.p.memfd, off, unix.SEEK_DATA); err == nil && d < off+1<<20 {
				fmt.Fprintln(os.Stderr, "helper: our arena has data at", d)
				return 1
			}
			c.publish(nil, 1<<20, c.p.arenaAddr+uint64(off), slotBuf)
		case "bad-flags":
			c.publish(nil, 10, 0, 3)
		case "bad-inline":
			c.publish(nil, 41, 0, slotInline)
		case "bad-empty", "bad-empty-stream":
			c.publish(nil, 0, 0, slotInline)
		case "bad-seq":
			s := c.ring
			*c.u32(s, sLen) = 1
			*c.u32(s, sFlags) = slotInline
			*c.u32(s, sSeq) = 77
			c.tail++
		}
		c.notifyRX()
		c.txMu.Unlock()
		// Wait for the server to hang up.
		_, err := c.ReadMsg()
		if err == io.EOF {
			return 0
		}
		fmt.Fprintln(os.Stderr, "helper: after the hang-up:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, "unknown helper", role)
	return 2
}

// helperCmd returns a command running this test binary as a helper,
// through the emulator that runs this one, if any (RPAL_TEST_EMULATOR,
// scripts/aarch64.sh).
func helperCmd(role, service string) *exec.Cmd {
	args := append(strings.Fields(os.Getenv("RPAL_TEST_EMULATOR")), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "RPAL_GO_HELPER="+role, "RPAL_GO_SERVICE="+service)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// closeEndsRead checks that Close ends a Read blocked on c with net.ErrClosed
// within a second; failMsg says what it means if it does not.
func closeEndsRead(t *testing.T, c net.Conn, failMsg string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 8)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed conn: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal(failMsg)
	}
}
