// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The shapes the TCPDialer's methods promise: gRPC's context dialer, and
// Kitex's remote.Dialer.
var (
	_ func(context.Context, string) (net.Conn, error) = (&TCPDialer{}).DialAddr
	_ interface {
		DialTimeout(network, address string, timeout time.Duration) (net.Conn, error)
	} = (*TCPDialer)(nil)
)

// countLocalDials counts the TCPDialer's rpal attempts for the rest of
// the test.
func countLocalDials(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	testHookDialLocal = func(string) { n.Add(1) }
	t.Cleanup(func() { testHookDialLocal = nil })
	return &n
}

// next returns the next network echoTCP reports, failing the test if it
// accepts nothing within a few seconds.
func next(t *testing.T, nets <-chan string) string {
	t.Helper()
	select {
	case n := <-nets:
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("the server accepted nothing")
		return ""
	}
}

// echoTCP serves l: each connection's network ("rpal" or "tcp") goes to
// nets, then its bytes are echoed until it closes.  It returns when Accept
// fails, with that error on done.
func echoTCP(l net.Listener, nets chan<- string) (done <-chan error) {
	d := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				d <- err
				return
			}
			if nets != nil {
				nets <- c.LocalAddr().Network()
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return d
}

// roundTrip writes n bytes to c and checks they come back.
func roundTrip(t *testing.T, c net.Conn, n int) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	out := make([]byte, n)
	fill(out, int64(n))
	errc := make(chan error, 1)
	go func() { _, err := c.Write(out); errc <- err }()
	in := make([]byte, n)
	if _, err := io.ReadFull(c, in); err != nil {
		t.Fatalf("read back over %s: %v", c.LocalAddr().Network(), err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write over %s: %v", c.LocalAddr().Network(), err)
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("%d bytes over %s came back changed", n, c.LocalAddr().Network())
	}
}

// fakeDNS returns a resolver that answers from names alone, an IPv4
// address for each name it knows and nothing for the rest, without /etc/hosts or the network.
func fakeDNS(t *testing.T, names map[string]netip.Addr) *net.Resolver {
	answer := func(q []byte) ([]byte, error) {
		var p dnsmessage.Parser
		h, err := p.Start(q)
		if err != nil {
			return nil, err
		}
		qs, err := p.AllQuestions()
		if err != nil || len(qs) != 1 {
			return nil, fmt.Errorf("%d questions: %v", len(qs), err)
		}
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		b.EnableCompression()
		b.StartQuestions()
		b.Question(qs[0])
		b.StartAnswers()
		if ip, ok := names[qs[0].Name.String()]; ok && qs[0].Type == dnsmessage.TypeA {
			b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: ip.As4()})
		}
		return b.Finish()
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		// Not a net.PacketConn: the resolver frames its messages as over TCP.
		c, s := net.Pipe()
		go func() {
			defer s.Close()
			for {
				var n [2]byte
				if _, err := io.ReadFull(s, n[:]); err != nil {
					return
				}
				q := make([]byte, int(n[0])<<8|int(n[1]))
				if _, err := io.ReadFull(s, q); err != nil {
					return
				}
				a, err := answer(q)
				if err != nil {
					t.Errorf("fake DNS: %v", err)
					return
				}
				if _, err := s.Write(append([]byte{byte(len(a) >> 8), byte(len(a))}, a...)); err != nil {
					return
				}
			}
		}()
		return c, nil
	}}
}

