// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stream writer killed with SIGKILL mid-stream while the next client
// tries to claim its slot (two slots: the server's and the one the dead
// writer leaves).  The server's mapping of the dead writer's arena must
// stay put until it has read every byte the writer published: exactly the
// pattern, then ECONNRESET, never a fault or other bytes; meanwhile the
// newcomer gets "all slots taken" and connects once the server has closed
// the dead connection.  The server runs in a child process of its own
// (RPAL_NR_SLOTS=2, its own runtime directory); each iteration starts one
// writer process.
func TestSlotReuseAfterKill(t *testing.T) {
	iters, budget := 150, 15*time.Second
	if testing.Short() {
		iters, budget = 20, 5*time.Second
	}
	cmd := helperCmd("slot-server", "slotreuse")
	cmd.Env = append(cmd.Env, "RPAL_NR_SLOTS=2", "RPAL_RUNTIME_DIR="+t.TempDir(),
		"RPAL_ARENA_SIZE=2097152", "RPAL_GO_ITERS="+strconv.Itoa(iters),
		"RPAL_GO_BUDGET_MS="+strconv.Itoa(int(budget/time.Millisecond)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("slot server: %v\n%s", err, out.String())
		}
	case <-time.After(budget + 60*time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("slot server hung\n%s", out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	if !strings.Contains(out.String(), "iterations") {
		t.Fatal("no summary from the slot server")
	}
}

// slotHelper runs the child-process roles of TestSlotReuseAfterKill; -1 if
// role is not one of them.
func slotHelper(role, name string) int {
	switch role {
	case "slot-server":
		if err := slotServer(name); err != nil {
			fmt.Fprintln(os.Stderr, "slot server:", err)
			return 1
		}
		return 0
	case "slot-writer":
		return slotWriter(name)
	}
	return -1
}

// slotPattern is the stream a writer sends, from offset seed on, cyclically.
// Random bytes: the server compares whole runs with bytes.Equal.
func slotPattern() []byte {
	p := make([]byte, 1<<20+4099)
	fill(p, 4242)
	return p
}

// slotWriter dials (once printing how the first try went: "try ok" or
// "try <errno> <error>", then again until it connects), prints "ready" and
// writes its pattern until it is killed.
func slotWriter(name string) int {
	seed, _ := strconv.Atoi(os.Getenv("RPAL_GO_SEED"))
	var c *Conn
	deadline := time.Now().Add(10 * time.Second)
	for try := 0; ; try++ {
		var err error
		c, err = DialConn(name)
		if try == 0 {
			if err == nil {
				fmt.Println("try ok")
			} else {
				var errno syscall.Errno
				errors.As(err, &errno)
				fmt.Printf("try %d %v\n", int(errno), err)
			}
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "slot writer:", err)
			return 1
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ready")
	s := NewStream(c)
	p := slotPattern()
	pos := seed % len(p)
	for {
		n, err := s.Write(p[pos:])
		if err != nil {
			return 0
		}
		pos = (pos + n) % len(p)
	}
}

// slotReader reads one writer's stream and checks it against the pattern.
type slotReader struct {
	s    *Stream
	cmd  *exec.Cmd
	seed int
	off  int // bytes read so far
	buf  []byte
	rng  *rand.Rand
}

// read reads n bytes (any error fails) or, with n < 0, to the end, which
// must be ECONNRESET.
func (r *slotReader) read(p []byte, n int) error {
	for n < 0 || n > 0 {
		k := 1 + r.rng.Intn(len(r.buf))
		if n > 0 {
			k = min(k, n)
		}
		got, err := r.s.Read(r.buf[:k])
		if got > 0 {
			b := r.buf[:got]
			for len(b) > 0 {
				at := (r.seed + r.off) % len(p)
				m := min(len(b), len(p)-at)
				if !bytes.Equal(b[:m], p[at:at+m]) {
					i := 0
					for b[i] == p[at+i] {
						i++
					}
					return fmt.Errorf("writer pid %d: byte %d of the stream is %#x, want %#x", r.cmd.Process.Pid, r.off+i, b[i], p[at+i])
				}
				b, r.off = b[m:], r.off+m
			}
			if n > 0 {
				n -= got
			}
		}
		if err != nil {
			if n < 0 && errors.Is(err, syscall.ECONNRESET) {
				return nil
			}
			return fmt.Errorf("writer pid %d: after %d bytes: %w", r.cmd.Process.Pid, r.off, err)
		}
	}
	return nil
}

func slotServer(name string) error {
	iters, _ := strconv.Atoi(os.Getenv("RPAL_GO_ITERS"))
	ms, _ := strconv.Atoi(os.Getenv("RPAL_GO_BUDGET_MS"))
	budget := time.Duration(ms) * time.Millisecond
	l, err := Listen(name)
	if err != nil {
		return err
	}
	defer l.Close()
	p := slotPattern()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	accepted := make(chan *Conn)
	go func() {
		for {
			c, err := l.AcceptConn()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var prev *slotReader
	t0 := time.Now()
	refusedBusy, total := 0, 0
	sample := ""
	i := 0
	for ; i < iters && time.Since(t0) < budget; i++ {
		seed := rng.Intn(len(p))
		cmd := helperCmd("slot-writer", name)
		cmd.Env = append(cmd.Env, "RPAL_GO_SEED="+strconv.Itoa(seed))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		lines := make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		line := func(what string) (string, error) {
			select {
			case s, ok := <-lines:
				if !ok {
					return "", fmt.Errorf("iteration %d: writer exited before %s", i, what)
				}
				return s, nil
			case <-time.After(10 * time.Second):
				return "", fmt.Errorf("iteration %d: no %s from the writer", i, what)
			}
		}
		try, err := line("first try")
		if err != nil {
			return err
		}
		// The newcomer has tried to claim a slot while the dead writer's
		// connection is still open.  Whatever it got, the dead writer's
		// stream must read intact to its end.
		if prev != nil {
			if err := prev.read(p, -1); err != nil {
				return fmt.Errorf("iteration %d, the dead writer's stream: %w", i, err)
			}
			prev.s.Close()
			total += prev.off
		}
		switch {
		case try == "try ok":
			if prev != nil {
				return fmt.Errorf("iteration %d: a newcomer claimed the slot still mapped for a dead writer", i)
			}
		case strings.HasPrefix(try, fmt.Sprintf("try %d ", int(syscall.EBUSY))):
			if refusedBusy == 0 {
				sample = try
			}
			refusedBusy++
		default:
			return fmt.Errorf("iteration %d: newcomer's first try: %s", i, try)
		}
		if try != "try ok" {
			if _, err := line("ready"); err != nil {
				return err
			}
		}
		var c *Conn
		select {
		case c = <-accepted:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("iteration %d: the writer did not connect", i)
		}
		r := &slotReader{s: NewStream(c), cmd: cmd, seed: seed, buf: make([]byte, 96<<10), rng: rng}
		if err := r.read(p, 1+rng.Intn(1<<20)); err != nil {
			return fmt.Errorf("iteration %d: %w", i, err)
		}
		cmd.Process.Kill()
		cmd.Wait()
		// Wait for the pidfd to report the death: only then is the
		// mapping a dead incarnation's, the case under test.
		for k := 0; ; k++ {
			c.p.mu.Lock()
			dead := c.peer.dead
			c.p.mu.Unlock()
			if dead {
				break
			}
			if k == 5000 {
				return fmt.Errorf("iteration %d: the writer's death was not noticed", i)
			}
			time.Sleep(time.Millisecond)
		}
		prev = r
	}
	if prev != nil {
		if err := prev.read(p, -1); err != nil {
			return fmt.Errorf("the last dead writer's stream: %w", err)
		}
		prev.s.Close()
		total += prev.off
	}
	st, _ := ProcessStats()
	fmt.Printf("%d iterations in %v: %d MiB read, %d newcomers refused with EBUSY while the slot was mapped; %d peers mapped at the end\n",
		i, time.Since(t0).Round(time.Millisecond), total>>20, refusedBusy, st.PeersMapped)
	fmt.Println("first refusal:", sample)
	if i > 1 && refusedBusy != i-1 {
		return errors.New("some newcomer was not refused")
	}
	return nil
}
