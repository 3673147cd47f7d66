// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// Listener accepts rpal connections on a service name, as byte streams
// (Accept) or message connections (AcceptConn).  Handshakes run
// concurrently: a client that stalls is dropped after the handshake timeout
// without delaying others.  What clients can make a listener hold is
// bounded, as it is for a socket's backlog: at most 64 handshakes run at
// once (when all are taken and another client waits, the oldest that has
// not spoken yet is dropped to make room), and at most 16 connections wait
// for Accept; a client that finds them all waiting is refused (EAGAIN) at
// half the handshake timeout.  The rest wait in the kernel's backlog.
type Listener struct {
	p       *process
	service string
	ln      *net.UnixListener
	lock    *os.File
	policy  *Policy
	conns   chan *Conn
	ready   chan struct{} // a token per connection made and not yet accepted
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	path    string // the socket's, removed by Close where it is a file
	st      *statEntry

	mu      sync.Mutex
	refused []error
	running map[*handshake]struct{} // under mu
	closing bool                    // Close ends every handshake (under mu)
	exited  chan struct{}           // a token when a handshake ends: room for the next
}

// The bounds of the Listener's documentation, which gives their values:
// change both together.
const (
	maxHandshakes = 64
	maxReady      = 16
)

// handshake is one client's, while it runs.
type handshake struct {
	uc      *net.UnixConn
	start   time.Time
	spoke   bool // its HELLO came, or it was dropped (under Listener.mu)
	dropped bool // dropped to make room, its goroutine not ended yet (under Listener.mu)
}

// A Listener is what net.Listener users (http.Serve, grpc.Server.Serve)
// take.
var _ net.Listener = (*Listener)(nil)

// ListenConfig holds options for listening.
type ListenConfig struct {
	// Policy checks each client's credentials; nil means same uid.
	Policy *Policy

	// TCP holds the options of the TCP socket that ListenTCP opens.
	TCP net.ListenConfig
}

// Listen serves a service name with the default policy (same uid).
func Listen(service string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(service)
}

// Listen serves a service name: "<runtime dir>/<name>.sock", a path
// starting with '/', or an abstract name starting with '@'.  It fails with
// EADDRINUSE while a live process serves the name (it holds the lock file,
// or its socket at the path accepts connections); a stale socket left by a
// dead one (a connection to it is refused) is removed, and anything else in
// the way (a file, a directory, a lock file that is not an empty one) is
// left alone: Listen then fails with EEXIST.
func (lc *ListenConfig) Listen(service string) (*Listener, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	l, err := lc.listen(service)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rpal", Addr: Addr{service}, Err: err}
	}
	return l, nil
}

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		if !l.roomForHandshake() {
			return
		}
		uc, err := l.ln.AcceptUnix()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and the like
			continue
		}
		h := &handshake{uc: uc, start: time.Now()}
		// Here, not in the goroutine: a drop's earlier deadline must not
		// be undone by a goroutine that had not started yet.
		_ = uc.SetDeadline(h.start.Add(l.p.cfg.HandshakeTimeout))
		l.mu.Lock()
		l.running[h] = struct{}{}
		if l.closing {
			_ = uc.SetDeadline(time.Unix(1, 0))
		}
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.serverHandshake(h)
			if err != nil {
				l.st.rx.violations.Add(1)
			} else {
				l.st.rx.msgs.Add(1)
			}
			l.mu.Lock()
			delete(l.running, h)
			if err != nil && len(l.refused) < 64 {
				l.refused = append(l.refused, err)
			}
			l.mu.Unlock()
			select {
			case l.exited <- struct{}{}:
			default:
			}
			if err != nil {
				closePeerConn(uc) // more messages may wait there, with descriptors
				return
			}
			l.conns <- c // never blocks: c holds a ready token
		}()
	}
}

