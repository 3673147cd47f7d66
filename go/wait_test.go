// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// Freed small blocks are kept unmerged and reused; the cache is merged
// before an allocation fails, and a block freed twice is refused.
func TestAllocatorCache(t *testing.T) {
	const size = 1 << 20
	a := newAllocator(pageSize, size)
	var offs []uint64
	for i := 0; i < 3*cacheDepth; i++ {
		off, ok := a.get(uint64(64 << (i % cacheOrders)))
		if !ok {
			t.Fatalf("get %d failed", i)
		}
		offs = append(offs, off)
	}
	for _, off := range offs {
		if !a.put(off) {
			t.Fatalf("put %#x refused", off)
		}
	}
	if a.put(offs[0]) {
		t.Fatal("a block freed twice was accepted (it sits in the cache)")
	}
	if used, n := a.stats(); used != 0 || n != 0 {
		t.Fatalf("after freeing everything: %d bytes in %d blocks used", used, n)
	}
	// The cached block comes back first.
	last := offs[len(offs)-1]
	if off, _ := a.get(64 << ((len(offs) - 1) % cacheOrders)); off != last {
		t.Fatalf("got %#x, want the cached %#x", off, last)
	}
	a.put(last)
	// Half the arena needs every cached block merged back.
	off, ok := a.get(size / 2)
	if !ok || off != size/2 {
		t.Fatalf("half the arena: %#x %v (the cache was not flushed?)", off, ok)
	}
	a.put(off)
}

func TestSpinnerAdapts(t *testing.T) {
	const ceiling = 100 * time.Microsecond
	var s spinner
	s.init(ceiling, WaitSleep)
	if s.budget() != 0 {
		t.Fatal("WaitSleep spins")
	}
	s.init(ceiling, WaitSpin)
	for i := 0; i < 40; i++ {
		s.slept(time.Millisecond)
	}
	if s.budget() != ceiling {
		t.Fatalf("WaitSpin budget %v after long waits, want the ceiling", s.budget())
	}
	s.init(ceiling, WaitAdaptive)
	// Long waits: the budget falls to its floor, not to zero.
	for i := 0; i < 40; i++ {
		s.slept(time.Millisecond)
	}
	if s.budget() != ceiling/16 {
		t.Fatalf("after long waits the budget is %v, want %v", s.budget(), ceiling/16)
	}
	// One short spin restores it; an occasional long wait among short
	// ones does not take it away.
	s.hit(2 * time.Microsecond)
	if s.budget() != ceiling {
		t.Fatalf("after a hit the budget is %v", s.budget())
	}
	for i := 0; i < 40; i++ {
		s.hit(10 * time.Microsecond)
	}
	s.slept(time.Millisecond)
	if s.budget() != ceiling {
		t.Fatalf("one long wait among short ones cut the budget to %v", s.budget())
	}
	// Waits that sleep but end within the ceiling keep it.
	s.init(ceiling, WaitAdaptive)
	for i := 0; i < 40; i++ {
		s.slept(80 * time.Microsecond)
	}
	if s.budget() != ceiling {
		t.Fatalf("waits within the ceiling cut the budget to %v", s.budget())
	}
	// Short and long waits in turn, as a reader's within and between
	// calls at a moderate rate: the spin covers the short ones, and only
	// the floor is spent on the long ones.
	s.init(ceiling, WaitAdaptive)
	for i := 0; i < 8; i++ {
		s.hit(30 * time.Microsecond)
		s.slept(time.Millisecond)
	}
	if b := s.budget(); b != ceiling {
		t.Fatalf("after a long wait, before a short one, the budget is %v, want %v", b, ceiling)
	}
	s.hit(30 * time.Microsecond)
	if b := s.budget(); b != ceiling/16 {
		t.Fatalf("after a short wait, before a long one, the budget is %v, want %v", b, ceiling/16)
	}
	// Once the long waits stop, the short ones spin again.
	s.hit(ceiling / 16)
	s.hit(ceiling / 16)
	if b := s.budget(); b != ceiling {
		t.Fatalf("after short waits only, the budget is %v, want %v", b, ceiling)
	}
}

