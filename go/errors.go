// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// ProtocolError says how a peer broke the protocol.  The connection is
// closed for I/O; it unwraps to syscall.EPROTO.
type ProtocolError struct {
	Pid  int
	What string
	Val  uint64
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("peer pid %d broke the protocol: %s (%#x); connection closed", e.Pid, e.What, e.Val)
}

func (e *ProtocolError) Unwrap() error { return syscall.EPROTO }

// errReset and errPipe underlie the errors of a connection whose peer is
// gone or closed (ECONNRESET, EPIPE, as librpal reports them).
var (
	errReset = syscall.ECONNRESET
	errPipe  = syscall.EPIPE
)

// errArenaFull is a buffer the arena has no room for, whatever the
// connections' shares (ENOMEM).
var errArenaFull = fmt.Errorf("arena exhausted: %w", syscall.ENOMEM)

// errWouldBlock is returned by the non-blocking calls when nothing is there.
var errWouldBlock = fmt.Errorf("no message ready: %w", syscall.EAGAIN)

// refusedError is a handshake that failed on our side or the peer's.
type refusedError struct {
	errno syscall.Errno
	msg   string
}

func (e *refusedError) Error() string { return e.msg }

func (e *refusedError) Unwrap() error { return e.errno }

// Timeout makes a handshake that timed out a net.Error timeout, as a
// net.Dialer's is.
func (e *refusedError) Timeout() bool { return e.errno == syscall.ETIMEDOUT }

// Temporary completes net.Error; it is deprecated there, and false here.
func (e *refusedError) Temporary() bool { return false }

// ctxError is a handshake that its context ended: it unwraps to
// context.DeadlineExceeded (a timeout) or context.Canceled.
type ctxError struct {
	msg string
	err error
}

func (e *ctxError) Error() string { return e.msg }

func (e *ctxError) Unwrap() error { return e.err }

func (e *ctxError) Timeout() bool { return errors.Is(e.err, context.DeadlineExceeded) }

// Temporary completes net.Error; it is deprecated there, and false here.
func (e *ctxError) Temporary() bool { return false }

func refused(errno syscall.Errno, format string, a ...any) error {
	return &refusedError{errno: errno, msg: fmt.Sprintf(format, a...)}
}

// refusalErrno is the errno a REFUSE carries for err: the one a check chose,
// or EPROTO.
func refusalErrno(err error) syscall.Errno {
	var re *refusedError
	if errors.As(err, &re) {
		return re.errno
	}
	return syscall.EPROTO
}

// InitError reports why the region, slot or arena could not be set up.
type InitError struct{ Err error }

func (e *InitError) Error() string { return "rpal: init: " + e.Err.Error() }

func (e *InitError) Unwrap() error { return e.Err }
