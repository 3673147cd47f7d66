// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// yieldEvery is how often a spinning waiter gives its CPU away.  With gRPC
// over a Stream on a 2-vCPU VM (go/examples/grpcecho), a spinner that never
// yields doubles the p99 of a call; yielding every 25 µs keeps the p99
// below a Unix socket's for a few µs more CPU per call; every 10 µs the
// yields cost more than they save.
const yieldEvery = 25 * time.Microsecond

// bellDrainEvery is how many advertised sleeps may leave their rings in
// our doorbell unread: a few bytes each.  Each unread byte is a buffer of
// its own in the kernel, and a Unix stream socket takes a few hundred
// before a ring fails (EAGAIN: no new edge, a lost wake-up).
const bellDrainEvery = 16

// spinBudget is how long a waiter in direction bit may spin (the adaptive
// budget), and whether it should yield its CPU between looks instead: when
// the peer's thread we wait for runs on the one CPU this process is pinned
// to, a spin only keeps it off the CPU, while sched_yield hands the CPU to
// it without the sleep and wake-up a futex would cost, as librpal does.
// Only where a short wait is expected, and for a sixteenth of the budget:
// the peer's thread answers within the yield that hands it the CPU, while
// each yield that finds the message still to come can run another thread
// of either process (the Go runtime's own among them), which at a low
// rate costs more than the sleep.
func (c *Conn) spinBudget(bit uint64, sp *spinner) (time.Duration, bool) {
	b := sp.forWait()
	if b == 0 || c.cpu == noCPU {
		return b, false
	}
	hint := bTxCPU // an RX waiter waits for the peer's sender
	if bit == waitTX {
		hint = bRxCPU
	}
	if atomic.LoadUint32(c.u32(c.pb, uintptr(hint))) != c.cpu {
		return b, false
	}
	if sp.policy == WaitAdaptive && !sp.expectShort() {
		return 0, false
	}
	return min(b, sp.max/16), true
}