// Under the default ceiling a Stream's reader sleeps through the gaps
// between calls at 10,000 calls/s (60-100 µs) instead of spinning through
// them, on the client's side as on the server's.
func TestDefaultStreamSleepsThroughGaps(t *testing.T) {
	for _, longAt := range []time.Duration{DefaultStreamSpin, min(requestGap, DefaultStreamSpin)} {
		var s spinner
		s.init(DefaultStreamSpin, WaitAdaptive)
		s.longAt = longAt
		for _, gap := range []time.Duration{60, 100, 80, 90} {
			s.slept(gap * time.Microsecond)
		}
		if b := s.budget(); b >= 60*time.Microsecond {
			t.Fatalf("long beyond %v: after gaps of 60-100 µs the budget is %v, want less than the gaps", longAt, b)
		}
	}
}

// A server's Stream reader counts the gaps between requests beyond
// requestGap as long, where a client's counts only those beyond its
// ceiling; both judge the pause before a woken peer's answer by a Conn's
// ceiling.
func TestServerStreamGaps(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client, server := c1.(*Stream).Conn(), c2.(*Stream).Conn()
	cfg := client.p.cfg
	if !server.accepted || client.accepted {
		t.Fatalf("accepted: server %v, client %v", server.accepted, client.accepted)
	}
	if got, want := server.rxSpin.longAt, min(requestGap, cfg.StreamSpin); got != want {
		t.Fatalf("server stream: long beyond %v, want %v", got, want)
	}
	if got := client.rxSpin.longAt; got != cfg.StreamSpin {
		t.Fatalf("client stream: long beyond %v, want its ceiling %v", got, cfg.StreamSpin)
	}
	for _, c := range []*Conn{client, server} {
		if got, want := c.rxSpin.pauseAt, min(cfg.Spin, cfg.StreamSpin); got != want {
			t.Fatalf("stream pause %v, want %v", got, want)
		}
	}

	// Gaps of 100 µs under a 200 µs ceiling: a client's reader keeps the
	// ceiling, a server's spins only the floor before a gap like the last.
	const ceiling, gap = 200 * time.Microsecond, 100 * time.Microsecond
	var s spinner
	s.init(ceiling, WaitAdaptive)
	for i := 0; i < 4; i++ {
		s.slept(gap)
	}
	if b := s.budget(); b != ceiling {
		t.Fatalf("client: after %v gaps the budget is %v, want %v", gap, b, ceiling)
	}
	s.init(ceiling, WaitAdaptive)
	s.longAt = 80 * time.Microsecond
	for i := 0; i < 4; i++ {
		s.slept(gap)
	}
	if b := s.budget(); b != ceiling/16 {
		t.Fatalf("server: after %v gaps the budget is %v, want %v", gap, b, ceiling/16)
	}
	// A closed loop's short waits spin the whole ceiling again.
	s.hit(10 * time.Microsecond)
	s.hit(10 * time.Microsecond)
	if b := s.budget(); b != ceiling {
		t.Fatalf("server: after short waits the budget is %v, want %v", b, ceiling)
	}
	if !server.rxSpin.mixed || client.rxSpin.mixed {
		t.Fatalf("mixed: server %v, client %v", server.rxSpin.mixed, client.rxSpin.mixed)
	}

	// Short and long gaps in an order the last two waits do not predict:
	// a server's reader spins what pays on them (5 µs for gaps of 5 and
	// 150 µs in equal numbers: half the waits caught at 5 µs each, half
	// slept at 5 µs and a sleep), where a client's keeps guessing between
	// the ceiling and the floor.
	mixed := func(s *spinner) []time.Duration {
		var seen []time.Duration
		x := uint32(12345)
		for i := 0; i < 256; i++ {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			if i >= 192 {
				seen = append(seen, s.budget())
			}
			if x&1 == 0 {
				s.hit(5 * time.Microsecond)
			} else {
				s.slept(150 * time.Microsecond)
			}
		}
		return seen
	}
	s.init(ceiling, WaitAdaptive)
	s.longAt, s.mixed, s.chosen = 80*time.Microsecond, true, ceiling
	for _, b := range mixed(&s) {
		if b != 5*time.Microsecond {
			t.Fatalf("server, mixed gaps: budget %v, want 5µs", b)
		}
	}
	s.init(ceiling, WaitAdaptive)
	for _, b := range mixed(&s) {
		if b != ceiling && b != ceiling/16 {
			t.Fatalf("client, mixed gaps: budget %v, want the ceiling or the floor", b)
		}
	}
	// Gaps that alternate are what the pattern predicts: the server's
	// reader follows it, the ceiling before a short one, the floor
	// before a long one.
	s.init(ceiling, WaitAdaptive)
	s.longAt, s.mixed, s.chosen = 80*time.Microsecond, true, ceiling
	for i := 0; i < 64; i++ {
		s.hit(5 * time.Microsecond)
		s.slept(150 * time.Microsecond)
	}
	if b := s.budget(); b != ceiling {
		t.Fatalf("server, alternating gaps: before a short one the budget is %v, want %v", b, ceiling)
	}
	s.hit(5 * time.Microsecond)
	if b := s.budget(); b != ceiling/16 {
		t.Fatalf("server, alternating gaps: before a long one the budget is %v, want %v", b, ceiling/16)
	}
}