// roomForHandshake returns once fewer than maxHandshakes run; false once
// the listener is closed.  While all are taken and a client waits in the
// backlog, the oldest client that has sent nothing is dropped to make room,
// as rpal_accept does: a flood of clients that never speak cannot hold the
// listener, and one that has spoken is never dropped for it.  It wakes as
// soon as a handshake ends, so a client behind a thousand silent ones is
// reached in a few milliseconds, not one poll interval per silent one; the
// poll remains for a client that arrives while none ends.
func (l *Listener) roomForHandshake() bool {
	var poll *time.Timer
	for {
		l.mu.Lock()
		n := len(l.running)
		if n >= maxHandshakes && backlogWaiting(l.ln) {
			var silent *handshake
			inFlight := false
			for h := range l.running {
				if h.spoke {
					inFlight = inFlight || h.dropped
					continue
				}
				if (silent == nil || h.start.Before(silent.start)) && !hasMessage(h.uc) {
					silent = h
				}
			}
			// One drop at a time, for the client waiting: its
			// goroutine ends at once and wakes us to accept it.
			if silent != nil && !inFlight {
				// Its read fails at once; its goroutine refuses it
				// and empties the socket as for any stalled client.
				_ = silent.uc.SetReadDeadline(time.Unix(1, 0))
				silent.spoke, silent.dropped = true, true // not picked again
			}
		}
		l.mu.Unlock()
		if n < maxHandshakes {
			if poll != nil {
				poll.Stop()
			}
			return true
		}
		if poll == nil {
			poll = time.NewTimer(time.Millisecond)
		} else {
			poll.Reset(time.Millisecond)
		}
		select {
		case <-l.done:
			poll.Stop()
			return false
		case <-l.exited:
		case <-poll.C:
		}
	}
}

// spoke notes that h's HELLO came: it is no longer dropped to make room.
func (l *Listener) spoke(h *handshake) {
	l.mu.Lock()
	h.spoke = true
	l.mu.Unlock()
}

// waitReady takes a ready token for a connection about to be made, waiting
// while maxReady made ones wait for Accept, until deadline (half the
// handshake timeout: a refusal must reach the client before it gives up).
func (l *Listener) waitReady(deadline time.Time) bool {
	select {
	case l.ready <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.ready <- struct{}{}:
		return true
	case <-t.C:
	case <-l.done:
	}
	return false
}

// AcceptConn waits for the next connection and returns it with its message
// API, as DialConn does on the client's side.
func (l *Listener) AcceptConn() (*Conn, error) {
	select {
	case c := <-l.conns:
		<-l.ready
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rpal", Addr: Addr{l.service}, Err: net.ErrClosed}
	}
}

// Accept waits for the next connection and returns it as a byte stream (a
// *Stream), as Dial does on the client's side; with it Listener is a
// net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptConn()
	if err != nil {
		return nil, err
	}
	return NewStream(c), nil
}

// isClosed says whether Close has begun.
func (l *Listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Refused returns (and forgets) the errors of handshakes refused since the
// last call: at most 64 are kept.
func (l *Listener) Refused() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.refused
	l.refused = nil
	return r
}

// Close stops listening; connections already accepted stay open.
func (l *Listener) Close() error {
	first := false
	l.once.Do(func() {
		first = true
		close(l.done)
		// Handshakes under way fail at once: a client that never
		// speaks would otherwise hold Close for the handshake timeout.
		l.mu.Lock()
		l.closing = true
		for h := range l.running {
			_ = h.uc.SetDeadline(time.Unix(1, 0))
		}
		l.mu.Unlock()
		// Clients not yet accepted may have sent messages, and
		// descriptors with them, which closing the socket would
		// release here: no new ones once the path is gone.
		if l.lock != nil { // a file, not an abstract name
			l.releaseName(true)
		}
		drainBacklog(l.ln)
		l.ln.Close()
		l.wg.Wait()
		l.p.stat.close(l.st)
		for {
			select {
			case c := <-l.conns:
				c.Close()
				continue
			default:
			}
			break
		}
		if l.lock != nil {
			l.lock.Close()
		}
	})
	if !first {
		return &net.OpError{Op: "close", Net: "rpal", Addr: Addr{l.service}, Err: net.ErrClosed}
	}
	return nil
}

// Addr returns the service name.
func (l *Listener) Addr() net.Addr { return Addr{l.service} }
