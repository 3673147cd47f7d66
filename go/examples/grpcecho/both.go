// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"rpal.dev/rpal"
)

// loggingListener reports on stderr the transport of each connection a
// server accepts: "rpal" or "tcp".
type loggingListener struct{ net.Listener }

func (l loggingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		fmt.Fprintf(os.Stderr, "server %v: accepted a connection over %s\n", l.Addr(), c.LocalAddr().Network())
	}
	return c, err
}

// dialer is a gRPC context dialer that connects over rpal where the
// address is this machine's and its port is served both ways, over TCP
// otherwise, and remembers the transport of each connection.
type dialer struct {
	d    rpal.TCPDialer
	mu   sync.Mutex
	used []dialed
}

// dialed is one connection a dialer made.
type dialed struct{ address, network string }

func (d dialed) String() string { return d.address + " over " + d.network }

func newDialer() *dialer {
	dl := &dialer{}
	// A local service that exists but cannot be dialed: say why, then TCP.
	dl.d.Fallback = func(address string, err error) {
		log.Printf("%s: over TCP because rpal failed: %v", address, err)
	}
	return dl
}

func (dl *dialer) dial(ctx context.Context, address string) (net.Conn, error) {
	c, err := dl.d.DialAddr(ctx, address)
	if err == nil {
		dl.mu.Lock()
		dl.used = append(dl.used, dialed{address, c.LocalAddr().Network()})
		dl.mu.Unlock()
	}
	return c, err
}

// call makes n echo calls through target, one at a time, and returns the
// transports its connections used and the median call time.
func call(target string, n int) ([]dialed, time.Duration, error) {
	dl := newDialer()
	cc, err := grpc.NewClient(target,
		grpc.WithContextDialer(dl.dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, 0, err
	}
	defer cc.Close()
	req := []byte("hello")
	var resp []byte
	lat := make([]time.Duration, n)
	for i := range lat {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t := time.Now()
		err := cc.Invoke(ctx, "/rpal.Echo/Echo", &req, &resp)
		lat[i] = time.Since(t)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("call %d through %s: %w", i, target, err)
		}
		if string(resp) != string(req) {
			return nil, 0, fmt.Errorf("call %d through %s: %q came back as %q", i, target, req, resp)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.used, lat[n/2], nil
}

// dialOne calls the echo service at a gRPC target ("host:port" and the
// like) and says which transport its connection used: rpal where the
// target is this machine and serves both ways (-serve both), TCP
// otherwise.
func dialOne(target string, n int) bool {
	used, p50, err := call(target, n)
	if err != nil {
		fmt.Println("FAIL:", err)
		return false
	}
	fmt.Printf("%s: %d calls, p50 %v, connections: %v\n", target, n, p50.Round(100*time.Nanosecond), used)
	return true
}

// both checks that one dialer and one kind of address reach a service
// over rpal when it is on this machine and serves both ways, and over TCP
// when it serves TCP only (as it would on another machine); gRPC's
// default resolver (dns) and passthrough both give the dialer its
// address.  It fails unless every connection used the transport expected.
func both(n int) bool {
	srvBoth, addrBoth := child("-serve", "both", ":0")
	defer srvBoth.Process.Kill()
	srvTCP, addrTCP := child("-serve", "tcp", ":0")
	defer srvTCP.Process.Kill()
	port := func(addr string) string {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			log.Fatalf("server address %q: %v", addr, err)
		}
		return p
	}
	pBoth, pTCP := port(addrBoth), port(addrTCP)
	ok := true
	fmt.Printf("one dialer, rpal.TCPDialer; server A serves port %s both ways, server B port %s on TCP only\n", pBoth, pTCP)
	for _, c := range []struct{ target, want string }{
		{"localhost:" + pBoth, "rpal"},
		{"passthrough:///localhost:" + pBoth, "rpal"},
		{"localhost:" + pTCP, "tcp"},
		{"passthrough:///localhost:" + pTCP, "tcp"},
	} {
		used, p50, err := call(c.target, n)
		if err != nil {
			fmt.Println("FAIL:", err)
			ok = false
			continue
		}
		verdict := "ok"
		for _, u := range used {
			if u.network != c.want {
				verdict = "FAIL: want every connection over " + c.want
				ok = false
			}
		}
		if len(used) == 0 {
			verdict = "FAIL: no connection dialed"
			ok = false
		}
		fmt.Printf("  %-36s %d calls, p50 %8v, connections: %v  %s\n",
			c.target, n, p50.Round(100*time.Nanosecond), used, verdict)
	}
	return ok
}
