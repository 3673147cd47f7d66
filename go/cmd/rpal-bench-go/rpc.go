// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rpcServe is cli/run.c's rpc_serve(): echo every request, after -work of
// busy-work, until the client closes.  Its CPU counts from its wait for the
// first measured request: a waiter that spins for it pays for the spin.
func rpcServe(l link, o *options, r *results) error {
	work := uint64(float64(o.work) * o.tscHz / 1e9)
	var cpu0 cpuUse
	for i := 0; ; i++ {
		if i == o.warmup {
			cpu0 = cpuNow()
		}
		m, err := l.recv()
		if err != nil {
			if i >= o.warmup && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
				break // the client is done
			}
			return fmt.Errorf("server: receiving request %d: %w", i, err)
		}
		if _, ok := check(m, uint32(i), o.size); !ok {
			r.set(offBad, 1)
			return fmt.Errorf("server: request %d arrived corrupted", i)
		}
		if work > 0 {
			// The service's own work: keeps the CPU, as a handler does.
			for t0 := tscNow(); tscNow()-t0 < work; {
			}
		}
		if err := echo(l, m, i); err != nil {
			return err
		}
	}
	r.cpu(cpu0)
	return nil
}

// pacer waits for the open loop's slots the way a Go service waits for the
// event that starts a call: its goroutine parked in the netpoller, here on
// a timerfd, whose timer has no slack.  A thread blocked in a sleep of its
// own would hold its P in a system call for most of each period, which
// sets Go's sysmon polling every 20 µs: runtime work that no service does
// and that shifts with each transport's timing.  Its two system calls are
// raw (neither blocks): through the runtime's entersyscall, each slot
// after an idle period would also wake sysmon, a futex wake-up and a
// thread switch that the harness pays, not the transport, and that would
// make every transport's CPU per request look alike.
type pacer struct {
	f   *os.File
	raw syscall.RawConn
	fd  int
}

func newPacer() (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "pacer")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	return &pacer{f: f, raw: raw, fd: fd}, nil
}

// until returns once CLOCK_MONOTONIC reaches ns.
func (p *pacer) until(ns int64) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(ns)}
	if _, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(p.fd), unix.TFD_TIMER_ABSTIME,
		uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		return fmt.Errorf("timerfd: %w", e)
	}
	var expirations [8]byte
	var rerr error
	err := p.raw.Read(func(fd uintptr) bool {
		for {
			_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&expirations[0])), 8)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // park in the netpoller until the timer fires
			case 0:
			default:
				rerr = e
			}
			return true
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("timerfd: %w", err)
	}
	return nil
}

func (p *pacer) close() { p.f.Close() }

// rpcSend sends request seq, stamped now; the stamp.
func rpcSend(l link, o *options, seq int) (uint64, error) {
	b, err := l.txBuf()
	if err != nil {
		return 0, fmt.Errorf("client: buffer for request %d: %w", seq, err)
	}
	fill(b, uint32(seq))
	at := tscNow()
	putU64(b, at)
	if err := l.send(b, false); err != nil {
		return 0, fmt.Errorf("client: sending request %d: %w", seq, err)
	}
	return at, nil
}

// rpcReply receives and checks the reply to request seq.
func rpcReply(l link, o *options, r *results, seq int) error {
	m, err := l.recv()
	if err != nil {
		return fmt.Errorf("client: receiving the reply to request %d: %w", seq, err)
	}
	if _, ok := check(m, uint32(seq), o.size); !ok {
		r.set(offBad, 1)
		return fmt.Errorf("client: reply to request %d arrived corrupted", seq)
	}
	return l.release()
}

// rpcDrive is cli/run.c's rpc_drive().  Open loop (-rate > 0): request j
// is due at start + j/rate whatever the replies do, and its latency runs
// from that slot, so a stall that delays later sends counts in each of
// them.  At most -concurrency requests are outstanding; the client is one
// goroutine over blocking receives, as the C one is one thread.  Closed
// loop (-rate 0): -concurrency requests outstanding for -seconds, latency
// from each send.  An open loop that falls behind stops sending at twice
// -seconds and counts the requests it never sent.  The client waits for
// each slot on a pacer (a timerfd in the netpoller), not on a Go timer,
// whose wake-up in an idle process comes hundreds of µs late and would
// count in every latency.
func rpcDrive(l link, o *options, r *results) error {
	w, planned := o.warmup, o.count
	n := o.concurrency
	due := make([]uint64, n)
	var periodCyc float64
	if o.rate > 0 {
		periodCyc = o.tscHz / o.rate
	}
	for i := 0; i < w; i++ {
		if _, err := rpcSend(l, o, i); err != nil {
			return err
		}
		if err := rpcReply(l, o, r, i); err != nil {
			return err
		}
	}
	pace, err := newPacer()
	if err != nil {
		return err
	}
	defer pace.close()
	cpu0 := cpuNow()
	var start unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &start)
	tStart := tscNow()
	last := tStart
	endTSC := tStart + uint64(o.seconds*o.tscHz)
	sent, done := 0, 0
	for {
		for sent < planned && sent-done < n {
			slot := tStart + uint64(float64(sent)*periodCyc)
			now := tscNow()
			if now >= endTSC && (periodCyc == 0 || now-tStart >= 2*(endTSC-tStart)) {
				r.set(offUnsent, uint64(planned-sent))
				planned = sent // time is up (open loop: overloaded)
				break
			}
			if periodCyc > 0 && slot > now {
				break
			}
			at, err := rpcSend(l, o, w+sent)
			if err != nil {
				return err
			}
			if periodCyc > 0 {
				due[sent%n] = slot
			} else {
				due[sent%n] = at
			}
			sent++
		}
		if done == sent {
			if sent >= planned {
				break
			}
			if err := pace.until(start.Nano() + int64(float64(sent)/o.rate*1e9)); err != nil {
				return err
			}
			continue
		}
		if err := rpcReply(l, o, r, w+done); err != nil {
			return err
		}
		last = tscNow()
		r.samples[done] = last - due[done%n]
		done++
		if done&255 == 0 {
			r.set(offProgress, uint64(w+done))
		}
	}
	if periodCyc > 0 {
		if end := tStart + uint64(float64(sent)*periodCyc); end > last {
			last = end
		}
	}
	r.set(offElapsed, last-tStart)
	r.cpu(cpu0)
	r.set(offRPCDone, uint64(done))
	r.set(offProgress, uint64(w+planned))
	return nil
}
