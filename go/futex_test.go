// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sleepKind makes waiters sleep on the peer's futex word (for as long as
// they wait, with a P to spare for it) or on the doorbell only, as where
// futex_waitv is missing, until the test ends.  The futex kind skips where
// the system has no futex_waitv.
func sleepKind(t *testing.T, futex bool) {
	t.Helper()
	off := noFutexWaitv.Load()
	if futex {
		// A word that has moved: futex_waitv, where it exists, says EAGAIN.
		var word, kick uint32 = 1, 0
		if err := futexWaitv(&word, 0, &kick, 0, time.Second); off || err != syscall.EAGAIN {
			t.Skipf("SKIP: futex_waitv is unavailable here (%v): waiters sleep on the doorbell only", err)
		}
	}
	limit, procs := futexSleepLimit.Load(), runtime.GOMAXPROCS(0)
	if futex {
		futexSleepLimit.Store(int64(time.Minute))
		if procs < 2 {
			runtime.GOMAXPROCS(2)
		}
	} else {
		noFutexWaitv.Store(true)
	}
	t.Cleanup(func() {
		futexSleepLimit.Store(limit)
		noFutexWaitv.Store(off)
		runtime.GOMAXPROCS(procs)
	})
}

// bothSleeps runs f once with each kind of sleep (see sleepKind).
func bothSleeps(t *testing.T, f func(t *testing.T)) {
	for _, futex := range []bool{true, false} {
		name := "doorbell"
		if futex {
			name = "futex"
		}
		t.Run(name, func(t *testing.T) {
			sleepKind(t, futex)
			f(t)
		})
	}
}

// until polls cond every 50 µs for up to 5 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(50 * time.Microsecond) {
		if time.Now().After(end) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// blockAsync starts b.Recv (or, with tx, b.Send until the ring is full) in
// a goroutine with the sleep-at-once policy, and waits until b advertises
// the sleep flags want (and, for a futex sleep, sleeps on the futex).
func blockAsync(t *testing.T, b *Conn, tx bool, want uint64) chan error {
	t.Helper()
	sp, mu, dir := &b.rxSpin, &b.rxMu, 0
	if tx {
		sp, mu, dir = &b.txSpin, &b.txMu, 1
	}
	mu.Lock()
	sp.init(0, WaitSleep)
	mu.Unlock()
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			var err error
			if tx {
				err = b.Send(buf[:1])
			} else {
				_, err = b.Recv(buf)
			}
			if err != nil || !tx {
				got <- err
				return
			}
		}
	}()
	futex := want&(waitRXFutex|waitTXFutex) != 0
	until(t, fmt.Sprintf("the waiter never advertised %#x", want), func() bool {
		w := atomic.LoadUint64(b.u64(b.me, bWaiting))
		return w&want == want && (!futex || b.futexAsleep[dir].Load())
	})
	return got
}

// recvAsync blocks b.Recv on the peer's futex word (blockAsync).
func recvAsync(t *testing.T, b *Conn) chan error {
	t.Helper()
	return blockAsync(t, b, false, waitRX|waitRXFutex)
}

// sendAsync blocks b.Send on the peer's futex word, waiting for room.
func sendAsync(t *testing.T, b *Conn) chan error {
	t.Helper()
	return blockAsync(t, b, true, waitTX|waitTXFutex)
}

// within waits up to 2 s for the receiver's result.
func within(t *testing.T, got chan error, what string) error {
	t.Helper()
	select {
	case err := <-got:
		return err
	case <-time.After(2 * time.Second):
		t.Fatalf("the receiver still sleeps 2 s after %s", what)
		return nil
	}
}

