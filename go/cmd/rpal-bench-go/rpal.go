// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"fmt"

	"rpal.dev/rpal"
)

// rpalLink is "rpal-go": rpal.Conn, written as a Go user would.  One copy:
// Send/Recv (a batch goes out with SendBatch, one wake-up check); zero
// copy: Alloc/WriteMsg and ReadMsg/Ack, as rpal-connected does with librpal.
type rpalLink struct {
	l    *rpal.Listener
	c    *rpal.Conn
	size int
	zc   bool

	tx      []byte   // one-copy: room for a batch
	pending [][]byte // one-copy: messages of this batch not sent yet
	rx      []byte
	buf     *rpal.Buffer  // zero copy: the buffer txBuf returned
	msg     *rpal.Message // zero copy: the message recv returned
}

// initRPAL sets the package's wait policy and spin budget from -wait and
// -spin-us.
func initRPAL(o *options) error {
	cfg := rpal.DefaultConfig()
	cfg.Spin = o.spin
	switch o.wait {
	case "adaptive":
		cfg.Wait = rpal.WaitAdaptive
	case "spin":
		cfg.Wait = rpal.WaitSpin
	case "sleep":
		cfg.Wait = rpal.WaitSleep
	default:
		return fmt.Errorf("unknown wait policy %q", o.wait)
	}
	return rpal.Init(&cfg)
}

func openRPAL(o *options) (link, error) {
	if err := initRPAL(o); err != nil {
		return nil, err
	}
	k := &rpalLink{size: o.size, zc: o.zerocopy, rx: make([]byte, o.size)}
	if !k.zc {
		k.tx = make([]byte, o.size*o.batch)
		k.pending = make([][]byte, 0, o.batch)
	}
	var err error
	if o.role == "server" {
		if k.l, err = rpal.Listen(o.addr); err != nil {
			return nil, err
		}
		if err := ready(o); err != nil {
			return nil, err
		}
		k.c, err = k.l.AcceptConn()
	} else {
		k.c, err = rpal.DialConn(o.addr)
	}
	if err != nil {
		return nil, err
	}
	return k, nil
}

func (k *rpalLink) txBuf() ([]byte, error) {
	if k.zc {
		b, err := rpal.Alloc(k.size)
		if err != nil {
			return nil, err
		}
		k.buf = b
		return b.Bytes(), nil
	}
	off := len(k.pending) * k.size
	return k.tx[off : off+k.size], nil
}

func (k *rpalLink) send(b []byte, more bool) error {
	if k.zc {
		if err := k.c.WriteMsg(k.buf); err != nil {
			k.buf.Free()
			return err
		}
		return nil
	}
	k.pending = append(k.pending, b)
	if more && len(k.pending) < cap(k.pending) {
		return nil
	}
	var err error
	if len(k.pending) == 1 {
		err = k.c.Send(k.pending[0])
	} else {
		_, err = k.c.SendBatch(k.pending)
	}
	k.pending = k.pending[:0]
	return err
}

func (k *rpalLink) recv() ([]byte, error) {
	if k.zc {
		m, err := k.c.ReadMsg()
		if err != nil {
			return nil, err
		}
		k.msg = m
		if m.Len() != k.size {
			m.Ack()
			return nil, errShort(m.Len(), k.size)
		}
		return m.Bytes(), nil
	}
	n, err := k.c.Recv(k.rx)
	if err != nil {
		return nil, err
	}
	if n != k.size {
		return nil, errShort(n, k.size)
	}
	return k.rx, nil
}

func (k *rpalLink) release() error {
	if k.zc && k.msg != nil {
		err := k.msg.Ack()
		k.msg = nil
		return err
	}
	return nil
}

func (k *rpalLink) counts() (uint64, uint64, bool) {
	ci := k.c.Info()
	return ci.Wakeups, ci.Sleeps, true
}

func (k *rpalLink) close() error {
	err := k.c.Close()
	if k.l != nil {
		if lerr := k.l.Close(); err == nil {
			err = lerr
		}
	}
	if err != nil {
		return fmt.Errorf("rpal: %w", err)
	}
	return nil
}
