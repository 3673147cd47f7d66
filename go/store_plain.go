// SPDX-License-Identifier: MIT

//go:build amd64 && !race

package rpal

// storeRelease stores v at p, ordered after every store before it.  On
// amd64 every store is a release in the hardware, and the compiler keeps
// stores in program order, so a plain MOV does; sync/atomic's Store is an
// XCHG, a full barrier that drains the store buffer, and four of those per
// message cost more than the rest of a send.  The full barrier that a
// waiter's check needs (W1) is made once per send or receive call instead
// (see notifyRX and notifyTX).
func storeRelease32(p *uint32, v uint32) { *p = v }
func storeRelease64(p *uint64, v uint64) { *p = v }
