// SPDX-License-Identifier: MIT

//go:build ignore

// gen writes the rpal wire-protocol test vectors (docs/PROTOCOL.md) into the
// directory given as its argument (default: the current directory).  It
// depends on nothing but the Go standard library and the protocol document,
// so it is a third, independent rendering of the layouts.
//
//	go run test/vectors/gen.go test/vectors
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

const (
	regionBase = 0x200000000000
	slotSize   = 64 << 30
	nrSlots    = 256
	arenaSize  = 64 << 20
)

var le = binary.LittleEndian

const wireVersion = 3 // PROTOCOL.md, first line

func slotBase(slot uint64) uint64 { return regionBase + slot*slotSize }

func hello(typ uint16, pid, slot uint32, arenaNonce, block, blockNonce uint64, service string) []byte {
	b := make([]byte, 128)
	le.PutUint32(b[0:], 0x4c415052) // "RPAL"
	le.PutUint16(b[4:], wireVersion)
	le.PutUint16(b[6:], typ)
	le.PutUint32(b[8:], 128)
	le.PutUint32(b[12:], 0) // features
	le.PutUint32(b[16:], pid)
	le.PutUint32(b[20:], slot)
	le.PutUint32(b[24:], nrSlots)
	le.PutUint32(b[28:], 0)
	le.PutUint64(b[32:], regionBase)
	le.PutUint64(b[40:], slotSize)
	le.PutUint64(b[48:], arenaSize)
	le.PutUint64(b[56:], arenaNonce)
	le.PutUint64(b[64:], block)
	le.PutUint64(b[72:], blockNonce)
	le.PutUint32(b[80:], 8) // ring_entries
	le.PutUint32(b[84:], 8) // ack_entries
	copy(b[88:127], service)
	return b
}

func refuse(errno int32, reason string) []byte {
	b := make([]byte, 128)
	le.PutUint32(b[0:], 0x4c415052)
	le.PutUint16(b[4:], wireVersion)
	le.PutUint16(b[6:], 3)
	le.PutUint32(b[8:], 128)
	le.PutUint32(b[12:], uint32(errno))
	copy(b[16:127], reason)
	return b
}

func arenaHdr(slot, pid uint32, nonce uint64) []byte {
	b := make([]byte, 48)
	le.PutUint32(b[0:], 0x414e5241) // "ARNA"
	le.PutUint16(b[4:], wireVersion)
	le.PutUint16(b[6:], 48)
	le.PutUint32(b[8:], slot)
	le.PutUint32(b[12:], pid)
	le.PutUint64(b[16:], arenaSize)
	le.PutUint64(b[24:], slotBase(uint64(slot)))
	le.PutUint64(b[32:], 4096)
	le.PutUint64(b[40:], nonce)
	return b
}

// block: the client's connection block (slot 3) after it published three
// messages (inline "hello", a 4096-byte buffer, 40 inline bytes 0..39),
// consumed two of the server's, acknowledged one server buffer, shut down
// writing, and advertised its third sleep waiting for data (on its
// doorbell, not the futex); it last sent from CPU 1.
func block() []byte {
	const ringEntries, ackEntries = 8, 8
	ringOff := 768
	ackOff := ringOff + 64*ringEntries
	b := make([]byte, ackOff+16*ackEntries)
	le.PutUint32(b[0:], 0x4b434c42) // "BLCK"
	le.PutUint16(b[4:], wireVersion)
	le.PutUint16(b[6:], 768)
	le.PutUint64(b[8:], 0x0123456789abcdef) // nonce (odd)
	le.PutUint32(b[16:], ringEntries)
	le.PutUint32(b[20:], ackEntries)
	le.PutUint32(b[24:], uint32(ringOff))
	le.PutUint32(b[28:], uint32(ackOff))
	le.PutUint32(b[32:], 1)            // state: SHUT_WR
	le.PutUint32(b[36:], 1)            // tx_cpu hint: CPU 1
	le.PutUint32(b[40:], 0xffffffff)   // rx_cpu hint: unknown
	le.PutUint64(b[128:], 3)           // tail
	le.PutUint64(b[256:], 2)           // rx_head
	le.PutUint64(b[384:], 1)           // ack_tail
	le.PutUint64(b[512:], 0)           // ack_head
	le.PutUint64(b[640:], 3*64|0x10|1) // waiting: 3 sleeps, RX, on the doorbell (RX_BELL, no RX_FUTEX)
	le.PutUint32(b[648:], 7)           // wake_seq: 7 futex wakes sent to the peer
	slot := func(i int) []byte { return b[ringOff+64*i : ringOff+64*(i+1)] }
	s := slot(0)
	le.PutUint32(s[0:], 1)
	le.PutUint32(s[4:], 5)
	le.PutUint32(s[8:], 1) // INLINE
	copy(s[24:], "hello")
	s = slot(1)
	le.PutUint32(s[0:], 2)
	le.PutUint32(s[4:], 4096)
	le.PutUint32(s[8:], 2) // BUF
	le.PutUint64(s[16:], slotBase(3)+0x10000)
	s = slot(2)
	le.PutUint32(s[0:], 3)
	le.PutUint32(s[4:], 40)
	le.PutUint32(s[8:], 1)
	for i := 0; i < 40; i++ {
		s[24+i] = byte(i)
	}
	a := b[ackOff : ackOff+16]
	le.PutUint32(a[0:], 1)
	le.PutUint64(a[8:], slotBase(5)+0x20000) // a server buffer
	return b
}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files := map[string][]byte{
		"hello.bin":     hello(1, 4242, 3, 0x1122334455667788, slotBase(3)+0x2000, 0x0123456789abcdef, "echo"),
		"welcome.bin":   hello(2, 4343, 5, 0x8877665544332211, slotBase(5)+0x1000, 0xfedcba9876543211, ""),
		"refuse.bin":    refuse(13, "peer pid 4242 uid 1000 gid 1000 is not allowed by policy"),
		"arena_hdr.bin": arenaHdr(3, 4242, 0x1122334455667788),
		"block.bin":     block(),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