// A receiver sleeps on the peer's futex word, which the peer's send
// changes and wakes: no byte goes through the doorbell.
func TestFutexSleepWakes(t *testing.T) {
	sleepKind(t, true)
	a, b := connPair(t)
	for round := 0; round < 20; round++ {
		got := recvAsync(t, b)
		w := atomic.LoadUint64(a.u64(a.pb, bWaiting))
		if w&(waitRX|waitRXFutex) != waitRX|waitRXFutex || w&waitRXBell != 0 {
			t.Fatalf("round %d: the sleeper advertised %#x, want the RX and RX futex flags alone", round, w)
		}
		rings := a.Info().Wakeups
		if err := a.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := within(t, got, "the message"); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if a.Info().Wakeups == rings {
			t.Fatalf("round %d: the send woke nobody: the test exercised nothing", round)
		}
		rung := false
		_ = b.rxRaw.Control(func(fd uintptr) { rung = drainBell(int(fd), make([]byte, 64)) })
		if rung {
			t.Fatalf("round %d: the wake-up went through the doorbell", round)
		}
	}
}

// Our own reasons to end a futex sleep reach it through our word, not the
// peer's, which a peer can hold still: Close, a new read deadline, the
// peer's death, a protocol violation.
func TestFutexSleepKicks(t *testing.T) {
	sleepKind(t, true)
	cases := []struct {
		name string
		do   func(a, b *Conn)
		want func(error) bool
	}{
		// Close takes the receiver's lock: it must wake it first.
		{"close", func(a, b *Conn) { go b.Close() }, func(err error) bool { return err != nil }},
		{"deadline", func(a, b *Conn) { b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) },
			func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }},
		{"death", func(a, b *Conn) { b.markDead(false) }, func(err error) bool { return err != nil }},
		{"violation", func(a, b *Conn) { b.fail("test", 0) }, func(err error) bool { return err != nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := connPair(t)
			got := recvAsync(t, b)
			tc.do(a, b)
			if err := within(t, got, tc.name); !tc.want(err) {
				t.Errorf("Recv returned %v", err)
			}
		})
	}
}

// Threads asleep in futex_waitv are bounded: one P stays free, and a
// waiter beyond that sleeps on the doorbell; both still wake.
func TestFutexSleepersBounded(t *testing.T) {
	sleepKind(t, true)
	procs := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(procs)
	a1, b1 := connPair(t)
	a2, b2 := connPair(t)
	got1 := recvAsync(t, b1)
	got2 := blockAsync(t, b2, false, waitRX|waitRXBell)
	if b2.futexAsleep[0].Load() {
		t.Fatal("with GOMAXPROCS 2, two waiters sleep on futexes")
	}
	for _, a := range []*Conn{a2, a1} {
		if err := a.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := within(t, got2, "its message (doorbell sleeper)"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, got1, "its message (futex sleeper)"); err != nil {
		t.Fatal(err)
	}
}

// A futex sleep that outlasts its bound moves to the doorbell, where the
// message still wakes it.
func TestFutexSleepMovesToDoorbell(t *testing.T) {
	sleepKind(t, true)
	futexSleepLimit.Store(int64(20 * time.Millisecond))
	a, b := connPair(t)
	got := recvAsync(t, b)
	wakesOnDoorbell(t, a, got, nil)
}

// wakesOnDoorbell waits until a's peer receiver advertises a doorbell
// sleep, then calls stop (if any), sends, and checks the receiver wakes.
func wakesOnDoorbell(t *testing.T, a *Conn, got chan error, stop func()) {
	t.Helper()
	until(t, "the receiver never moved to the doorbell", func() bool {
		return atomic.LoadUint64(a.u64(a.pb, bWaiting))&waitRXBell != 0
	})
	if stop != nil {
		stop()
	}
	if err := a.Send([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := within(t, got, "the message"); err != nil {
		t.Fatal(err)
	}
}

// A peer that keeps changing its futex word, or waking it, with nothing
// published cannot keep a receiver's thread busy: after a few such
// wake-ups the receiver sleeps on the doorbell, and the message still
// wakes it.
func TestFutexSleepSpuriousPeer(t *testing.T) {
	sleepKind(t, true)
	a, b := connPair(t)
	got := recvAsync(t, b)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the hostile peer: a's block is b's peer block
		defer close(done)
		word := a.u32(a.me, bWakeSeq)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			atomic.AddUint32(word, 1)
			if i%2 == 0 {
				wakeFutex(word)
			}
		}
	}()
	wakesOnDoorbell(t, a, got, func() { close(stop); <-done })
}

// The same kicks end a sender's futex sleep while it waits for room.
func TestFutexSleepKicksSender(t *testing.T) {
	sleepKind(t, true)
	for _, tc := range []struct {
		name string
		do   func(b *Conn)
		want func(error) bool
	}{
		{"close", func(b *Conn) { go b.Close() }, func(err error) bool { return err != nil }},
		{"deadline", func(b *Conn) { b.SetWriteDeadline(time.Now().Add(20 * time.Millisecond)) },
			func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }},
		{"death", func(b *Conn) { b.markDead(false) }, func(err error) bool { return err != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b := connPair(t)
			got := sendAsync(t, b)
			tc.do(b)
			if err := within(t, got, tc.name); !tc.want(err) {
				t.Errorf("Send returned %v", err)
			}
		})
	}
}

