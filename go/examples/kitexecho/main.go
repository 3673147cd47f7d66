// SPDX-License-Identifier: MIT

// kitexecho is a CloudWeGo Kitex echo service over rpal, and a benchmark
// that runs the same service over a Unix socket in the same run.
//
//	go run . -n 20000            # benchmark both transports
//	go run . -n 5000 -rate 1000  # the same at 1,000 calls/s
//	go run . -check              # verified calls over both transports; exit 1 on any error
//	go run . -serve rpal NAME    # just serve (NAME: an rpal service)
//	go run . -serve unix PATH    # just serve on a Unix socket
//
// Kitex runs here on its Go-net transport (package gonet) instead of its
// default, netpoll, which polls socket descriptors itself and so cannot use
// an rpal connection: the server takes our net.Listener, the client dials
// through our dialer.  The service has one unary method, Echo.Echo, called
// through Kitex's binary generic: requests and responses are Thrift structs
// passed as raw bytes, so no IDL and no code generation are needed.  Ours
// hold one binary field, the payload.  The server runs in a child process;
// the client calls it one request at a time and reports p50/p99 latency and
// CPU time (client and server) per request.  (go.mod says why it raises two
// of Kitex's dependencies.)
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
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

	"rpal.dev/rpal"
)

const (
	service = "Echo" // the Thrift service; both sides must agree on it
	method  = "Echo"
)

// echoStruct is payload as the Thrift struct {1: binary payload} in the
// binary protocol: field header (type 11, id 1), length, bytes, stop.
func echoStruct(payload []byte) []byte {
	b := make([]byte, 0, 8+len(payload))
	b = append(b, 11, 0, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, 0)
}

func listen(transport, addr string) net.Listener {
	var l net.Listener
	var err error
	switch transport {
	case "rpal":
		l, err = rpal.Listen(addr) // a net.Listener
	case "unix":
		os.Remove(addr)
		l, err = net.Listen("unix", addr)
	default:
		log.Fatalf("unknown transport %q", transport)
	}
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// serve runs the echo server until SIGTERM or SIGINT, on which Kitex
// stops it: it closes the listener, waits for the clients to close their
// connections (at most the exit wait time), and Run returns.
func serve(transport, addr string) {
	// A Framed request, Kitex's default, does not name its service, and
	// a binary generic service has no method table to find it by: the
	// handler of unknown services and methods takes every request.
	handler := &genericserver.UnknownServiceOrMethodHandler{
		// The request is the args struct as it came; returned as the
		// result struct, it goes back unchanged.
		DefaultHandler: func(_ context.Context, _, _ string, req any) (any, error) {
			return req, nil
		},
	}
	svr := genericserver.NewUnknownServiceOrMethodServer(handler,
		server.WithListener(listen(transport, addr)),
		// Both are needed: the default transport server is netpoll's,
		// and the default handler detects protocols on netpoll
		// connections only.
		server.WithTransServerFactory(gonet.NewTransServerFactory()),
		server.WithTransHandlerFactory(gonet.NewSvrTransHandlerFactory()),
		// How long a stop waits for clients to close their connections
		// (default 5 s); then Run returns an error.
		server.WithExitWaitTime(time.Second))
	fmt.Println("ready")
	if err := svr.Run(); err != nil {
		log.Fatal(err)
	}
}

// kitexConn is a connection as Kitex's gonet client handler needs it: it
// reads and writes through the bufiox buffers it gets from Reader and
// Writer (it type-asserts for them), so reads must go through the same
// buffer.
type kitexConn struct {
	net.Conn
	r      *bufiox.DefaultReader
	w      *bufiox.DefaultWriter
	dialed net.Addr
}

func (c *kitexConn) Reader() *bufiox.DefaultReader { return c.r }
func (c *kitexConn) Writer() *bufiox.DefaultWriter { return c.w }
func (c *kitexConn) Read(b []byte) (int, error)    { return c.r.Read(b) }

// RemoteAddr is the address Kitex dialed.  Its connection pool files a
// connection it gets back under RemoteAddr().Network() and closes it if
// that is not the network it dialed: an rpal connection's, "rpal", would
// cost a new connection for every call.
func (c *kitexConn) RemoteAddr() net.Addr { return c.dialed }

// dialedAddr is a net.Addr of any network.
type dialedAddr struct{ network, address string }

func (a dialedAddr) Network() string { return a.network }
func (a dialedAddr) String() string  { return a.address }

// dialer is a Kitex remote.Dialer that dials rpal or a Unix socket,
// whatever network Kitex names.  It keeps its connections so they can be
// closed: closing a generic client leaves its pooled connections open.
type dialer struct {
	transport string
	mu        sync.Mutex
	conns     []*kitexConn
}

func (d *dialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var c net.Conn
	var err error
	if d.transport == "rpal" {
		var rd rpal.Dialer
		c, err = rd.DialContext(ctx, addr)
	} else {
		var nd net.Dialer
		c, err = nd.DialContext(ctx, "unix", addr)
	}
	if err != nil {
		return nil, err
	}
	kc := &kitexConn{Conn: c, r: bufiox.NewDefaultReader(c), w: bufiox.NewDefaultWriter(c),
		dialed: dialedAddr{network, addr}}
	d.mu.Lock()
	d.conns = append(d.conns, kc)
	d.mu.Unlock()
	return kc, nil
}

// first is the first connection dialed.
func (d *dialer) first() net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.conns) == 0 {
		return nil
	}
	return d.conns[0].Conn
}

func (d *dialer) dialed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

