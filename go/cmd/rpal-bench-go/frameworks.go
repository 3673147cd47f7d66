// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"rpal.dev/rpal"
)

// The RPC frameworks' rows (-net FRAMEWORK-TRANSPORT, rpc suite only): the
// same echo service and the same open loop as the message rows, but each
// request is one unary call of the framework and the framework owns the
// connection.  Only the listener and the dialer differ between
// FRAMEWORK-unix and FRAMEWORK-rpal: a Unix stream socket, or an rpal
// service through rpal.Listen and rpal.Dialer.
//
// A framework gives a server that answers two methods, Echo (the measured
// requests, handled by echoService.echo) and Stop (the client is done), and
// a client whose call blocks for one Echo.

// unaryClient is one framework's client of the echo service.
type unaryClient interface {
	// call sends req as one Echo request and returns the reply.
	call(ctx context.Context, req []byte) ([]byte, error)
	// stop makes the Stop call: the server records its CPU and ends.
	stop(ctx context.Context) error
	close() error
}

// frameworks: -net's framework part, its server and its client.
var frameworks = map[string]struct {
	serve func(l net.Listener, s *echoService) (shutdown func(), err error)
	dial  func(dial func(context.Context, string) (net.Conn, error), addr string, concurrency int) (unaryClient, error)
}{
	"grpc":  {serveGRPC, dialGRPC},
	"kitex": {serveKitex, dialKitex},
}

// splitFramework splits -net into its framework and its transport.
func splitFramework(network string) (framework, transport string, ok bool) {
	framework, transport, ok = strings.Cut(network, "-")
	_, known := frameworks[framework]
	return framework, transport, ok && known && (transport == "rpal" || transport == "unix")
}

func isFramework(network string) bool {
	_, _, ok := splitFramework(network)
	return ok
}

// echoService is the server's handler: every request is checked byte for
// byte (it carries its number, as the message rows' do), the -work done,
// and the bytes returned as the reply.  Its CPU counts from the reply to
// the last warm-up request, as rpcServe's from its wait for the first
// measured one.
type echoService struct {
	o       *options
	r       *results
	work    uint64 // TSC cycles
	handled atomic.Int64
	mu      sync.Mutex
	cpu0    cpuUse
	stopped chan struct{}
	once    sync.Once
}

func (s *echoService) echo(req []byte) ([]byte, error) {
	if len(req) < hdrLen {
		s.r.set(offBad, 1)
		return nil, errShort(len(req), s.o.size)
	}
	seq := getU32(req[8:])
	if _, ok := check(req, seq, s.o.size); !ok {
		s.r.set(offBad, 1)
		return nil, fmt.Errorf("server: request %d arrived corrupted", seq)
	}
	if s.work > 0 {
		for t0 := tscNow(); tscNow()-t0 < s.work; {
		}
	}
	if s.handled.Add(1) == int64(s.o.warmup) {
		s.mu.Lock()
		s.cpu0 = cpuNow()
		s.mu.Unlock()
	}
	return req, nil
}

// stop is the Stop method: the measured part is over.
func (s *echoService) stop() {
	s.once.Do(func() {
		s.mu.Lock()
		s.r.cpu(s.cpu0)
		s.mu.Unlock()
		close(s.stopped)
	})
}

// rpalStreams are this process's rpal connections, for their counters.
var rpalStreams struct {
	sync.Mutex
	list []*rpal.Stream
}

func noteStream(c net.Conn) {
	if st, ok := c.(*rpal.Stream); ok {
		rpalStreams.Lock()
		rpalStreams.list = append(rpalStreams.list, st)
		rpalStreams.Unlock()
	}
}

// streamCounts records the doorbell rings and sleeps of every rpal
// connection this process had, as rpal-go's rows do.
func streamCounts(r *results) {
	rpalStreams.Lock()
	defer rpalStreams.Unlock()
	if len(rpalStreams.list) == 0 {
		return
	}
	var wakeups, sleeps uint64
	for _, st := range rpalStreams.list {
		ci := st.Conn().Info()
		wakeups += ci.Wakeups
		sleeps += ci.Sleeps
	}
	r.set(offWakeups, wakeups)
	r.set(offSleeps, sleeps)
	atomic.StoreUint32(r.u32(offHasCount), 1)
}

// countingListener notes the connections it accepts.
type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		noteStream(c)
	}
	return c, err
}

// frameworkListen listens on -addr over the transport.
func frameworkListen(o *options, transport string) (net.Listener, error) {
	if transport == "rpal" {
		if err := initRPAL(o); err != nil {
			return nil, err
		}
		l, err := rpal.Listen(o.addr)
		if err != nil {
			return nil, err
		}
		return countingListener{l}, nil
	}
	return net.Listen("unix", o.addr)
}

// frameworkDialer dials -addr over the transport.
func frameworkDialer(o *options, transport string) (func(context.Context, string) (net.Conn, error), error) {
	if transport == "rpal" {
		if err := initRPAL(o); err != nil {
			return nil, err
		}
		var d rpal.Dialer
		return func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, addr)
			if err == nil {
				noteStream(c)
			}
			return c, err
		}, nil
	}
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", addr)
	}, nil
}

