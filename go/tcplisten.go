// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
)

// tcpService is the rpal service through which a TCPListener serves its
// port to local clients, and which a TCPDialer looks for: "tcp:<port>".
// It names the port only: the TCP address a local client dials need not be
// one the TCP socket is bound to, as long as it is this machine's.
func tcpService(port int) string { return "tcp:" + strconv.Itoa(port) }

// TCPListener serves one TCP port two ways: on the TCP socket, for clients
// anywhere, and on the rpal service "tcp:<port>", for clients on this
// machine that dial the port with a TCPDialer.  Accept returns connections
// of both kinds as they arrive: a connection over rpal is a *Stream whose
// LocalAddr has the network "rpal", one over TCP is a *net.TCPConn.
//
// A TCPListener is what net.Listener users (grpc.Server.Serve,
// http.Serve) take.
type TCPListener struct {
	tcp     net.Listener
	local   *Listener // nil where rpal is not supported
	service string
	conns   chan accepted
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

var _ net.Listener = (*TCPListener)(nil)

// accepted is what one of the two sockets' Accept returned.
type accepted struct {
	c   net.Conn
	err error
}

// ListenTCP listens on a TCP address both ways with the default policy
// (same uid).  See ListenConfig.ListenTCP.
func ListenTCP(network, address string) (*TCPListener, error) {
	var lc ListenConfig
	return lc.ListenTCP(context.Background(), network, address)
}

// ListenTCP listens on a TCP address both ways: it opens the TCP socket
// with lc.TCP, as net.ListenConfig.Listen does (network "tcp", "tcp4" or
// "tcp6"; a port of 0 picks one), then serves the port it bound as the
// rpal service "tcp:<port>" with lc.Policy.  ctx bounds the TCP socket's
// set-up, as in net.ListenConfig.Listen.
//
// It fails if either cannot be served; the rpal service fails with
// EADDRINUSE while another live process serves the same port that way (a
// port shared through SO_REUSEPORT can be served both ways by one process
// only).  On systems other than Linux, where no client can dial rpal, it
// serves TCP only.
func (lc *ListenConfig) ListenTCP(ctx context.Context, network, address string) (*TCPListener, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	tl, err := lc.TCP.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	l := &TCPListener{tcp: tl, conns: make(chan accepted), done: make(chan struct{})}
	if checkOS() == nil {
		l.service = tcpService(tl.Addr().(*net.TCPAddr).Port)
		rl, err := lc.Listen(l.service)
		if err != nil {
			tl.Close()
			return nil, err
		}
		l.local = rl
		l.wg.Add(1)
		go l.pump(rl)
	}
	l.wg.Add(1)
	go l.pump(tl)
	return l, nil
}

// pump hands what ln accepts, connections and errors, to Accept until the
// listener is closed.
func (l *TCPListener) pump(ln net.Listener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		select {
		case l.conns <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept waits for the next connection, over TCP or over rpal, and
// returns it.  An error of either socket's Accept is returned as it is,
// so a server's usual handling (retrying temporary errors) applies.
func (l *TCPListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, l.closedErr("accept")
	default:
	}
	select {
	case a := <-l.conns:
		return a.c, a.err
	case <-l.done:
		return nil, l.closedErr("accept")
	}
}

func (l *TCPListener) closedErr(op string) error {
	return &net.OpError{Op: op, Net: l.tcp.Addr().Network(), Addr: l.tcp.Addr(), Err: net.ErrClosed}
}

// Close stops listening on both: the TCP socket and the rpal service.
// Blocked Accept calls return net.ErrClosed; connections already accepted
// stay open.
func (l *TCPListener) Close() error {
	err := l.closedErr("close")
	l.once.Do(func() {
		close(l.done)
		err = l.tcp.Close()
		if l.local != nil {
			if lerr := l.local.Close(); err == nil {
				err = lerr
			}
		}
		l.wg.Wait()
	})
	return err
}

// Addr returns the TCP socket's address, a *net.TCPAddr.
func (l *TCPListener) Addr() net.Addr { return l.tcp.Addr() }

// Service returns the rpal service name local clients reach the port
// through, "tcp:<port>", or "" where rpal is not supported.
func (l *TCPListener) Service() string { return l.service }

// Refused returns (and forgets) the errors of rpal handshakes refused
// since the last call, as Listener.Refused does.
func (l *TCPListener) Refused() []error {
	if l.local == nil {
		return nil
	}
	return l.local.Refused()
}