// wait spins up to the adaptive budget, then sleeps: on the peer's futex
// word where it can (sleepFutex), else, or after that, with a doorbell
// sleep advertised in our waiting word and the goroutine parked in the
// netpoller on our doorbell (no OS thread is blocked).  Returns nil when
// ready() holds, or the deadline / close error.
func (c *Conn) wait(bit uint64, sp *spinner, ready func() bool, deadline *atomic.Int64, raw syscall.RawConn) error {
	if ready() {
		return nil
	}
	if d := deadline.Load(); d != 0 && nowNano() >= d {
		return os.ErrDeadlineExceeded
	}
	t0 := time.Now()
	sp.sentAt = c.st.Load().tx.msgs.Load()
	budget, yield := c.spinBudget(bit, sp)
	if budget > 0 && bit == waitRX && c.wokeIdlePeer(sp, t0) {
		budget = 0
	}
	if budget > 0 {
		yielded := time.Duration(0)
		for i := 1; ; i++ {
			if ready() {
				c.countSpin(bit, c.waited(sp, t0, true))
				return nil
			}
			if yield || i&63 == 0 {
				now := time.Now()
				spun := now.Sub(t0)
				if spun > budget {
					c.countSpin(bit, spun)
					break
				}
				if d := deadline.Load(); d != 0 && now.UnixNano() >= d {
					c.countSpin(bit, spun)
					return os.ErrDeadlineExceeded
				}
				// Let this process's other goroutines run on our P and,
				// every yieldEvery, other threads on our CPU: a spinner
				// that keeps the thread the peer (or our own next step)
				// needs off the CPU only makes the wait longer.  Where
				// the peer's thread shares our CPU (yield), it gets the
				// CPU at every look, and our goroutines from the second
				// look on, or from the first where they write to the
				// connection while we wait (gRPC's handlers); else our
				// goroutines get it at every look, the yieldEvery ones
				// included (under the race detector 64 looks can take
				// longer than yieldEvery): with one P, what we wait for
				// may be theirs to send first.
				if yield || spun-yielded >= yieldEvery {
					yielded = spun
					if !yield || sp.writtenNear > 0 || i > 1 {
						runtime.Gosched()
					}
					osYield()
				} else {
					runtime.Gosched()
				}
			}
		}
	}
	if done, err := c.sleepFutex(bit, ready, deadline); done {
		if err != nil {
			return err
		}
		c.waited(sp, t0, false)
		return nil
	}
	waiting := c.u64(c.me, bWaiting)
	// We sleep on the doorbell: the direction's flag with its BELL flag.
	flags, otherFlags := bit|waitRXBell, uint64(waitTX|waitTXBell)
	if bit == waitTX {
		flags, otherFlags = bit|waitTXBell, waitRX|waitRXBell
	}
	// The closure below would move a local buffer to the heap on every
	// call; each direction has one waiter at a time (rxMu, txMu).
	dir := 0
	if bit == waitTX {
		dir = 1
	}
	buf := &c.drainBuf[dir]
	for {
		if c.closed.Load() {
			return net.ErrClosed
		}
		// The sleep is advertised inside the first call, after RawRead has
		// armed the netpoller (which forgets readiness reported before
		// it): a ring for this advertisement comes later, and each byte
		// sent into a socket is a new edge.  So any later call means a
		// byte came, and none need be read to see it.  A peer rings at
		// most once per value of our waiting word, so unread bytes are
		// bounded by draining them before every bellDrainEvery-th
		// advertisement; they are older rings, or rings for the other
		// direction's sleeper, whose edge a read can hide from its file
		// before the netpoller collects it: kick passes that on.
		advertised, parked := false, false
		err := raw.Read(func(fd uintptr) bool {
			if advertised {
				return true
			}
			advertised = true
			if c.adverts.Add(1)%bellDrainEvery == 0 && drainBell(int(fd), buf[:]) &&
				atomic.LoadUint64(waiting)&otherFlags != 0 {
				c.kick(1 - dir)
			}
			atomic.AddUint64(waiting, waitEpoch) // W0: a locked RMW
			atomic.OrUint64(waiting, flags)
			if ready() {
				return true
			}
			parked = true
			return false
		})
		if advertised {
			atomic.AndUint64(waiting, ^flags)
		}
		if parked {
			c.countSleep(bit)
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.takeKick(dir) {
			err = nil
		}
		if err != nil && c.closed.Load() {
			return net.ErrClosed
		}
		if ready() { // wakeAll's expired deadline included
			break
		}
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return net.ErrClosed
			}
			return err // os.ErrDeadlineExceeded
		}
	}
	c.waited(sp, t0, false)
	return nil
}

// futexSleepMax bounds a sleep on the peer's futex word: a connection that
// stays idle longer moves to the doorbell, where it holds no thread.
const futexSleepMax = 10 * time.Millisecond

// futexSpuriousMax is how many wake-ups with nothing to read one wait
// takes on the peer's futex word before it moves to the doorbell: rings
// for an earlier advertisement or for the other direction cause a few.
const futexSpuriousMax = 8

var (
	// futexSleepLimit, in ns, replaces futexSleepMax where a test sets it.
	futexSleepLimit atomic.Int64
	// futexSleepers counts this process's waiters asleep in sleepFutex.
	futexSleepers atomic.Int32
	// noFutexWaitv is set once futex_waitv has failed for want of the
	// system call, or of permission (a seccomp filter): sleep on the
	// doorbell from then on.
	noFutexWaitv atomic.Bool
)

