// SPDX-License-Identifier: MIT

// Package rpal is a pure-Go implementation of rpal connected mode: fast
// messaging between processes on one Linux machine through shared memory,
// wire-compatible with the C library librpal (docs/PROTOCOL.md).
//
// Each process reserves the same region of address space, owns one slot of
// it and keeps its arena, a sealed memfd, at that slot.  A connection's peer
// maps the arena read-only at the same address, so a pointer into it means
// the same thing in both processes.  Messages move through single-producer
// rings, each written only by its owner: a payload of up to 40 bytes rides
// in the ring slot, a larger one stays in a buffer of the sender's arena
// that the receiver reads in place and acknowledges.  A waiting side spins
// briefly, then advertises that it sleeps: on the peer's futex word (a few
// threads of a process, for up to 10 ms each), or with its goroutine parked
// in the Go netpoller on a doorbell socket; the peer makes a system call
// only to wake a side that said it sleeps.
//
// Every connection comes in two forms, on either side:
//
//   - a byte stream, a net.Conn (Stream): Dial, Dialer.DialContext and
//     Listener.Accept return one, and Listener is a net.Listener, so
//     net/http, gRPC and other stream users work unchanged;
//   - messages that keep their boundaries (*Conn): DialConn,
//     Dialer.DialConnContext and Listener.AcceptConn return one.  Send and
//     Recv copy once; Alloc and WriteMsg send without copying, ReadMsg reads
//     in place until Message.Ack.  NewStream turns a *Conn into a Stream.
//
// One address can serve local and remote clients: ListenTCP listens on a
// TCP port and, for clients on this machine, on the rpal service
// "tcp:<port>", both through one net.Listener; a TCPDialer dials
// "host:port" over rpal when the host is this machine and the port is
// served that way, and over TCP otherwise.  A service can then move
// between hosts with no change to its clients: TCP (under gRPC, Kitex or
// net/http) carries calls between machines, rpal the calls within one.
//
// The package builds on every system but works on Linux only: elsewhere
// each entry point returns an error wrapping errors.ErrUnsupported, except
// ListenTCP and TCPDialer, which use TCP alone.  See docs/GO.md.
package rpal
