// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"
)

// watch notices the peer going away: a hang-up of the connection socket
// (the peer closed, or exited) or its pidfd becoming readable (it exited,
// even if a child still holds the socket).  docs/PROTOCOL.md §7.
func (c *Conn) watch() {
	c.watched = true
	go func() {
		// After Close it waits for the peer's hang-up or the linger
		// deadline, then frees the connection (see Close).
		defer func() {
			c.watchEnded.Store(true)
			if c.lingering.Load() {
				c.release()
			}
		}()
		// With room for every descriptor a message can carry: the
		// kernel would release what did not fit on this thread.
		var buf [hsSize]byte
		oob := make([]byte, unix.CmsgSpace(scmMaxFd*4))
		for {
			_, oobn, _, _, err := c.sock.ReadMsgUnix(buf[:], oob)
			if oobn > 0 {
				closeFds(rightsOf(oob[:oobn]))
			}
			// An empty message reads as io.EOF on a seqpacket
			// socket, as its end does: only a hang-up is the end.
			if errors.Is(err, io.EOF) && !c.sockShut() {
				continue
			}
			if err != nil {
				if !c.closed.Load() {
					c.markDead(false)
				}
				return
			}
		}
	}()
	raw, err := c.pidfd.SyscallConn()
	if err != nil {
		return
	}
	go func() {
		err := raw.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(pfd, 0)
			return n > 0
		})
		if err == nil {
			c.markDead(true)
		}
	}()
}

// sockShut reports whether the connection socket is shut for reading: the
// peer closed it or shut it down, or we did.
func (c *Conn) sockShut() bool {
	raw, err := c.sock.SyscallConn()
	if err != nil {
		return true
	}
	shut := true
	if raw.Control(func(fd uintptr) { shut = peerShut(int(fd)) }) != nil {
		return true
	}
	return shut
}
