// SPDX-License-Identifier: MIT

package rpal

import (
	"context"
	"net"
)

// Dialer holds options for connecting to a service.  Each way to dial comes
// in two forms, as Listener's Accept and AcceptConn do: Dial and
// DialContext return the connection as a byte stream (a net.Conn, the
// *Stream that NewStream makes), DialConn and DialConnContext return it
// with its message API (*Conn).
type Dialer struct {
	// Policy checks the server's credentials; nil means same uid.
	Policy *Policy
}

// Dial connects to a service with the default policy (same uid) and
// returns a byte stream (a *Stream).  See Dialer.DialConnContext.
func Dial(service string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), service)
}

// DialConn connects to a service with the default policy (same uid) and
// returns the connection with its message API.  See
// Dialer.DialConnContext.
func DialConn(service string) (*Conn, error) {
	var d Dialer
	return d.DialConnContext(context.Background(), service)
}

// Dial is DialContext with context.Background().
func (d *Dialer) Dial(service string) (net.Conn, error) {
	return d.DialContext(context.Background(), service)
}

// DialContext connects to a service and returns a byte stream (a *Stream);
// as a method value its signature fits grpc.WithContextDialer.  Name the
// service in the gRPC target as "passthrough:///<service>": the default
// resolver, dns, would look the name up and fail with "produced zero
// addresses" before the dialer is called.  See DialConnContext.
func (d *Dialer) DialContext(ctx context.Context, service string) (net.Conn, error) {
	c, err := d.DialConnContext(ctx, service)
	if err != nil {
		return nil, err
	}
	return NewStream(c), nil
}

// DialConn is DialConnContext with context.Background().
func (d *Dialer) DialConn(service string) (*Conn, error) {
	return d.DialConnContext(context.Background(), service)
}

// DialConnContext connects to a service and returns the connection with
// its message API: it checks the server's credentials, exchanges arenas
// and doorbells, and maps the server's arena read-only.  Errors are
// *net.OpError values that unwrap to an errno: ENOENT/ECONNREFUSED (no
// such service), EACCES (credentials refused by either side), EPROTO (the
// peer spoke garbage), ETIMEDOUT (no answer within the handshake
// timeout), EADDRINUSE (the peer claims our slot), EAGAIN (the server's
// connections waiting for Accept are at their bound), ENOMEM (no room
// for the connection in our arena or the server's), EBUSY (every slot of
// the region is taken: rpal could not initialise, an *InitError); the
// context's end unwraps to context.Canceled or DeadlineExceeded.
func (d *Dialer) DialConnContext(ctx context.Context, service string) (*Conn, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	c, err := d.dial(ctx, service)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rpal", Addr: Addr{service}, Err: err}
	}
	return c, nil
}
