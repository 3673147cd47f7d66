// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"rpal.dev/rpal"
)

const (
	hogCallBytes     = 1 << 20 // each stopped client's calls: replies it never reads
	hogCallsInFlight = 16
	healthyBytes     = 256 << 10 // the healthy client's calls
	healthyCalls     = 20
	healthyDeadline  = 5 * time.Second
)

// dialRPAL is a gRPC client of the rpal service addr.
func dialRPAL(addr string) *grpc.ClientConn {
	var d rpal.Dialer
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, a) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		log.Fatal(err)
	}
	return cc
}

// hog keeps hogCallsInFlight large calls going; the parent stops it with
// SIGSTOP, so the server's replies to it wait in the server's arena.
func hog(addr string) {
	cc := dialRPAL(addr)
	req := make([]byte, hogCallBytes)
	first := make(chan struct{}, hogCallsInFlight)
	for i := 0; i < hogCallsInFlight; i++ {
		go func() {
			var resp []byte
			for {
				if err := cc.Invoke(context.Background(), "/rpal.Echo/Echo", &req, &resp); err != nil {
					log.Fatal(err)
				}
				first <- struct{}{}
			}
		}()
	}
	for i := 0; i < 64; i++ { // long enough for flow-control windows to grow
		<-first
	}
	fmt.Println("ready")
	select {}
}

// stopped starts a server and n clients that it stops in the middle of
// large calls, then checks that a healthy client's calls still go through:
// one arena serves all of the server's connections, and each connection
// may hold only its share of it.  Each client must get its own calls
// through before it is stopped; the run fails at the first that cannot.
func stopped(addr string, n int) bool {
	srv, _ := child("-serve", "rpal", addr)
	defer srv.Process.Kill()
	for i := 0; i < n; i++ {
		h, ready := start("-hog", addr)
		defer h.Process.Kill()
		select {
		case _, ok := <-ready:
			if !ok {
				log.Fatalf("client %d did not start", i)
			}
		case <-time.After(healthyDeadline):
			fmt.Printf("FAIL: with %d clients stopped mid-call, client %d's calls did not go through in %v\n",
				i, i, healthyDeadline)
			return false
		}
		h.Process.Signal(syscall.SIGSTOP)
	}
	time.Sleep(200 * time.Millisecond) // the server writes what it can to them
	cc := dialRPAL(addr)
	defer cc.Close()
	req := make([]byte, healthyBytes)
	var resp []byte
	var worst time.Duration
	ok := true
	for i := 0; i < healthyCalls && ok; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), healthyDeadline)
		t := time.Now()
		err := cc.Invoke(ctx, "/rpal.Echo/Echo", &req, &resp)
		cancel()
		if d := time.Since(t); d > worst {
			worst = d
		}
		if err != nil || len(resp) != healthyBytes {
			fmt.Printf("FAIL: call %d of %d KiB with %d clients stopped mid-call: %v (%d bytes back)\n",
				i, healthyBytes>>10, n, err, len(resp))
			ok = false
		}
	}
	if ok {
		fmt.Printf("%d clients stopped with %d x %d KiB calls in flight: %d calls of %d KiB went through, the slowest in %v\n",
			n, hogCallsInFlight, hogCallBytes>>10, healthyCalls, healthyBytes>>10, worst.Round(time.Microsecond))
	}
	return ok
}
