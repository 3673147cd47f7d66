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
// briefly, then advertises that it sleeps and parks its goroutine in the Go
// netpoller on a doorbell socket; the peer makes a system call only to wake a
// side that said it sleeps.
//
// Conn is the message API (zero copy with Read/Message.Ack and
// Alloc/Write, one copy with Send/Recv); Stream and Listener are a
// net.Conn and a net.Listener over it, so net/http, gRPC and other
// stream users work unchanged.  See docs/GO.md.
package rpal
