// SPDX-License-Identifier: MIT

//go:build !linux

package rpal

import (
	"context"
	"errors"
	"net"
	"runtime"
	"syscall"
	"time"
)

// rpal needs Linux: memfd arenas mapped at fixed addresses, OFD locks,
// pidfds, SO_PEERCRED and futexes.  Elsewhere the package builds, and every
// entry point (Init, Alloc, ProcessStats, Listen, ListenConfig.Listen,
// Dial, DialConn and the Dialer methods) fails with errUnsupported: each
// of them calls checkOS first, so no Conn or Listener ever exists here.
// ListenTCP and the TCPDialer check it too, and use TCP alone.
// The functions below stand in for the Linux files' so that the portable
// code compiles; none of them is reached.

// unsupportedError is the error of every entry point on this system.
type unsupportedError struct{}

func (unsupportedError) Error() string { return "rpal: not supported on " + runtime.GOOS }
func (unsupportedError) Unwrap() error { return errors.ErrUnsupported }

var errUnsupported error = unsupportedError{}

// checkOS returns errUnsupported: rpal runs on Linux only.
func checkOS() error { return errUnsupported }

func (p *process) setup() error                                        { return errUnsupported }
func (p *process) unmapPeer(slot uint32, addr, size uint64)            {}
func (l *Listener) releaseName(bool)                                   {}
func (pm *peerMap) pagesCheck(addr, n uint64) bool                     { return false }
func (d *Dialer) dial(context.Context, string) (*Conn, error)          { return nil, errUnsupported }
func (lc *ListenConfig) listen(string) (*Listener, error)              { return nil, errUnsupported }
func (l *Listener) serverHandshake(*handshake) (*Conn, error)          { return nil, errUnsupported }
func ringSocket(fd int)                                                {}
func monoNs() uint64                                                   { return 0 }
func drainBell(fd int, buf []byte) bool                                { return false }
func shutBell(syscall.RawConn)                                         {}
func wakeFutex(addr *uint32)                                           {}
func wakeFutexPrivate(addr *uint32)                                    {}
func futexWaitv(*uint32, uint32, *uint32, uint32, time.Duration) error { return errUnsupported }
func osYield()                                                         {}
func closeFd(fd int)                                                   {}
func closePeerConn(uc *net.UnixConn)                                   {}
func drainBacklog(*net.UnixListener)                                   {}
func backlogWaiting(*net.UnixListener) bool                            { return false }
func hasMessage(*net.UnixConn) bool                                    { return false }
