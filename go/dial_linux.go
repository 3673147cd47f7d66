// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dial runs the client's side of the handshake (docs/PROTOCOL.md §3):
// connect, check the server's credentials, send our HELLO with our arena's
// memfd and a doorbell end, check the WELCOME and map the server's arena.
func (d *Dialer) dial(ctx context.Context, service string) (*Conn, error) {
	p, err := ensure()
	if err != nil {
		return nil, err
	}
	path, _, err := p.socketPath(service)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.cfg.HandshakeTimeout)
	ctxDeadline := false
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline, ctxDeadline = dl, true
	}
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	ok := false
	defer func() {
		if !ok {
			closePeerConn(uc) // the server's, and what it queued there
		}
	}()
	if err := uc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Cancelling ctx ends the handshake at once.
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cred, err := peerCred(uc)
	if err != nil {
		return nil, err
	}
	if !d.Policy.allows(cred.Uid, cred.Gid) {
		why := fmt.Sprintf("peer pid %d uid %d gid %d is not allowed by policy", cred.Pid, cred.Uid, cred.Gid)
		sendRefuse(uc, syscall.EACCES, why)
		return nil, refused(syscall.EACCES, "refused server of %s: %s", service, why)
	}
	s, err := p.newSide()
	if err != nil {
		return nil, err
	}
	name := service
	if service[0] == '/' {
		name = ""
	}
	h := p.helloFor(hsHello, s, name)
	if _, _, err := uc.WriteMsgUnix(h.marshal(), unix.UnixRights(p.memfd, s.ringEnd), nil); err != nil {
		p.dropSide(s)
		return nil, fmt.Errorf("cannot send hello to %s: %w", service, err)
	}
	msg, fds, err := recvHandshake(uc)
	if err != nil {
		p.dropSide(s)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The context's end, or the handshake timeout: say which.
			cerr := ctx.Err()
			if cerr == nil && ctxDeadline && !time.Now().Before(deadline) {
				cerr = context.DeadlineExceeded
			}
			if cerr != nil {
				return nil, &ctxError{msg: fmt.Sprintf("no answer from %s: %v", service, cerr), err: cerr}
			}
			return nil, refused(syscall.ETIMEDOUT, "no answer from %s within %v", service, p.cfg.HandshakeTimeout)
		}
		var re *refusedError
		if errors.As(err, &re) && re.errno == syscall.ECONNRESET {
			return nil, refused(syscall.ECONNREFUSED, "%s closed the connection during the handshake", service)
		}
		if errors.As(err, &re) && re.errno == syscall.EPROTO {
			sendRefuse(uc, re.errno, re.msg)
			return nil, fmt.Errorf("bad welcome from %s: %w", service, err)
		}
		return nil, err
	}
	if r, isRefuse := parseRefuse(msg); isRefuse {
		closeFds(fds)
		p.dropSide(s)
		return nil, refused(syscall.Errno(r.Errno), "%s refused us: %s", service, r.Reason)
	}
	c, err := p.accept(uc, msg, fds, hsWelcome, cred, s, service)
	if err != nil {
		sendRefuse(uc, refusalErrno(err), err.Error())
		p.dropSide(s)
		return nil, fmt.Errorf("bad welcome from %s: %w", service, err)
	}
	unix.Close(s.ringEnd) // the peer has it: we keep no copy (wakeAll says why)
	ok = true
	if !stop() {
		// The context ended as the handshake finished: its past
		// deadline may land on the socket after we clear ours, and the
		// connection would look dead.  The dial ran out of time.
		c.watch()
		c.Close()
		err := ctx.Err()
		if err == nil {
			err = context.Canceled
		}
		return nil, &ctxError{msg: fmt.Sprintf("dial %s: %v", service, err), err: err}
	}
	_ = uc.SetDeadline(time.Time{})
	c.watch()
	return c, nil
}
