// SPDX-License-Identifier: MIT

package rpal

import (
	"math"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls an established connection makes: ringing and draining
// doorbells, waking a futex, yielding the CPU, closing a descriptor.  The
// rest of the Linux-specific code sets things up: region_linux.go (the
// region, the slot, the arenas), handshake_linux.go, dial_linux.go and
// listen_linux.go (sockets, descriptors, credentials), watch_linux.go
// (peer death).  unsupported.go stands in for all of it elsewhere.

// checkOS returns nil: rpal runs on Linux.
func checkOS() error { return nil }

var oneByte = []byte{0}

// ringSocket sends one byte into a doorbell socket without ever blocking,
// whatever the peer does to the file we share with it (it could clear
// O_NONBLOCK and fill the socket): MSG_DONTWAIT ignores the file's flags,
// and MSG_NOSIGNAL turns a dead peer's SIGPIPE into EPIPE.  A socket, not a
// pipe: a pipe's every read and write takes its mutex, which the peer could
// hold indefinitely (a splice from an idle socket into the pipe waits with
// it held), and the ring would hang.
//
// The wake-up calls here (this one, wakeFutex, wakeFutexPrivate, osYield)
// never block, so they are raw: a system call made through the runtime's
// entersyscall also wakes the runtime's sysmon thread when it sleeps, as
// it does whenever the process was idle, and on small VMs that futex
// wake-up and the thread switch it starts cost more than the call itself,
// on every message that follows a pause.
func ringSocket(fd int) {
	_, _, _ = unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&oneByte[0])), 1,
		unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
}

// bellsRefuseFds: our doorbell ends refuse passed descriptors (SO_PASSRIGHTS,
// Linux 6.16 on).  Before that a peer can queue one in our doorbell, and a
// plain read would drop it, the kernel closing it on our thread: a socket
// set to linger with unsent data would block that thread for its linger.
var bellsRefuseFds atomic.Bool

// shutBell readies our end of a doorbell for its last close: where it takes
// descriptors, what a peer queued in it would be released on the thread
// that drops the last reference, so it is shut for reading and drained.
func shutBell(raw syscall.RawConn) {
	if !bellsRefuseFds.Load() {
		_ = raw.Control(func(fd uintptr) { shutUnixDrain(int(fd)) })
	}
}

// drainBell empties our end of a doorbell, reading at most 16 times
// len(buf) bytes, and reports whether it held anything.  A read returning
// less than asked for has emptied it; a peer that floods it is read at most
// that much of, and what is left costs no wake-up (every send is a new
// edge for the netpoller).  Where the doorbell takes descriptors, they are
// received and closed without blocking (closePeerFd).
func drainBell(fd int, buf []byte) bool {
	var oob []byte
	if !bellsRefuseFds.Load() {
		oob = make([]byte, unix.CmsgSpace(scmMaxFd*4))
	}
	rung := false
	for i := 0; i < 16; i++ {
		var n, oobn int
		var err error
		if oob == nil {
			n, err = unix.Read(fd, buf)
		} else {
			n, oobn, _, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			closeFds(rightsOf(oob[:oobn]))
		}
		if n > 0 {
			rung = true
		}
		if err != nil || n < len(buf) {
			break
		}
	}
	return rung
}

// futexWake is FUTEX_WAKE, shared (not FUTEX_PRIVATE_FLAG): the word is in
// our arena and the waiter in another process.
const futexWake = 1

// wakeFutex wakes every waiter on the futex word at addr (raw: see ringSocket).
func wakeFutex(addr *uint32) {
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake,
		uintptr(math.MaxInt32), 0, 0, 0)
}

// osYield gives the CPU to another runnable thread, if any (sched_yield;
// raw, as the runtime's own yield is: see ringSocket).
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// closeFd closes a descriptor we hold outside an *os.File.
func closeFd(fd int) { _ = unix.Close(fd) }

// futexWaiter is the kernel's struct futex_waitv.
type futexWaiter struct {
	val, uaddr uint64
	flags      uint32
	_          uint32
}

const (
	futex32       = 2   // FUTEX2_SIZE_U32
	futexPrivate  = 128 // FUTEX2_PRIVATE / FUTEX_PRIVATE_FLAG
	futexWakePriv = futexWake | futexPrivate
)

// kernelTimespec is the kernel's struct __kernel_timespec, 64-bit fields
// on every architecture (unix.Timespec is 32-bit on 386 and arm).
type kernelTimespec struct{ sec, nsec int64 }

// monoBase is CLOCK_MONOTONIC when timeBase was taken: the Go runtime's
// monotonic clock is CLOCK_MONOTONIC, so monoBase + time.Since(timeBase)
// is that clock now, read through the vDSO.
var monoBase, timeBase = func() (int64, time.Time) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano(), time.Now()
}()

// futexWaitv sleeps (futex_waitv, Linux 5.16) until the shared word at
// peer no longer holds peerVal or the private word at kick no longer holds
// kickVal, either is woken, a signal comes, or timeout passes (measured on
// CLOCK_MONOTONIC: setting the wall clock does not stretch it).  It
// returns nil, EAGAIN (a word had moved), ETIMEDOUT, EINTR, or the error
// of a system without it (ENOSYS, or what a seccomp filter says).
func futexWaitv(peer *uint32, peerVal uint32, kick *uint32, kickVal uint32, timeout time.Duration) error {
	w := [2]futexWaiter{
		{val: uint64(peerVal), uaddr: uint64(uintptr(unsafe.Pointer(peer))), flags: futex32},
		{val: uint64(kickVal), uaddr: uint64(uintptr(unsafe.Pointer(kick))), flags: futex32 | futexPrivate},
	}
	end := monoBase + int64(time.Since(timeBase)+timeout)
	ts := kernelTimespec{sec: end / 1e9, nsec: end % 1e9}
	_, _, e := unix.Syscall6(unix.SYS_FUTEX_WAITV, uintptr(unsafe.Pointer(&w[0])), 2, 0,
		uintptr(unsafe.Pointer(&ts)), unix.CLOCK_MONOTONIC, 0)
	runtime.KeepAlive(kick)
	if e != 0 {
		return e
	}
	return nil
}

// wakeFutexPrivate wakes every waiter of this process on the word at addr
// (raw: see ringSocket).
func wakeFutexPrivate(addr *uint32) {
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePriv,
		uintptr(math.MaxInt32), 0, 0, 0)
}
