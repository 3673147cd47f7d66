// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// TCPDialer connects to TCP addresses, "host:port", as net.Dialer does,
// except that it connects over rpal when the host is this machine and a
// process here serves the port both ways (see ListenTCP).  One address
// then reaches a service on this machine over rpal and a service on another
// machine over TCP, so a service can move between hosts with no change to
// its clients.
//
// For the networks "tcp", "tcp4" and "tcp6", a dial goes over rpal when
// both of these hold:
//
//   - the port's rpal service, "tcp:<port>", has a socket in the runtime
//     directory (one stat; a port nobody here serves costs no more);
//   - the host is this machine: empty, a loopback or unspecified address,
//     an address of one of its network interfaces, or a name that
//     resolves to at least one of those.
//
// The cheaper check comes first.  For an IP address that is the address
// itself (the interface addresses are read at most once a second); for a
// host name it is the socket, and the name is resolved, with
// TCP.Resolver, only where the port's socket exists.  A host that is not
// this machine is never dialed over rpal, and deciding never initialises
// rpal.
//
// When the rpal dial fails, the dialer connects over TCP instead.  It does
// so silently when nothing accepts on the service's socket (its server has
// just closed, or died and left the socket behind); on any other failure
// (the server's credentials refused by Local.Policy, the server refusing
// us, a handshake error or timeout, rpal unable to initialise) it first
// calls Fallback, if set, with the reason.
//
// A connection over rpal is a *Stream whose LocalAddr and RemoteAddr have
// the network "rpal" and the service name as their string; one over TCP is
// what TCP.DialContext returns.
//
// The zero value is ready to use.  A TCPDialer is safe for concurrent use.
// On systems other than Linux it always dials TCP.
type TCPDialer struct {
	// TCP dials the TCP connections and resolves host names.  Its Timeout
	// and Deadline bound the whole dial, the rpal attempt included, which
	// takes at most half of it: a local server that does not answer
	// leaves the TCP dial the other half.
	TCP net.Dialer

	// Local dials the rpal connections; its Policy checks the local
	// server's credentials.
	Local Dialer

	// Fallback, if not nil, is called with the address and the error when
	// the port's rpal service exists but could not be dialed for a reason
	// other than its absence, before the dialer falls back to TCP.
	Fallback func(address string, err error)
}

// Dial is DialContext with context.Background().
func (d *TCPDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialTimeout is DialContext with a context that expires after timeout (a
// zero timeout: none).  It has the signature of net.DialTimeout, and so
// satisfies Kitex's remote.Dialer (Kitex's gonet transport wants the
// connection wrapped with its read and write buffers: see docs/GO.md).
func (d *TCPDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return d.DialContext(ctx, network, address)
}

// DialAddr is DialContext(ctx, "tcp", address); as a method value its
// signature fits grpc.WithContextDialer.
func (d *TCPDialer) DialAddr(ctx context.Context, address string) (net.Conn, error) {
	return d.DialContext(ctx, "tcp", address)
}

// DialContext connects to the address on the named network: over rpal if
// the address is this machine's and its port is served here both ways,
// otherwise as TCP.DialContext does.  Networks other than "tcp", "tcp4"
// and "tcp6" go to TCP.DialContext unchanged.
func (d *TCPDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	// The rpal attempt and the TCP dial share one deadline, as the
	// resolution and connection steps of net.Dialer do.
	if d.TCP.Timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.TCP.Timeout)
		defer cancel()
	}
	if !d.TCP.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.TCP.Deadline)
		defer cancel()
	}
	if service, ok := d.localService(ctx, network, address); ok {
		if testHookDialLocal != nil {
			testHookDialLocal(service)
		}
		lctx, cancel := localShare(ctx)
		c, err := d.Local.DialContext(lctx, service)
		cancel()
		if err == nil {
			return c, nil
		}
		if d.Fallback != nil && !serviceAbsent(err) && ctx.Err() == nil {
			d.Fallback(address, err)
		}
	}
	return d.TCP.DialContext(ctx, network, address)
}

// localShare returns the context of an rpal attempt: with a deadline,
// it gets at most half of the time left, so that a server here that does
// not answer leaves the TCP dial the other half.
func localShare(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
}

// testHookDialLocal, if set, is called with the service name before each
// rpal attempt of a TCPDialer.
var testHookDialLocal func(service string)

// localService returns the rpal service to try for network and address,
// or false when the host is not this machine or the port's service has no
// socket here.  The cheaper check comes first: for an IP address, the
// address; for a name, the socket, so that a remote name is resolved here
// only when this machine serves its port too.
func (d *TCPDialer) localService(ctx context.Context, network, address string) (string, bool) {
	if checkOS() != nil {
		return "", false
	}
	var ipNet string
	switch network {
	case "tcp":
		ipNet = "ip"
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	default:
		return "", false
	}
	host, portName, err := net.SplitHostPort(address)
	if err != nil {
		return "", false
	}
	r := d.TCP.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	port, err := r.LookupPort(ctx, network, portName) // a number is parsed, not looked up
	if err != nil || port <= 0 {
		return "", false
	}
	service := tcpService(port)
	if host == "" {
		return service, serviceSocket(service)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !inFamily(ipNet, ip) || !localIP(ip) {
			return "", false
		}
		return service, serviceSocket(service)
	}
	if !serviceSocket(service) {
		return "", false
	}
	ips, err := r.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return "", false // the TCP dial reports it
	}
	if slices.ContainsFunc(ips, localIP) {
		return service, true
	}
	return "", false
}

// inFamily says whether a TCP dial on ipNet could use ip: Go dials an
// IPv4-mapped IPv6 address as IPv4.
func inFamily(ipNet string, ip netip.Addr) bool {
	switch ipNet {
	case "ip4":
		return ip.Unmap().Is4()
	case "ip6":
		return !ip.Unmap().Is4()
	}
	return true
}

// serviceSocket says whether a socket file exists for a service, without
// initialising rpal: a TCP dial to a port nobody here serves must not
// reserve the region and create an arena.
func serviceSocket(service string) bool {
	procMu.Lock()
	var dir string
	if proc != nil {
		dir = proc.rundir
	} else {
		cfg := DefaultConfig()
		dir = cfg.runtimeDir()
	}
	procMu.Unlock()
	fi, err := os.Stat(dir + "/" + service + ".sock")
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// serviceAbsent says whether an rpal dial failed because nothing accepts
// on the service's socket: it was removed since it was seen, or is left
// over from a process that died.
func serviceAbsent(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se) && se.Syscall == "connect" &&
		(errors.Is(se.Err, syscall.ENOENT) || errors.Is(se.Err, syscall.ECONNREFUSED))
}

// localIP says whether ip is an address of this machine.
func localIP(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	return ip.IsLoopback() || ip.IsUnspecified() || interfaceIPs.has(ip)
}

// interfaceIPs caches this machine's interface addresses for a second:
// reading them is a netlink dump, too slow to repeat on every dial, and an
// address added or removed is seen within that second.
var interfaceIPs ipCache

type ipCache struct {
	mu   sync.Mutex
	read time.Time
	ips  []netip.Addr
}

func (c *ipCache) has(ip netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.read.IsZero() || now.Sub(c.read) > time.Second {
		c.read = now
		c.ips = c.ips[:0]
		addrs, _ := net.InterfaceAddrs() // on error: none, and TCP for a second
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok {
					c.ips = append(c.ips, x.Unmap())
				}
			}
		}
	}
	return slices.Contains(c.ips, ip)
}
