// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"net"
)

// unixLink is "go-uds": a Unix stream socket through Go's netpoller (a
// goroutine blocked in Read is parked, its thread waits in epoll_wait), as
// cli/stream.c frames it for the C baselines: a read takes whatever is
// there, a batch goes out in one write.
type unixLink struct {
	c    *net.UnixConn
	size int

	rbuf         []byte
	rhead, rtail int
	wbuf         []byte
	wlen         int
}

func openUnix(o *options) (link, error) {
	addr := &net.UnixAddr{Name: o.addr, Net: "unix"}
	k := &unixLink{size: o.size, rbuf: make([]byte, max(o.size*(o.batch+1), 65536)), wbuf: make([]byte, o.size*o.batch)}
	if o.role == "server" {
		l, err := net.ListenUnix("unix", addr)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		if err := ready(o); err != nil {
			return nil, err
		}
		if k.c, err = l.AcceptUnix(); err != nil {
			return nil, err
		}
	} else {
		var err error
		if k.c, err = net.DialUnix("unix", nil, addr); err != nil {
			return nil, err
		}
	}
	// Large messages: let one fit in the socket buffer, as tr_uds.c does.
	if o.size > 65536 {
		_ = k.c.SetReadBuffer(2 * o.size)
		_ = k.c.SetWriteBuffer(2 * o.size)
	}
	return k, nil
}

func (k *unixLink) txBuf() ([]byte, error) { return k.wbuf[k.wlen : k.wlen+k.size], nil }

func (k *unixLink) send(b []byte, more bool) error {
	k.wlen += k.size
	if more && k.wlen+k.size <= len(k.wbuf) {
		return nil
	}
	_, err := k.c.Write(k.wbuf[:k.wlen]) // loops until all is written
	k.wlen = 0
	return err
}

func (k *unixLink) recv() ([]byte, error) {
	for k.rtail-k.rhead < k.size {
		if len(k.rbuf)-k.rtail < k.size {
			k.rtail = copy(k.rbuf, k.rbuf[k.rhead:k.rtail])
			k.rhead = 0
		}
		n, err := k.c.Read(k.rbuf[k.rtail:])
		if err != nil {
			return nil, err
		}
		k.rtail += n
	}
	return k.rbuf[k.rhead : k.rhead+k.size], nil
}

func (k *unixLink) release() error {
	k.rhead += k.size
	if k.rhead == k.rtail {
		k.rhead, k.rtail = 0, 0
	}
	return nil
}

func (k *unixLink) counts() (uint64, uint64, bool) { return 0, 0, false }
func (k *unixLink) close() error                   { return k.c.Close() }