// A reader spinning with a long budget still honours a deadline and Close
// at once.
func TestLongSpinDeadlineAndClose(t *testing.T) {
	c1, _, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := c1.(*Stream).Conn()
	c.rxMu.Lock()
	c.rxSpin.init(10*time.Second, WaitSpin)
	c.rxMu.Unlock()
	c1.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	t0 := time.Now()
	_, err = c1.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("the deadline ended a 10 s spin after %v", d)
	}
	c1.SetReadDeadline(time.Time{})
	closeEndsRead(t, c1, "Close did not end a 10 s spin")
}

// Writes of every length around the slot limit arrive intact and in order,
// from a writer and a reader racing each other.
func TestStreamSlotsAndBuffers(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var want bytes.Buffer
	var lens []int
	for n := 1; n <= slotsMax+2*InlineMax; n += 7 {
		lens = append(lens, n)
	}
	lens = append(lens, 4096, slotsMax, slotsMax+1, 1)
	for i, n := range lens {
		b := make([]byte, n)
		fill(b, int64(i))
		want.Write(b)
	}
	go func() {
		seed := 0
		for _, n := range lens {
			b := make([]byte, n)
			fill(b, int64(seed))
			seed++
			if _, err := c2.Write(b); err != nil {
				return
			}
		}
		c2.(*Stream).CloseWrite()
	}()
	got, err := io.ReadAll(c1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("stream of %d writes: got %d bytes, want %d, or they differ", len(lens), len(got), want.Len())
	}
	// The writer takes in the reader's acknowledgements when it next holds
	// its sending side, which its CloseWrite may hold a moment after the
	// reader saw the end of the stream (Info does not wait for it).
	out := -1
	for end := time.Now().Add(2 * time.Second); out != 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		out = c2.(*Stream).Conn().Info().BufsOutstanding
	}
	if out != 0 {
		t.Fatalf("%d buffers still held by the reader", out)
	}
}

// sleepAtOnce makes every waiter of the conns sleep with no spin.
func sleepAtOnce(conns ...*Conn) {
	for _, c := range conns {
		c.rxMu.Lock()
		c.rxSpin.init(0, WaitSleep)
		c.rxMu.Unlock()
		c.txMu.Lock()
		c.txSpin.init(0, WaitSleep)
		c.txMu.Unlock()
	}
}

// connPair returns the two ends of one connection (streamPair's), closed
// when the test ends.
func connPair(t *testing.T) (a, b *Conn) {
	t.Helper()
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c1.(*Stream).Conn(), c2.(*Stream).Conn()
}