// A receiver and a sender of one connection asleep on the same peer word
// at once: the peer's reads wake the sender, its send the receiver.
func TestFutexSleepBothDirections(t *testing.T) {
	sleepKind(t, true)
	procs := runtime.GOMAXPROCS(4) // room for two futex sleepers
	defer runtime.GOMAXPROCS(procs)
	for round := 0; round < 20; round++ {
		a, b := connPair(t)
		gotRX := recvAsync(t, b)
		gotTX := sendAsync(t, b)
		buf := make([]byte, 64)
		for i := 0; i < 64; i++ {
			if _, err := a.Recv(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := within(t, gotRX, "the message"); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		b.Close()
		if err := within(t, gotTX, "Close"); err == nil {
			t.Fatalf("round %d: the sender returned no error after Close", round)
		}
	}
}

// What happens between a sleeper's last look and its futex_waitv: a
// message published, or a kick of ours (a deadline already past, Close),
// must end the sleep at once, not at its bound.
func TestFutexSleepWindows(t *testing.T) {
	sleepKind(t, true)
	futexSleepLimit.Store(int64(2 * time.Second))
	done := func(d bool, err error) bool { return d && err == nil }
	for _, tc := range []struct {
		name           string
		before, inside func(a, b *Conn)
		want           func(bool, error) bool
	}{
		{"message before the advertisement", func(a, b *Conn) { a.Send([]byte("x")) }, nil, done},
		{"message after the last look", nil, func(a, b *Conn) { a.Send([]byte("x")) }, done},
		{"deadline after the last look", nil, func(a, b *Conn) { b.SetReadDeadline(time.Now().Add(-time.Second)) },
			func(d bool, err error) bool { return d && errors.Is(err, os.ErrDeadlineExceeded) }},
		{"close after the last look", nil, func(a, b *Conn) { b.closed.Store(true); b.kickFutex(0) }, done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := connPair(t)
			if tc.before != nil {
				tc.before(a, b)
			}
			looks := 0
			ready := func() bool {
				// The first look finds nothing; the event comes right after.
				if looks++; looks == 1 && tc.inside != nil {
					tc.inside(a, b)
					return false
				}
				return b.rxReady()
			}
			b.rxMu.Lock()
			t0 := time.Now()
			d, err := b.sleepFutex(waitRX, ready, &b.rdDeadline)
			b.rxMu.Unlock()
			if el := time.Since(t0); el > time.Second || !tc.want(d, err) {
				t.Fatalf("sleepFutex returned %v, %v after %v", d, err, el)
			}
			b.closed.Store(false) // connPair's clean-up closes it
		})
	}
}
