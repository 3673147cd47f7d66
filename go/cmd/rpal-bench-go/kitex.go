// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/cloudwego/gopkg/bufiox"
	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/genericclient"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/pkg/generic"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/kitex/server/genericserver"
)

// Kitex, through its own Go-net transport (gonet) and its Thrift binary
// generic: no code generation, and a request is a Thrift struct whose one
// field is the payload (go/examples/kitexecho shows the same service).
// Long connections, one call at a time on each: with -concurrency callers
// the pool keeps that many.

const kitexService = "Echo"

// thriftWrap is the Thrift binary struct {1: binary payload}.
func thriftWrap(payload []byte) []byte {
	b := make([]byte, 0, 8+len(payload))
	b = append(b, 11, 0, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, 0)
}

var errThriftShape = errors.New("not the Thrift struct {1: binary}")

// thriftPayload is the payload of a thriftWrap struct, in place.
func thriftPayload(b []byte) ([]byte, error) {
	if len(b) < 8 || b[0] != 11 || b[1] != 0 || b[2] != 1 {
		return nil, errThriftShape
	}
	n := binary.BigEndian.Uint32(b[3:])
	if uint64(n) != uint64(len(b)-8) || b[len(b)-1] != 0 {
		return nil, errThriftShape
	}
	return b[7 : 7+n], nil
}

func serveKitex(l net.Listener, s *echoService) (func(), error) {
	klog.SetLevel(klog.LevelWarn)
	// A Framed request, Kitex's default, does not name its service, and
	// a binary generic service has no method table: the handler of
	// unknown services and methods takes every request.
	h := &genericserver.UnknownServiceOrMethodHandler{
		DefaultHandler: func(_ context.Context, _, method string, req any) (any, error) {
			b, _ := req.([]byte)
			p, err := thriftPayload(b)
			if err != nil {
				return nil, err
			}
			if method == "Stop" {
				s.stop()
				return req, nil
			}
			if _, err := s.echo(p); err != nil {
				return nil, err
			}
			return req, nil // the args struct, returned as the result
		},
	}
	svr := genericserver.NewUnknownServiceOrMethodServer(h,
		server.WithListener(l),
		// Both: the defaults are netpoll's.
		server.WithTransServerFactory(gonet.NewTransServerFactory()),
		server.WithTransHandlerFactory(gonet.NewSvrTransHandlerFactory()),
		server.WithExitWaitTime(time.Second))
	go svr.Run()
	// Stop closes the listener and waits for the client to close its
	// connections, so the Stop call's reply goes out first.
	return func() { _ = svr.Stop() }, nil
}

// kitexConn is a connection as Kitex's gonet client needs it: it reads
// and writes through the bufiox buffers Reader and Writer give, so Read
// goes through the same buffer.
type kitexConn struct {
	net.Conn
	r      *bufiox.DefaultReader
	w      *bufiox.DefaultWriter
	dialed net.Addr
}

func (c *kitexConn) Reader() *bufiox.DefaultReader { return c.r }
func (c *kitexConn) Writer() *bufiox.DefaultWriter { return c.w }
func (c *kitexConn) Read(b []byte) (int, error)    { return c.r.Read(b) }

// RemoteAddr is what Kitex dialed: its pool closes a returned connection
// whose network is not the one it dialed, and an rpal one says "rpal".
func (c *kitexConn) RemoteAddr() net.Addr { return c.dialed }

type dialedAddr struct{ network, address string }

func (a dialedAddr) Network() string { return a.network }
func (a dialedAddr) String() string  { return a.address }

// kitexDialer is a Kitex remote.Dialer over the row's transport.  It keeps
// its connections: closing a generic client leaves pooled ones open.
type kitexDialer struct {
	dial  func(context.Context, string) (net.Conn, error)
	mu    sync.Mutex
	conns []net.Conn
}

func (d *kitexDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return &kitexConn{Conn: c, r: bufiox.NewDefaultReader(c), w: bufiox.NewDefaultWriter(c),
		dialed: dialedAddr{network, addr}}, nil
}

type kitexClient struct {
	cli genericclient.Client
	d   *kitexDialer
}

func dialKitex(dial func(context.Context, string) (net.Conn, error), addr string, concurrency int) (unaryClient, error) {
	klog.SetLevel(klog.LevelWarn)
	d := &kitexDialer{dial: dial}
	cli, err := genericclient.NewClient(kitexService, generic.BinaryThriftGenericV2(kitexService),
		// Not host:port: Kitex takes addr for a Unix socket path and
		// hands it to the dialer as it is.
		client.WithHostPorts(addr),
		client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()),
		client.WithDialer(d),
		client.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: concurrency,
			MaxIdleGlobal: concurrency, MaxIdleTimeout: time.Hour}),
		// The default, 50 ms, is short for a first rpal dial, which
		// maps the region and creates the arena.
		client.WithConnectTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	return &kitexClient{cli, d}, nil
}

// call passes a context without deadline: Kitex then calls on this
// goroutine instead of handing the call to its timeout pool.
func (k *kitexClient) call(ctx context.Context, req []byte) ([]byte, error) {
	resp, err := k.cli.GenericCall(ctx, "Echo", thriftWrap(req))
	if err != nil {
		return nil, err
	}
	b, _ := resp.([]byte)
	return thriftPayload(b)
}

func (k *kitexClient) stop(ctx context.Context) error {
	_, err := k.cli.GenericCall(ctx, "Stop", thriftWrap(nil))
	return err
}

func (k *kitexClient) close() error {
	err := k.cli.Close()
	k.d.mu.Lock()
	defer k.d.mu.Unlock()
	for _, c := range k.d.conns {
		c.Close()
	}
	k.d.conns = nil
	return err
}
