// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// The shared fixtures of test/vectors (see its README), also checked by
// test/vectors/check_vectors.c against src/wire.h.
func vector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "test", "vectors", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const vecBase = 0x200000000000
const vecSlot = 64 << 30

func TestVectorHello(t *testing.T) {
	for _, tc := range []struct {
		file                      string
		typ                       uint16
		pid, slot                 uint32
		arenaNonce, block, bnonce uint64
		service                   string
	}{
		{"hello.bin", hsHello, 4242, 3, 0x1122334455667788, vecBase + 3*vecSlot + 0x2000, 0x0123456789abcdef, "echo"},
		{"welcome.bin", hsWelcome, 4343, 5, 0x8877665544332211, vecBase + 5*vecSlot + 0x1000, 0xfedcba9876543211, ""},
	} {
		b := vector(t, tc.file)
		h, err := checkShape(b, tc.typ)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		want := hello{
			Magic: helloMagic, Version: 3, Type: tc.typ, Size: 128, Pid: tc.pid, Slot: tc.slot, NrSlots: 256,
			RegionBase: vecBase, SlotSize: vecSlot, ArenaSize: 64 << 20, ArenaNonce: tc.arenaNonce,
			Block: tc.block, BlockNonce: tc.bnonce, RingEntries: 8, AckEntries: 8,
		}
		copy(want.Service[:], tc.service)
		if h != want {
			t.Fatalf("%s decodes to %+v, want %+v", tc.file, h, want)
		}
		if !bytes.Equal(want.marshal(), b) {
			t.Fatalf("%s: our encoding differs", tc.file)
		}
		// The geometry checks of §3 pass with the default configuration.
		p := &process{cfg: Config{RegionBase: vecBase, SlotSize: vecSlot, NrSlots: 256}, slot: 9}
		if err := p.checkPeer(&h); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		// A HELLO is not a WELCOME.
		other := uint16(hsWelcome)
		if tc.typ == hsWelcome {
			other = hsHello
		}
		if _, err := checkShape(b, other); err == nil {
			t.Fatalf("%s accepted as type %d", tc.file, other)
		}
		if _, err := checkShape(b[:127], tc.typ); err == nil {
			t.Fatalf("%s: a 127-byte hello accepted", tc.file)
		}
	}
}

func TestVectorRefuse(t *testing.T) {
	b := vector(t, "refuse.bin")
	r, ok := parseRefuse(b)
	const reason = "peer pid 4242 uid 1000 gid 1000 is not allowed by policy"
	if !ok || r.Errno != 13 || r.Reason != reason {
		t.Fatalf("refuse decodes to %+v %v", r, ok)
	}
	if !bytes.Equal((&refuse{Errno: 13, Reason: reason}).marshal(), b) {
		t.Fatal("our REFUSE encoding differs")
	}
}

func TestVectorArenaHeader(t *testing.T) {
	b := vector(t, "arena_hdr.bin")
	le := binary.LittleEndian
	if len(b) != arenaHdrSize || le.Uint32(b[ahMagic:]) != arenaMagic || le.Uint16(b[ahVersion:]) != 3 ||
		le.Uint16(b[ahHdrSize:]) != 48 || le.Uint32(b[ahSlot:]) != 3 || le.Uint32(b[ahPid:]) != 4242 ||
		le.Uint64(b[ahArenaSize:]) != 64<<20 || le.Uint64(b[ahBase:]) != vecBase+3*vecSlot ||
		le.Uint64(b[ahHeapOff:]) != 4096 || le.Uint64(b[ahNonce:]) != 0x1122334455667788 {
		t.Fatalf("arena header fixture does not decode as documented: % x", b)
	}
}

// The block fixture, read by our consumer as the peer's block: three
// messages, then empty; its acks, state and waiting word as documented.
func TestVectorBlock(t *testing.T) {
	b := vector(t, "block.bin")
	if uint64(len(b)) != blockBytes(8, 8) {
		t.Fatalf("block.bin is %d bytes, want %d", len(b), blockBytes(8, 8))
	}
	words := make([]uint64, len(b)/8) // 8-byte aligned for the atomics
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(mem, b)
	pb := unsafe.Pointer(&words[0])
	h := hello{BlockNonce: 0x0123456789abcdef, RingEntries: 8, AckEntries: 8}
	if err := checkBlock(pb, &h); err != nil {
		t.Fatal(err)
	}
	peerBase := uint64(vecBase + 3*vecSlot)
	c := &Conn{
		p:    &process{},
		peer: &peerMap{addr: peerBase, size: 64 << 20}, pb: pb,
		pring: unsafe.Add(pb, blockHdrSize), pringMask: 7,
		packs: unsafe.Add(pb, blockHdrSize+8*slotSize), packMask: 7,
		pnonce: h.BlockNonce, bufLo: peerBase + pageSize, bufHi: peerBase + 64<<20,
		me: unsafe.Pointer(&make([]uint64, blockHdrSize/8)[0]),
	}
	c.st.Store(new(statEntry))
	var s slotCopy
	ok, err := c.peek(&s)
	if !ok || err != nil || s.flags != slotInline || string(s.data[:s.n]) != "hello" {
		t.Fatalf("slot 0: %v %v %+v", ok, err, s)
	}
	c.consume(s.n)
	ok, err = c.peek(&s)
	if !ok || err != nil || s.flags != slotBuf || s.n != 4096 || s.addr != peerBase+0x10000 {
		t.Fatalf("slot 1: %v %v %+v", ok, err, s)
	}
	c.consume(s.n)
	ok, err = c.peek(&s)
	if !ok || err != nil || s.flags != slotInline || s.n != 40 || s.data[39] != 39 {
		t.Fatalf("slot 2: %v %v %+v", ok, err, s)
	}
	c.consume(s.n)
	if ok, err = c.peek(&s); ok || err != nil || c.readable() {
		t.Fatalf("slot 3 should read as empty: %v %v", ok, err)
	}
	if c.updatePeerState() != stateShutWr {
		t.Fatalf("state %d, want SHUT_WR", c.updatePeerState())
	}
	le := binary.LittleEndian
	if le.Uint64(b[bTail:]) != 3 || le.Uint64(b[bRxHead:]) != 2 || le.Uint64(b[bAckTail:]) != 1 ||
		le.Uint64(b[bAckHead:]) != 0 || le.Uint64(b[bWaiting:]) != 3*waitEpoch|waitRXBell|waitRX ||
		le.Uint32(b[bTxCPU:]) != 1 || le.Uint32(b[bRxCPU:]) != 0xffffffff || le.Uint32(b[bWakeSeq:]) != 7 {
		t.Fatal("block indices do not decode as documented")
	}
	// Its ack ring names one buffer of the slot-5 server.
	a := b[blockHdrSize+8*slotSize:]
	if le.Uint32(a[aSeq:]) != 1 || le.Uint64(a[aAddr:]) != vecBase+5*vecSlot+0x20000 {
		t.Fatal("ack entry 0 does not decode as documented")
	}
	// The same ring with the BUF pointer moved so that its payload ends one
	// byte past the arena: a violation.
	le.PutUint64(mem[blockHdrSize+slotSize+sAddr:], peerBase+64<<20-4095)
	c.rxHead = 1
	if _, err := c.peek(&s); err == nil {
		t.Fatal("out-of-range BUF accepted")
	} else {
		t.Log(err)
	}
}