func listenBoth(t *testing.T, lc *ListenConfig, address string) (*TCPListener, int) {
	t.Helper()
	l, err := lc.ListenTCP(context.Background(), "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, l.Addr().(*net.TCPAddr).Port
}

// A port served both ways on this machine is dialed over rpal, whichever
// of this machine's addresses or names the client gives.
func TestTCPDialerLocal(t *testing.T) {
	l, port := listenBoth(t, &ListenConfig{}, "127.0.0.1:0")
	if want := "tcp:" + strconv.Itoa(port); l.Service() != want {
		t.Fatalf("service %q, want %q", l.Service(), want)
	}
	nets := make(chan string, 16)
	echoTCP(l, nets)
	p := strconv.Itoa(port)
	addrs := []string{"127.0.0.1:" + p, "localhost:" + p, "[::1]:" + p, ":" + p, "0.0.0.0:" + p, "this.test:" + p}
	// Names in the resolver of the dialer: one resolves to a loopback address.
	names := map[string]netip.Addr{"this.test.": netip.MustParseAddr("127.0.0.2")}
	// An address of a network interface: the service name carries only the
	// port, so it serves every address of this machine.
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				addrs = append(addrs, net.JoinHostPort(n.IP.String(), p))
				names["iface.test."], _ = netip.AddrFromSlice(n.IP.To4())
				addrs = append(addrs, "iface.test:"+p)
				break
			}
		}
	}
	var d TCPDialer
	d.TCP.Resolver = fakeDNS(t, names)
	d.Fallback = func(a string, err error) { t.Errorf("fallback for %s: %v", a, err) }
	dials := map[string]func(string) (net.Conn, error){
		"DialContext": func(a string) (net.Conn, error) { return d.DialContext(context.Background(), "tcp", a) },
		"Dial":        func(a string) (net.Conn, error) { return d.Dial("tcp4", a) },
		"DialAddr":    func(a string) (net.Conn, error) { return d.DialAddr(context.Background(), a) },
		"DialTimeout": func(a string) (net.Conn, error) { return d.DialTimeout("tcp", a, time.Second) },
	}
	for _, a := range addrs {
		for name, dial := range dials {
			if name == "Dial" && a == "[::1]:"+p {
				continue // tcp4
			}
			attempts := countLocalDials(t)
			c, err := dial(a)
			if err != nil {
				t.Fatalf("%s(%s): %v", name, a, err)
			}
			if _, ok := c.(*Stream); !ok || c.LocalAddr().Network() != "rpal" || c.RemoteAddr().String() != l.Service() {
				t.Fatalf("%s(%s) connected over %s to %s (%T), want rpal to %s",
					name, a, c.LocalAddr().Network(), c.RemoteAddr(), c, l.Service())
			}
			if n := attempts.Load(); n != 1 {
				t.Fatalf("%s(%s): %d rpal attempts, want 1", name, a, n)
			}
			roundTrip(t, c, 100<<10)
			c.Close()
			if got := next(t, nets); got != "rpal" {
				t.Fatalf("%s(%s): the server accepted a %s connection, want rpal", name, a, got)
			}
		}
	}
}

// A port served on TCP only is dialed over TCP, without an rpal attempt.
func TestTCPDialerTCPOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoTCP(ln, nil)
	attempts := countLocalDials(t)
	var d TCPDialer
	p := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, a := range []string{ln.Addr().String(), "localhost:" + p, ":" + p} {
		c, err := d.DialContext(context.Background(), "tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.(*net.TCPConn); !ok {
			t.Fatalf("dial %s: a %T over %s, want a *net.TCPConn", a, c, c.LocalAddr().Network())
		}
		roundTrip(t, c, 100<<10)
		c.Close()
	}
	if n := attempts.Load(); n != 0 {
		t.Fatalf("%d rpal attempts for a port served on TCP only", n)
	}
}