// sleepFutex sleeps the way librpal does: in futex_waitv on the peer's
// wake_seq (the peer rings it with FUTEX_WAKE, no doorbell write and no
// netpoller), and on our futexKick word of the direction (see kickFutex).
// The goroutine's thread blocks in the system call, and when it is woken
// it runs on at once: the wake-up costs a FUTEX_WAKE and a context switch,
// against a doorbell byte, the netpoller's epoll_wait and the scheduler's
// hand-off of the goroutine.  Blocked threads are bounded: at most
// GOMAXPROCS-1 waiters of the process sleep here at once, so one P is
// always free to run the rest of the program, and none stays longer than
// futexSleepMax.  It reports done with the wait's result, or not done: the
// caller then sleeps on the doorbell.
func (c *Conn) sleepFutex(bit uint64, ready func() bool, deadline *atomic.Int64) (bool, error) {
	if noFutexWaitv.Load() {
		return false, nil
	}
	if n := futexSleepers.Add(1); int(n) > runtime.GOMAXPROCS(0)-1 {
		futexSleepers.Add(-1)
		return false, nil
	}
	defer futexSleepers.Add(-1)
	dir, flags := 0, bit|waitRXFutex
	if bit == waitTX {
		dir, flags = 1, bit|waitTXFutex
	}
	waiting := c.u64(c.me, bWaiting)
	word, kick, asleep := c.u32(c.pb, bWakeSeq), &c.futexKick[dir], &c.futexAsleep[dir]
	limit := futexSleepMax
	if l := futexSleepLimit.Load(); l != 0 {
		limit = time.Duration(l)
	}
	start := time.Now()
	// Asleep before the kick word is first sampled (see kickFutex), and
	// until we leave: a kick meanwhile costs a needless FUTEX_WAKE at most.
	asleep.Store(true)
	defer asleep.Store(false)
	for spurious := 0; ; {
		kseq := atomic.LoadUint32(kick)
		wait := limit - time.Since(start)
		if wait <= 0 {
			return false, nil
		}
		if d := deadline.Load(); d != 0 {
			left := time.Duration(d - nowNano())
			if left <= 0 {
				return true, os.ErrDeadlineExceeded
			}
			wait = min(wait, left)
		}
		// The peer's word before the advertisement: a ring that comes
		// after it changes the word, and the wait returns at once.
		seq := atomic.LoadUint32(word)
		atomic.AddUint64(waiting, waitEpoch) // W0: a locked RMW
		atomic.OrUint64(waiting, flags)
		if ready() {
			atomic.AndUint64(waiting, ^flags)
			return true, nil
		}
		err := futexWaitv(word, seq, kick, kseq, wait)
		atomic.AndUint64(waiting, ^flags)
		c.countSleep(bit)
		if ready() {
			return true, nil
		}
		switch err {
		case nil, syscall.EAGAIN:
			// Woken, or the peer's word moved, with nothing to read and
			// no kick of ours: a peer that keeps doing that would keep
			// this thread busy.  A few, and the wait moves to the
			// doorbell.
			if atomic.LoadUint32(kick) == kseq {
				if spurious++; spurious > futexSpuriousMax {
					return false, nil
				}
			}
		case syscall.EINTR, syscall.ETIMEDOUT:
			// The loop's top looks at the bound and the deadline.
		case syscall.ENOSYS, syscall.EPERM:
			noFutexWaitv.Store(true)
			return false, nil
		default:
			return false, nil
		}
	}
}

// waited records a wait that began at t0 and ended now, caught by the spin
// (hit) or after a sleep, and returns how long it lasted.
func (c *Conn) waited(sp *spinner, t0 time.Time, hit bool) time.Duration {
	now := time.Now()
	d := now.Sub(t0)
	if c.st.Load().tx.msgs.Load() != sp.sentAt {
		sp.writtenNear = writtenWaits
	} else if sp.writtenNear > 0 {
		sp.writtenNear--
	}
	if hit {
		sp.hit(d)
	} else {
		sp.slept(d)
	}
	sp.end, sp.rings = now, c.rings()
	return d
}

// wokeIdlePeer says whether the message this receiver waits for has to
// come from a peer we woke after a pause: we rang its doorbell since our
// last wait ended (it was asleep), and that was longer ago than pauseAt
// (neither side was busy).  Its answer then comes no sooner than its
// wake-up, tens of µs on small VMs: spinning for it costs about what our
// own sleep does, and holds a CPU the peer's wake-up may need, so the
// adaptive policy sleeps at once.  Under load the peer is awake (no ring)
// or the last wait ended just now, and the spin goes on.
func (c *Conn) wokeIdlePeer(sp *spinner, now time.Time) bool {
	return sp.policy == WaitAdaptive && c.rings() != sp.rings && now.Sub(sp.end) > sp.pauseAt
}