// A process pinned to one CPU publishes it as its hints, and a waiter
// yields its CPU, rather than spin, for a peer thread on its own CPU.
func TestPinnedCPUHint(t *testing.T) {
	a, b := connPair(t)
	if cpu := pinnedCPU(); a.cpu != cpu {
		t.Fatalf("conn hint %d, pinnedCPU() %d", a.cpu, cpu)
	}
	if got := atomic.LoadUint32((*uint32)(unsafe.Add(a.me, bTxCPU))); got != a.cpu {
		t.Fatalf("published tx_cpu %d, want %d", got, a.cpu)
	}
	// Pretend both sides are pinned to CPU 3: yield between looks.
	a.cpu = 3
	atomic.StoreUint32((*uint32)(unsafe.Add(b.me, bTxCPU)), 3)
	atomic.StoreUint32((*uint32)(unsafe.Add(b.me, bRxCPU)), 3)
	if d, yield := a.spinBudget(waitRX, &a.rxSpin); d != a.rxSpin.max/16 || !yield {
		t.Fatalf("budget %v, yield %v for a peer on our CPU; want %v and a yield", d, yield, a.rxSpin.max/16)
	}
	// Waits that keep outlasting the ceiling: a peer on our CPU is not
	// yielded to (each yield would only run other threads), we sleep.
	for i := 0; i < 4; i++ {
		a.rxSpin.slept(10 * a.rxSpin.max)
	}
	if d, yield := a.spinBudget(waitRX, &a.rxSpin); d != 0 || yield {
		t.Fatalf("budget %v, yield %v for a peer on our CPU after long waits; want a sleep", d, yield)
	}
	a.rxSpin.init(a.rxSpin.max, a.rxSpin.policy)
	atomic.StoreUint32((*uint32)(unsafe.Add(b.me, bTxCPU)), 2)
	if d, yield := a.spinBudget(waitRX, &a.rxSpin); d != a.rxSpin.cur || d == 0 || yield {
		t.Fatalf("budget %v, yield %v for a peer on another CPU; want %v and a spin", d, yield, a.rxSpin.cur)
	}
	a.cpu = noCPU
}