// frameworkServe serves until the client's Stop.
func frameworkServe(o *options, r *results, framework, transport string) error {
	l, err := frameworkListen(o, transport)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	s := &echoService{o: o, r: r, work: uint64(float64(o.work) * o.tscHz / 1e9), stopped: make(chan struct{})}
	shutdown, err := frameworks[framework].serve(l, s)
	if err != nil {
		l.Close()
		return fmt.Errorf("server: %s: %w", framework, err)
	}
	if err := ready(o); err != nil {
		shutdown()
		return err
	}
	<-s.stopped
	streamCounts(r)
	shutdown()
	return nil
}

// frameworkDrive is rpcDrive with one unary call per request: the same
// slots, latency from each slot (closed loop: from each call), the same
// deadline.  -concurrency goroutines share one client (one connection, as
// a service shares its client), each taking the next request number and
// sleeping to its slot; each has its own request buffer, as callers do.
func frameworkDrive(o *options, r *results, framework, transport string) error {
	dial, err := frameworkDialer(o, transport)
	if err != nil {
		return err
	}
	c, err := frameworks[framework].dial(dial, o.addr, o.concurrency)
	if err != nil {
		return fmt.Errorf("client: %s: %w", framework, err)
	}
	defer c.close()
	ctx := context.Background()
	req := make([]byte, o.size)
	for i := 0; i < o.warmup; i++ {
		if _, err := frameworkCall(ctx, c, o, r, req, i); err != nil {
			return err
		}
	}
	var periodCyc float64
	if o.rate > 0 {
		periodCyc = o.tscHz / o.rate
	}
	planned := int64(o.count)
	cpu0 := cpuNow()
	tStart := tscNow()
	endTSC := tStart + uint64(o.seconds*o.tscHz)
	var next, started, done atomic.Int64
	var last atomic.Uint64
	var wg sync.WaitGroup
	errc := make(chan error, o.concurrency)
	for range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := make([]byte, o.size)
			pace, err := newPacer()
			if err != nil {
				errc <- err
				next.Store(planned)
				return
			}
			defer pace.close()
			for {
				j := next.Add(1) - 1
				if j >= planned {
					return
				}
				slot := tStart + uint64(float64(j)*periodCyc)
				if now := tscNow(); now >= endTSC && (periodCyc == 0 || now-tStart >= 2*(endTSC-tStart)) {
					return // time is up (open loop: overloaded)
				}
				// The slot is on the TSC, the timer on CLOCK_MONOTONIC:
				// wait again until the TSC agrees, or a call could start
				// (and end) before its slot.
				for periodCyc > 0 {
					now := tscNow()
					if slot <= now {
						break
					}
					var mono unix.Timespec
					_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
					if err := pace.until(mono.Nano() + int64(float64(slot-now)/o.tscHz*1e9)); err != nil {
						errc <- err
						next.Store(planned)
						return
					}
				}
				started.Add(1)
				at, err := frameworkCall(ctx, c, o, r, req, o.warmup+int(j))
				if err != nil {
					errc <- err
					next.Store(planned) // the others stop at their next request
					return
				}
				end := tscNow()
				if periodCyc > 0 {
					at = slot
				}
				k := done.Add(1) - 1
				r.samples[k] = end - at
				for l := last.Load(); end > l && !last.CompareAndSwap(l, end); l = last.Load() {
				}
				if k&255 == 0 {
					r.set(offProgress, uint64(o.warmup)+uint64(k))
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	sent := started.Load()
	end := last.Load()
	if periodCyc > 0 {
		if e := tStart + uint64(float64(sent)*periodCyc); e > end {
			end = e
		}
	}
	r.set(offElapsed, end-tStart)
	r.cpu(cpu0)
	r.set(offUnsent, uint64(planned-sent))
	r.set(offRPCDone, uint64(done.Load()))
	r.set(offProgress, uint64(o.warmup+o.count))
	streamCounts(r)
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("client: Stop: %w", err)
	}
	return nil
}

// frameworkCall makes Echo call seq with req, stamped now, and checks the
// reply; the stamp.
func frameworkCall(ctx context.Context, c unaryClient, o *options, r *results, req []byte, seq int) (uint64, error) {
	fill(req, uint32(seq))
	at := tscNow()
	putU64(req, at)
	resp, err := c.call(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("client: request %d: %w", seq, err)
	}
	if _, ok := check(resp, uint32(seq), o.size); !ok {
		r.set(offBad, 1)
		return 0, fmt.Errorf("client: reply to request %d arrived corrupted", seq)
	}
	return at, nil
}

// runFramework is runRole for the frameworks' rows.
func runFramework(o *options, r *results) error {
	framework, transport, _ := splitFramework(o.network)
	if o.role == "server" {
		return frameworkServe(o, r, framework, transport)
	}
	return frameworkDrive(o, r, framework, transport)
}