func (d *dialer) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// newClient is a Kitex client of the echo server at addr.  Calls go one
// at a time over one long-lived connection, as with the gRPC example;
// concurrent calls would dial more, and the pool would keep one of them.
func newClient(d *dialer, addr string) genericclient.Client {
	cli, err := genericclient.NewClient(service, generic.BinaryThriftGenericV2(service),
		// addr is not host:port, so Kitex takes it for a Unix socket
		// path, and hands it to our dialer as it is.
		client.WithHostPorts(addr),
		client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()),
		client.WithDialer(d),
		client.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: 1, MaxIdleGlobal: 1, MaxIdleTimeout: time.Hour}),
		// Kitex's default, 50 ms, is short for a first rpal dial,
		// which maps the region and creates the arena.
		client.WithConnectTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func cpu(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type result struct {
	p50, p99, mean, cpuPerReq time.Duration
	info                      *rpal.ConnInfo // rpal: the client's counters
}

// child runs this program with args in a process that dies with us, and
// waits for it to print "ready".
func child(args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		log.Fatalf("%v did not start", args)
	}
	return c
}

// stop closes the client's connections, then stops the server and waits
// for it; false if it did not exit cleanly.
func stop(srv *exec.Cmd, d *dialer) bool {
	d.closeAll()
	srv.Process.Signal(syscall.SIGTERM)
	return srv.Wait() == nil
}

func bench(transport, addr string, n, size int, rate float64) result {
	srv := child("-serve", transport, addr)
	d := &dialer{transport: transport}
	cli := newClient(d, addr)
	req := echoStruct(make([]byte, size))
	// No deadline and no cancel: Kitex then makes the call on this
	// goroutine, not on one of its timeout pool's.
	ctx := context.Background()
	call := func() {
		resp, err := cli.GenericCall(ctx, method, req)
		if err != nil {
			log.Fatalf("%s: %v", transport, err)
		}
		if b, _ := resp.([]byte); len(b) != len(req) {
			log.Fatalf("%s: echo of %d bytes came back as %d", transport, len(req), len(b))
		}
	}
	for i := 0; i < 2000; i++ { // warm up
		call()
	}
	st, _ := d.first().(*rpal.Stream)
	var info0 rpal.ConnInfo
	if st != nil {
		info0 = st.Conn().Info()
	}
	lat := make([]time.Duration, n)
	c0 := cpu(syscall.RUSAGE_SELF)
	t0 := time.Now()
	for i := range lat {
		if rate > 0 {
			// Call i starts at t0 + i/rate, or at once if late.  Timed
			// from its start: a timer's wake-up comes hundreds of µs late
			// in an idle Go process, which would swamp the call.
			time.Sleep(time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		t := time.Now()
		call()
		lat[i] = time.Since(t)
	}
	total := time.Since(t0)
	self := cpu(syscall.RUSAGE_SELF) - c0
	var info *rpal.ConnInfo
	if st != nil {
		i := st.Conn().Info()
		i.Wakeups -= info0.Wakeups
		i.Sleeps -= info0.Sleeps
		info = &i
	}
	ch0 := cpu(syscall.RUSAGE_CHILDREN)
	if !stop(srv, d) {
		log.Fatalf("%s: the server did not exit cleanly", transport)
	}
	// The server's CPU includes its warm-up; it is small next to n calls.
	server := cpu(syscall.RUSAGE_CHILDREN) - ch0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{
		p50: lat[n/2], p99: lat[n*99/100], mean: total / time.Duration(n),
		cpuPerReq: (self + server) / time.Duration(n), info: info,
	}
}

func main() {
	serveFlag := flag.String("serve", "", "serve on this transport (rpal or unix) at the address given as argument")
	checkFlag := flag.Bool("check", false, "instead of the benchmark: verified echoes of many sizes over each transport")
	n := flag.Int("n", 20000, "requests per transport")
	size := flag.Int("size", 1024, "payload bytes of each request and response (the Thrift struct around it adds 8)")
	rate := flag.Float64("rate", 0, "calls per second, each started at a fixed time (0: back to back)")
	order := flag.String("transports", "rpal,unix", "transports to run, in order")
	flag.Parse()
	// Kitex logs at Info level to stderr, a line for each server start;
	// warnings and errors still show.
	klog.SetLevel(klog.LevelWarn)
	if *serveFlag != "" {
		serve(*serveFlag, flag.Arg(0))
		return
	}
	dir, err := os.MkdirTemp("", "kitexecho")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// An abstract name: nothing is left on disk when the servers are killed.
	name := fmt.Sprintf("@kitexecho-%d", os.Getpid())
	addr := func(tr string) string {
		if tr == "unix" {
			return dir + "/kitex.sock"
		}
		return name
	}
	if *checkFlag {
		ok := true
		for _, tr := range strings.Split(*order, ",") {
			ok = check(tr, addr(tr)) && ok
		}
		if !ok {
			os.RemoveAll(dir)
			os.Exit(1)
		}
		return
	}
	pace := "back to back"
	if *rate > 0 {
		pace = fmt.Sprintf("at %g/s", *rate)
	}
	fmt.Printf("Kitex unary echo (gonet, binary generic), %d-byte payloads, %d calls each, one at a time, %s\n", *size, *n, pace)
	fmt.Printf("%-6s %10s %10s %10s %14s %s\n", "", "p50", "p99", "mean", "CPU/request", "client rings, sleeps per call")
	for _, tr := range strings.Split(*order, ",") {
		r := bench(tr, addr(tr), *n, *size, *rate)
		counts := "-"
		if r.info != nil {
			counts = fmt.Sprintf("%.2f, %.2f", float64(r.info.Wakeups)/float64(*n), float64(r.info.Sleeps)/float64(*n))
		}
		fmt.Printf("%-6s %10v %10v %10v %14v %s\n", tr, r.p50, r.p99, r.mean, r.cpuPerReq, counts)
	}
}