// A waiter that yields its CPU to a peer on it also lets this process's
// other goroutines run: with one P (GOMAXPROCS=1, as on a process pinned
// to one CPU) the message it waits for may be theirs to send, and a waiter
// that only gave the thread away would hold them off until it slept.
func TestYieldingWaiterRunsOurGoroutines(t *testing.T) {
	a, b := connPair(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// Both sides pinned to CPU 3, a ceiling that outlasts any yield: a
	// waiter that lets the sender run catches its message spinning.
	a.rxMu.Lock()
	a.rxSpin.init(16*time.Millisecond, WaitAdaptive)
	a.cpu = 3
	a.rxMu.Unlock()
	atomic.StoreUint32((*uint32)(unsafe.Add(b.me, bTxCPU)), 3)
	defer func() {
		a.rxMu.Lock()
		a.cpu = noCPU
		a.rxMu.Unlock()
	}()
	recvOwnSends(t, a, b)
}

// recvOwnSends has a receive on a wait for 40 messages, each sent by a
// goroutine started just before it: with one P, runnable but run only
// when the waiter lets it.  A waiter that never lets them run sleeps for
// every one (the runtime preempts it only after 10 ms, past the ceiling);
// one that does catches them spinning, but on a loaded machine (the race
// detector, a busy CI host, other processes' threads on our CPU) most may
// still be caught asleep, its thread kept off the CPU past the ceiling.
// So the test fails only where not one was caught spinning.
func recvOwnSends(t *testing.T, a, b *Conn) {
	t.Helper()
	const messages = 40
	buf := make([]byte, 64)
	slept := 0
	for i := 0; i < messages; i++ {
		before := a.Info().Sleeps
		sent := make(chan error, 1)
		// Runnable, but on the only P: it runs when the waiter lets it.
		go func() { sent <- b.Send([]byte("ping")) }()
		if n, err := a.Recv(buf); err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("recv %d: %q, %v", i, buf[:n], err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if a.Info().Sleeps != before {
			slept++
		}
	}
	if slept == messages {
		t.Fatalf("the waiter slept for all %d messages sent by goroutines of its own process", messages)
	}
}

// With one P, a spinning waiter lets this process's other goroutines run
// (runtime.Gosched), though nothing of theirs was written to the
// connection yet: the message it waits for may be theirs to send.  The
// ceiling is below the runtime's 10 ms preemption, which would otherwise
// run them.
func TestSpinningWaiterRunsOurGoroutinesOnOneP(t *testing.T) {
	a, b := connPair(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a.rxMu.Lock()
	a.rxSpin.init(5*time.Millisecond, WaitSpin)
	a.cpu = noCPU
	a.rxMu.Unlock()
	recvOwnSends(t, a, b)
}

// A receiver that had to wake its peer after a pause sleeps for the reply
// at once; one whose last wait just ended spins for it as before.
func TestNoSpinForWokenIdlePeer(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := c1.(*Stream).Conn(), c2.(*Stream).Conn()
	const ceiling, delay = 200 * time.Millisecond, 20 * time.Millisecond
	a.rxMu.Lock()
	a.rxSpin.init(ceiling, WaitAdaptive)
	a.rxMu.Unlock()
	b.rxMu.Lock()
	b.rxSpin.init(0, WaitSleep) // the peer sleeps at once: our send rings it
	b.rxMu.Unlock()
	a.cpu = noCPU
	// The peer echoes each message after delay, well within our ceiling.
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := b.Recv(buf)
			if err != nil {
				done <- nil
				return
			}
			time.Sleep(delay)
			if err := b.Send(buf[:n]); err != nil {
				done <- err
				return
			}
		}
	}()
	call := func() (slept bool) {
		before := a.Info().Sleeps
		if err := a.Send([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := a.Recv(buf); err != nil {
			t.Fatal(err)
		}
		return a.Info().Sleeps != before
	}
	call() // the first wait: nothing to go by yet
	time.Sleep(ceiling + 50*time.Millisecond)
	rings := a.Info().Wakeups
	if !call() {
		t.Fatal("after a pause, with the peer woken by our ring, the receiver spun for the reply instead of sleeping")
	}
	if a.Info().Wakeups == rings {
		t.Fatal("the peer was not asleep after the pause: the test did not exercise a ring")
	}
	// The previous wait ended just now: whether or not this send rings,
	// the receiver spins, and catches the reply within the ceiling.
	if call() {
		t.Fatal("back to back, the receiver slept instead of spinning for a reply due within its ceiling")
	}
	c1.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ringBell does what the waiting word asks: the futex for a futex sleeper,
// the doorbell for a doorbell sleeper, both when the peer has both kinds,
// and nothing twice for the same word.
func TestRingBellKinds(t *testing.T) {
	a, b := connPair(t)
	wakeSeq := (*uint32)(unsafe.Add(a.me, bWakeSeq))
	// rung drains b's doorbell and says whether it held a byte.
	rung := func() bool {
		got := false
		_ = b.rxRaw.Control(func(fd uintptr) {
			var buf [64]byte
			for {
				n, err := unix.Read(int(fd), buf[:])
				if n > 0 {
					got = true
				}
				if err != nil || n < len(buf) {
					return
				}
			}
		})
		return got
	}
	rung()
	for _, tc := range []struct {
		w           uint64
		futex, bell bool
	}{
		{10*waitEpoch | waitRX | waitRXFutex, true, false},
		{11*waitEpoch | waitRX, false, true},
		{12*waitEpoch | waitRX | waitRXFutex | waitRXBell, true, true},
		{12*waitEpoch | waitRX | waitRXFutex | waitRXBell, false, false}, // the same word again
	} {
		w := tc.w
		seq := atomic.LoadUint32(wakeSeq)
		a.ringBell(w, waitRXFutex, waitRXBell, &a.lastRungRX, &a.st.Load().tx.wakeups)
		if woke := atomic.LoadUint32(wakeSeq) != seq; woke != tc.futex {
			t.Errorf("word %#x: futex wake %v, want %v", w, woke, tc.futex)
		}
		if got := rung(); got != tc.bell {
			t.Errorf("word %#x: doorbell %v, want %v", w, got, tc.bell)
		}
	}
}

// A peer rings once per value of our waiting word, and may ring for a
// message we have already read (a deferred notify) just as we advertise
// the sleep that waits for the next one: its ring for the next message then
// never comes.  That early ring must end the sleep so the next is
// advertised afresh; a sleeper that parked again on the same word would
// stay asleep until its deadline.
func TestEarlyRingEndsTheSleep(t *testing.T) { bothSleeps(t, testEarlyRingEndsTheSleep) }

func testEarlyRingEndsTheSleep(t *testing.T) {
	a, b := connPair(t)
	b.rxMu.Lock()
	b.rxSpin.init(0, WaitSleep)
	b.rxMu.Unlock()
	peerWaiting := a.u64(a.pb, bWaiting)
	for round := 0; round < 20; round++ {
		got := make(chan error, 1)
		go func() {
			_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 64)
			_, err := b.Recv(buf)
			got <- err
		}()
		for end := time.Now().Add(5 * time.Second); atomic.LoadUint64(peerWaiting)&waitRX == 0; {
			if time.Now().After(end) {
				t.Fatal("the receiver never advertised its sleep")
			}
			time.Sleep(50 * time.Microsecond)
		}
		rings := a.Info().Wakeups
		a.txMu.Lock()
		a.wakeRX() // a ring for the advertised word, with nothing published
		a.txMu.Unlock()
		if round%2 == 1 {
			time.Sleep(time.Millisecond) // let the ring land before the message
		}
		if err := a.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("round %d: receive after an early ring: %v", round, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: the receiver still sleeps 3 s after the message was sent: a lost wake-up", round)
		}
		if a.Info().Wakeups == rings {
			t.Fatalf("round %d: the early ring did not happen: the test exercised nothing", round)
		}
	}
}

// A peer shares the open file of the doorbell it handed us and may make it
// blocking and fill it: ringing it must still return at once (MSG_DONTWAIT).
func TestRingBellNeverBlocks(t *testing.T) {
	a, _ := connPair(t)
	chunk := make([]byte, 4096)
	for {
		if _, err := unix.Write(a.peerBell, chunk); err != nil {
			if err != unix.EAGAIN {
				t.Fatalf("filling the doorbell: %v", err)
			}
			break
		}
	}
	fl, err := unix.FcntlInt(uintptr(a.peerBell), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(a.peerBell), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.FcntlInt(uintptr(a.peerBell), unix.F_SETFL, fl)
	done := make(chan struct{})
	go func() {
		a.ringBell(20*waitEpoch|waitRX, waitRXFutex, waitRXBell, &a.lastRungRX, &a.st.Load().tx.wakeups)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("ringing a full doorbell made blocking still blocks after 2 s")
	}
}

// A peer shares the doorbell end we handed it, and may shut it down or
// fill it before it dies.  Our sleepers must still be woken by its death
// (and by a violation): those wakes cannot go through that socket.
func TestDeathWakesDespiteSabotagedDoorbell(t *testing.T) {
	bothSleeps(t, testDeathWakesDespiteSabotagedDoorbell)
}

func testDeathWakesDespiteSabotagedDoorbell(t *testing.T) {
	for _, sabotage := range []string{"shut down", "filled"} {
		c1, c2, stop, err := streamPair(t)
		if err != nil {
			t.Fatal(err)
		}
		a, b := c1.(*Stream).Conn(), c2.(*Stream).Conn()
		// b is the hostile peer: b.peerBell is the end a handed it.
		if sabotage == "shut down" {
			if err := unix.Shutdown(b.peerBell, unix.SHUT_WR); err != nil {
				t.Fatal(err)
			}
		} else {
			junk := make([]byte, 4096)
			for {
				if _, err := unix.SendmsgN(b.peerBell, junk, nil, nil, unix.MSG_DONTWAIT); err != nil {
					break
				}
			}
		}
		done := make(chan error, 1)
		go func() {
			var buf [64]byte
			_, err := a.Recv(buf[:])
			done <- err
		}()
		time.Sleep(100 * time.Millisecond) // a falls asleep
		a.markDead(false)                  // what its watcher does on a hang-up
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: Recv returned no error after the peer's death", sabotage)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("%s: Recv still asleep 2 s after the peer's death", sabotage)
		}
		stop()
	}
}

// Waits the pattern calls long, none of which the floor catches, soon
// spin it only one time in floorProbeEvery; one it catches restores it on
// every such wait, and so does a connection that sends while its reader
// waits.
func TestFloorProbes(t *testing.T) {
	const ceiling = 100 * time.Microsecond
	var s spinner
	// longWaits runs n waits of 1 ms and counts those that slept at once
	// (a budget of 0).
	longWaits := func(n int) (atOnce int) {
		for i := 0; i < n; i++ {
			if s.forWait() == 0 {
				atOnce++
			}
			s.slept(time.Millisecond)
		}
		return atOnce
	}
	s.init(ceiling, WaitAdaptive)
	longWaits(2 * floorMissesProbe)
	if n, want := longWaits(8*floorProbeEvery), 8*(floorProbeEvery-1); n != want {
		t.Fatalf("long waits the floor never catches: %d of %d slept at once, want %d", n, 8*floorProbeEvery, want)
	}
	// The floor catches one: it spins on every such wait again.
	if b := s.forWait(); b != 0 {
		s.hit(ceiling / 32)
	} else {
		s.slept(time.Millisecond)
		s.hit(ceiling / 32) // the next probe would have caught it
	}
	if n := longWaits(floorMissesProbe); n != 0 {
		t.Fatalf("after a wait the floor caught, %d of %d long waits slept at once", n, floorMissesProbe)
	}
	// A connection written to while its reader waits keeps the floor.
	s.init(ceiling, WaitAdaptive)
	s.writtenNear = writtenWaits
	if n := longWaits(4 * floorMissesProbe); n != 0 {
		t.Fatalf("a connection written near its reads: %d long waits slept at once", n)
	}
	// The sleep policy still never spins.
	s.init(ceiling, WaitSleep)
	if longWaits(4*floorMissesProbe) != 4*floorMissesProbe {
		t.Fatal("WaitSleep spun")
	}
}

// A reader's wait during which its connection sent makes the connection
// count as written near its reads for the next writtenWaits waits.
func TestWrittenNearReads(t *testing.T) {
	c1, c2, stop, err := streamPair(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	server := c2.(*Stream).Conn()
	// read reads one byte on the server once its reader sleeps, after
	// the server sent one (when sendToo) and the client then sent one.
	read := func(sendToo bool) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			var b [1]byte
			_, err := io.ReadFull(c2, b[:])
			done <- err
		}()
		waiting := server.u64(server.me, bWaiting)
		for end := time.Now().Add(5 * time.Second); atomic.LoadUint64(waiting)&waitRX == 0; {
			if time.Now().After(end) {
				t.Fatal("the server's reader never went to sleep")
			}
			time.Sleep(100 * time.Microsecond)
		}
		if sendToo {
			if _, err := c2.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c1.Write([]byte{2}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	written := func() uint8 {
		server.rxMu.Lock()
		defer server.rxMu.Unlock()
		return server.rxSpin.writtenNear
	}
	read(false)
	if n := written(); n != 0 {
		t.Fatalf("no send during the wait: written near for %d more waits, want 0", n)
	}
	read(true)
	if n := written(); n != writtenWaits {
		t.Fatalf("a send during the wait: written near for %d more waits, want %d", n, writtenWaits)
	}
	read(false)
	if n := written(); n != writtenWaits-1 {
		t.Fatalf("then a wait without: written near for %d more waits, want %d", n, writtenWaits-1)
	}
}

// A sender that keeps finding the ring full sleeps for room, and the
// receiver, which looks for it only every quarter ring it consumes, wakes
// it every time, also when it runs the ring empty between bursts and
// sleeps itself (docs/PROTOCOL.md, section 6).  A lost wake-up hangs the
// sender: the test's deadline fails it.
func TestRoomWakeQuarterRing(t *testing.T) {
	bothSleeps(t, roomWakes)
}

func roomWakes(t *testing.T) {
	a, b := connPair(t)
	sleepAtOnce(a, b)
	ring := int(a.ringMask + 1)
	total := 40 * ring
	// An uneven pace: now and then one side lets the other run a while.
	pause := func(x *uint32) {
		*x ^= *x << 13
		*x ^= *x >> 17
		*x ^= *x << 5
		switch r := *x % 16; {
		case r == 0:
			time.Sleep(time.Duration(*x%50) * time.Microsecond)
		case r < 4:
			runtime.Gosched()
		}
	}
	done := make(chan error, 1)
	go func() {
		x := uint32(2463534242)
		buf := make([]byte, 8)
		for want := 0; want < total; want++ {
			if _, err := b.Recv(buf); err != nil {
				done <- err
				return
			}
			if got := int(binary.LittleEndian.Uint64(buf)); got != want {
				done <- fmt.Errorf("received %d, want %d", got, want)
				return
			}
			pause(&x)
		}
		done <- nil
	}()
	sent := make(chan error, 1)
	go func() {
		x := uint32(88172645)
		msg := make([]byte, 8)
		for i := 0; i < total; {
			burst := 1 + int(x%uint32(3*ring))
			for ; burst > 0 && i < total; burst, i = burst-1, i+1 {
				binary.LittleEndian.PutUint64(msg, uint64(i))
				if err := a.Send(msg); err != nil {
					sent <- err
					return
				}
			}
			pause(&x)
		}
		sent <- nil
	}()
	timeout := time.After(30 * time.Second)
	for _, ch := range []chan error{sent, done} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("stuck: a sender asleep for room was not woken")
		}
	}
	if n := a.st.Load().tx.sleeps.Load(); n == 0 {
		t.Fatal("the sender never slept for room: the test did not exercise the room wake-up")
	}
}
