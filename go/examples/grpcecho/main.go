// SPDX-License-Identifier: MIT

// grpcecho is a gRPC-go echo service over rpal, and a benchmark that runs
// the same service over a Unix socket in the same run.
//
//	go run . -n 20000            # benchmark both transports
//	go run . -n 5000 -rate 1000  # the same at 1,000 calls/s
//	go run . -serve rpal NAME    # just serve (NAME: an rpal service)
//	go run . -serve unix PATH    # just serve on a Unix socket
//	go run . -stopped 30         # 30 clients stopped mid-call; does another get through?
//	go run . -both               # one address: rpal to a local server, TCP to a TCP-only one
//	go run . -serve both :8080   # serve TCP port 8080, and rpal for local clients
//	go run . -dial host:8080     # call it -n times, back to back: over rpal on its machine, TCP elsewhere
//
// The service has one unary method, /rpal.Echo/Echo, whose messages are raw
// bytes (a pass-through codec: no protobuf code generation needed).  The
// server runs in a child process; the client calls it one request at a time
// and reports p50/p99 latency and CPU time (client and server) per request.
//
// -serve both, -dial and -both show one address for local and remote: the
// server listens with rpal.ListenTCP (TCP, and rpal for clients on its
// machine), the client dials "host:port" through rpal.TCPDialer as gRPC's
// context dialer, and each connection goes over rpal when the server is on
// the client's machine and over TCP when it is not (both.go).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"rpal.dev/rpal"
)

// rawCodec passes []byte messages through unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

var echoDesc = grpc.ServiceDesc{
	ServiceName: "rpal.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var m []byte
			if err := dec(&m); err != nil {
				return nil, err
			}
			return &m, nil
		},
	}},
}

func serve(transport, addr string) {
	var l net.Listener
	var err error
	switch transport {
	case "rpal":
		l, err = rpal.Listen(addr) // a net.Listener
	case "unix":
		os.Remove(addr)
		l, err = net.Listen("unix", addr)
	case "tcp":
		l, err = net.Listen("tcp", addr)
	case "both":
		// TCP on addr, and rpal for clients on this machine (the service
		// "tcp:<port>"): one net.Listener for both.
		l, err = rpal.ListenTCP("tcp", addr)
	default:
		log.Fatalf("unknown transport %q", transport)
	}
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	s.RegisterService(&echoDesc, nil)
	if transport == "tcp" || transport == "both" {
		l = loggingListener{l} // the transport of each connection
		fmt.Println("ready", l.Addr())
	} else {
		fmt.Println("ready")
	}
	if err := s.Serve(l); err != nil {
		log.Fatal(err)
	}
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

// start runs this program with args in a process that dies with us.  Once
// it prints its "ready" line, ready receives the rest of that line (a
// server's address, or ""); ready is closed if it prints anything else.
func start(args ...string) (*exec.Cmd, <-chan string) {
	c := exec.Command(os.Args[0], args...)
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "ready"); ok {
				ready <- strings.TrimSpace(rest)
				return
			}
		}
		close(ready)
	}()
	return c, ready
}

// child is start, waiting for "ready"; it returns the rest of that line.
func child(args ...string) (*exec.Cmd, string) {
	c, ready := start(args...)
	rest, ok := <-ready
	if !ok {
		log.Fatalf("%v did not start", args)
	}
	return c, rest
}