// An address that is not this machine's goes to TCP even when this
// machine serves the same port both ways.
func TestTCPDialerRemoteAddress(t *testing.T) {
	_, port := listenBoth(t, &ListenConfig{}, "127.0.0.1:0")
	remote := netip.MustParseAddr("192.0.2.1") // TEST-NET-1
	if localIP(remote) {
		t.Skipf("%v is an address of this machine", remote)
	}
	attempts := countLocalDials(t)
	// The TCP dial is stopped before its connect: the test sees where it
	// would have gone without sending anything.
	errStop := errors.New("stopped before connecting")
	var dialed []string
	var d TCPDialer
	d.TCP.ControlContext = func(_ context.Context, network, address string, _ syscall.RawConn) error {
		dialed = append(dialed, network+" "+address)
		return errStop
	}
	address := netip.AddrPortFrom(remote, uint16(port)).String()
	_, err := d.DialContext(context.Background(), "tcp", address)
	if !errors.Is(err, errStop) {
		t.Fatalf("dial %s: %v, want the TCP dial's", address, err)
	}
	if n := attempts.Load(); n != 0 {
		t.Fatalf("%d rpal attempts for %s, not this machine's", n, address)
	}
	if len(dialed) != 1 || dialed[0] != "tcp4 "+address {
		t.Fatalf("TCP dials %q, want one to %s", dialed, address)
	}
	// Nor does a name that resolves to such an address.
	d.TCP.Resolver = fakeDNS(t, map[string]netip.Addr{"remote.test.": remote})
	dialed = nil
	_, err = d.DialContext(context.Background(), "tcp", fmt.Sprintf("remote.test:%d", port))
	if !errors.Is(err, errStop) || attempts.Load() != 0 || len(dialed) != 1 || dialed[0] != "tcp4 "+address {
		t.Fatalf("dial remote.test: %v after %d rpal attempts, TCP dials %q; want one TCP dial to %s and no rpal attempt",
			err, attempts.Load(), dialed, address)
	}
	// Networks other than TCP are not looked at.
	_, err = d.DialContext(context.Background(), "udp", fmt.Sprintf("127.0.0.1:%d", port))
	if !errors.Is(err, errStop) || attempts.Load() != 0 {
		t.Fatalf("udp dial: %v after %d rpal attempts, want the UDP dial's error and none", err, attempts.Load())
	}
}

// When the local server refuses us, the dialer says why through Fallback
// and connects over TCP.
func TestTCPDialerFallback(t *testing.T) {
	l, _ := listenBoth(t, &ListenConfig{Policy: &Policy{}}, "127.0.0.1:0") // refuses everyone
	nets := make(chan string, 4)
	echoTCP(l, nets)
	attempts := countLocalDials(t)
	var reasons []error
	d := TCPDialer{Fallback: func(_ string, err error) { reasons = append(reasons, err) }}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("a %T, want a *net.TCPConn after the refusal", c)
	}
	roundTrip(t, c, 4096)
	if got := next(t, nets); got != "tcp" {
		t.Fatalf("the server accepted a %s connection, want tcp", got)
	}
	if attempts.Load() != 1 || len(reasons) != 1 || !errors.Is(reasons[0], syscall.EACCES) {
		t.Fatalf("%d rpal attempts, fallback reasons %v; want 1 attempt refused with EACCES", attempts.Load(), reasons)
	}
	// The server notes the refusal after sending it.
	var r []error
	for end := time.Now().Add(2 * time.Second); len(r) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		r = l.Refused()
	}
	if len(r) != 1 || !errors.Is(r[0], syscall.EACCES) {
		t.Fatalf("the listener reports the refusals %v, want one with EACCES", r)
	}
}

// A socket left behind by a server that died is not a failure to report:
// the dialer falls back to TCP silently.
func TestTCPDialerStaleSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoTCP(ln, nil)
	st, err := ProcessStats()
	if err != nil {
		t.Fatal(err)
	}
	service := tcpService(ln.Addr().(*net.TCPAddr).Port)
	path := st.RuntimeDir + "/" + service + ".sock"
	stale, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	defer syscall.Unlink(path)
	if !serviceSocket(service) {
		t.Fatal("the stale socket is not seen")
	}
	attempts := countLocalDials(t)
	d := TCPDialer{Fallback: func(_ string, err error) { t.Errorf("fallback reported for a stale socket: %v", err) }}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok || attempts.Load() != 1 {
		t.Fatalf("a %T after %d rpal attempts, want a *net.TCPConn after 1", c, attempts.Load())
	}
	roundTrip(t, c, 4096)
}