func bench(transport, addr string, n, size int, rate float64) result {
	srv, _ := child("-serve", transport, addr)
	var dial func(context.Context, string) (net.Conn, error)
	var st *rpal.Stream
	if transport == "rpal" {
		dial = func(ctx context.Context, a string) (net.Conn, error) {
			var d rpal.Dialer
			c, err := d.DialContext(ctx, a)
			if err == nil {
				st = c.(*rpal.Stream)
			}
			return c, err
		}
	} else {
		dial = func(ctx context.Context, a string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a)
		}
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		log.Fatal(err)
	}
	req := make([]byte, size)
	var resp []byte
	ctx := context.Background()
	call := func() {
		if err := cc.Invoke(ctx, "/rpal.Echo/Echo", &req, &resp); err != nil {
			log.Fatalf("%s: %v", transport, err)
		}
		if len(resp) != size {
			log.Fatalf("%s: echo of %d bytes came back as %d", transport, size, len(resp))
		}
	}
	for i := 0; i < 2000; i++ { // warm up
		call()
	}
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
	cc.Close()
	ch0 := cpu(syscall.RUSAGE_CHILDREN)
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	// The server's CPU includes its warm-up; it is small next to n calls.
	server := cpu(syscall.RUSAGE_CHILDREN) - ch0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{
		p50: lat[n/2], p99: lat[n*99/100], mean: total / time.Duration(n),
		cpuPerReq: (self + server) / time.Duration(n), info: info,
	}
}

func main() {
	serveFlag := flag.String("serve", "", "serve on this transport (rpal, unix, tcp, or both: TCP and rpal) at the address given as argument")
	stoppedFlag := flag.Int("stopped", 0, "instead of the benchmark: this many stopped clients with large calls in flight, then a healthy client's calls must go through")
	hogFlag := flag.String("hog", "", "be one of -stopped's clients, of the rpal service given")
	bothFlag := flag.Bool("both", false, "instead of the benchmark: check that one dialer reaches a server on this machine over rpal and a TCP-only one over TCP")
	dialFlag := flag.String("dial", "", "instead of the benchmark: call the echo service at this gRPC target (host:port) and say which transport was used")
	n := flag.Int("n", 20000, "requests per transport (the benchmark); calls made by -dial")
	size := flag.Int("size", 32, "request and response payload bytes")
	rate := flag.Float64("rate", 0, "the benchmark's calls per second, each started at a fixed time (0: back to back; -dial's calls always are)")
	order := flag.String("transports", "unix,rpal,unix,rpal", "transports to run, in order")
	flag.Parse()
	if *serveFlag != "" {
		serve(*serveFlag, flag.Arg(0))
		return
	}
	if *hogFlag != "" {
		hog(*hogFlag)
		return
	}
	if *bothFlag {
		if !both(min(*n, 1000)) {
			os.Exit(1)
		}
		return
	}
	if *dialFlag != "" {
		if !dialOne(*dialFlag, *n) {
			os.Exit(1)
		}
		return
	}
	if *stoppedFlag > 0 {
		if !stopped(fmt.Sprintf("@grpcecho-%d", os.Getpid()), *stoppedFlag) {
			os.Exit(1)
		}
		return
	}
	dir, err := os.MkdirTemp("", "grpcecho")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// An abstract name: nothing is left on disk when the servers are killed.
	name := fmt.Sprintf("@grpcecho-%d", os.Getpid())
	pace := "back to back"
	if *rate > 0 {
		pace = fmt.Sprintf("at %g/s", *rate)
	}
	fmt.Printf("gRPC unary echo, %d-byte messages, %d calls each, one at a time, %s\n", *size, *n, pace)
	fmt.Printf("%-6s %10s %10s %10s %14s %s\n", "", "p50", "p99", "mean", "CPU/request", "client rings, sleeps per call")
	for _, tr := range strings.Split(*order, ",") {
		addr := name
		if tr == "unix" {
			addr = dir + "/grpc.sock"
		}
		r := bench(tr, addr, *n, *size, *rate)
		counts := "-"
		if r.info != nil {
			counts = fmt.Sprintf("%.2f, %.2f", float64(r.info.Wakeups)/float64(*n), float64(r.info.Sleeps)/float64(*n))
		}
		fmt.Printf("%-6s %10v %10v %10v %14v %s\n", tr, r.p50, r.p99, r.mean, r.cpuPerReq, counts)
	}
}