// The listener accepts both kinds at once; Close closes both.
func TestTCPListenerBothWays(t *testing.T) {
	l, err := ListenTCP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const each = 8
	nets := make(chan string, 2*each)
	done := echoTCP(l, nets)
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for i := 0; i < 2*each; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var err error
			if i%2 == 0 {
				c, err = Dial(l.Service())
			} else {
				c, err = net.Dial("tcp", l.Addr().String())
			}
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := []byte(fmt.Sprintf("client %d", i))
			if _, err := c.Write(msg); err != nil {
				errs <- err
				return
			}
			in := make([]byte, len(msg))
			if _, err := io.ReadFull(c, in); err != nil || !bytes.Equal(in, msg) {
				errs <- fmt.Errorf("client %d read %q, %v", i, in, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	count := map[string]int{}
	for i := 0; i < 2*each; i++ {
		count[next(t, nets)]++
	}
	if count["rpal"] != each || count["tcp"] != each {
		t.Fatalf("accepted %v, want %d of rpal and of tcp", count, each)
	}

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end a blocked Accept")
	}
	if c, err := Dial(l.Service()); err == nil {
		c.Close()
		t.Fatal("the rpal service is still served after Close")
	}
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the TCP port is still served after Close")
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
}

// ListenTCP fails, and releases the TCP port, when the port's rpal service
// is served already; and it takes TCP networks only.
func TestListenTCPErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := ln.Addr().String()
	ln.Close()
	other, err := Listen(tcpService(ln.Addr().(*net.TCPAddr).Port))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if l, err := ListenTCP("tcp", address); !errors.Is(err, syscall.EADDRINUSE) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("ListenTCP on a port whose service is taken: %v, want EADDRINUSE", err)
	}
	ln, err = net.Listen("tcp", address)
	if err != nil {
		t.Fatalf("the TCP port was not released after the failed ListenTCP: %v", err)
	}
	ln.Close()
	if l, err := ListenTCP("unix", "/tmp/x"); err == nil {
		l.Close()
		t.Fatal("ListenTCP took the network unix")
	}
}

// silentService serves a socket at service's path that accepts and never
// answers, as a stopped or hung server's would.
func silentService(t *testing.T, service string) {
	st, err := ProcessStats()
	if err != nil {
		t.Fatal(err)
	}
	path := st.RuntimeDir + "/" + service + ".sock"
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
}

// A local server that does not answer takes at most half of the dial's
// timeout: the TCP dial gets the rest, and Fallback hears of a timeout.
func TestTCPDialerSilentLocalServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoTCP(ln, nil)
	silentService(t, tcpService(ln.Addr().(*net.TCPAddr).Port))
	var reasons []error
	d := TCPDialer{TCP: net.Dialer{Timeout: 200 * time.Millisecond},
		Fallback: func(_ string, err error) { reasons = append(reasons, err) }}
	t0 := time.Now()
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial with a silent local server: %v", err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("a %T, want a *net.TCPConn", c)
	}
	roundTrip(t, c, 4096)
	var ne net.Error
	if len(reasons) != 1 || !errors.As(reasons[0], &ne) || !ne.Timeout() {
		t.Fatalf("fallback reasons %v, want one timeout", reasons)
	}
	t.Logf("over TCP after %v; fallback: %v", time.Since(t0), reasons[0])
}

// A handshake that gets no answer says what ended it: the context's
// deadline or cancellation (errors.Is), or the handshake timeout; the
// timeouts are net.Error timeouts.
func TestDialContextErrors(t *testing.T) {
	name := uniqueName("silent")
	silentService(t, name)
	var d Dialer
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := d.DialContext(ctx, name)
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a dial past its context's deadline: %v (timeout %v)", err, ne != nil && ne.Timeout())
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err = d.DialContext(ctx, name); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled dial: %v", err)
	}
	_, err = d.DialContext(t.Context(), name)
	if !errors.Is(err, syscall.ETIMEDOUT) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a dial past the handshake timeout: %v", err)
	}
}
