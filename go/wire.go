// SPDX-License-Identifier: MIT

package rpal

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// Wire constants from docs/PROTOCOL.md (mirrored from src/wire.h).
const (
	WireVersion = 3

	helloMagic = 0x4c415052 // "RPAL"
	arenaMagic = 0x414e5241 // "ARNA"
	blockMagic = 0x4b434c42 // "BLCK"

	pageSize  = 4096
	cacheLine = 64

	arenaHdrSize = 48
	blockHdrSize = 768 // struct rpal_block: 6 guarded lines of 128 bytes
	slotSize     = 64  // struct rpal_slot
	ackSize      = 16  // struct rpal_ack
	hsSize       = 128 // struct rpal_hello and struct rpal_refuse

	// InlineMax is the largest payload carried inside a ring slot.
	InlineMax = 40

	slotInline = 0x1
	slotBuf    = 0x2

	stateShutWr = 0x1
	stateClosed = 0x2

	waitRX      = 0x1
	waitTX      = 0x2
	waitRXFutex = 0x4 // the RX sleeper waits on the waker's wake_seq
	waitTXFutex = 0x8
	waitRXBell  = 0x10 // the RX sleeper waits on the doorbell (rung even beside the FUTEX bit)
	waitTXBell  = 0x20
	waitEpoch   = 0x40 // one sleep

	hsHello   = 1
	hsWelcome = 2
	hsRefuse  = 3
)

// Offsets inside the arena header.
const (
	ahMagic     = 0
	ahVersion   = 4
	ahHdrSize   = 6
	ahSlot      = 8
	ahPid       = 12
	ahArenaSize = 16
	ahBase      = 24
	ahHeapOff   = 32
	ahNonce     = 40
)

// Offsets inside a connection block.
const (
	bMagic       = 0
	bVersion     = 4
	bHdrSize     = 6
	bNonce       = 8
	bRingEntries = 16
	bAckEntries  = 20
	bRingOff     = 24
	bAckOff      = 28
	bState       = 32
	bTxCPU       = 36 // hint: CPU of the owner's sending thread, 0xffffffff unknown
	bRxCPU       = 40 // hint: CPU of the owner's receiving thread
	bTail        = 128
	bRxHead      = 256
	bAckTail     = 384
	bAckHead     = 512
	bWaiting     = 640
	bWakeSeq     = 648 // bumped before each FUTEX_WAKE we send the peer
)

// Offsets inside a data-ring slot and an ack-ring entry.
const (
	sSeq   = 0
	sLen   = 4
	sFlags = 8
	sAddr  = 16
	sData  = 24

	aSeq  = 0
	aAddr = 8
)

// blockBytes is the size of a connection block with its two rings.
func blockBytes(ringEntries, ackEntries uint32) uint64 {
	return blockHdrSize + uint64(ringEntries)*slotSize + uint64(ackEntries)*ackSize
}

// hello is a decoded HELLO or WELCOME message (docs/PROTOCOL.md §3).
type hello struct {
	Magic       uint32
	Version     uint16
	Type        uint16
	Size        uint32
	Features    uint32
	Pid         uint32
	Slot        uint32
	NrSlots     uint32
	Reserved0   uint32
	RegionBase  uint64
	SlotSize    uint64
	ArenaSize   uint64
	ArenaNonce  uint64
	Block       uint64
	BlockNonce  uint64
	RingEntries uint32
	AckEntries  uint32
	Service     [40]byte
}

func (h *hello) marshal() []byte {
	b := make([]byte, hsSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Magic)
	le.PutUint16(b[4:], h.Version)
	le.PutUint16(b[6:], h.Type)
	le.PutUint32(b[8:], h.Size)
	le.PutUint32(b[12:], h.Features)
	le.PutUint32(b[16:], h.Pid)
	le.PutUint32(b[20:], h.Slot)
	le.PutUint32(b[24:], h.NrSlots)
	le.PutUint32(b[28:], h.Reserved0)
	le.PutUint64(b[32:], h.RegionBase)
	le.PutUint64(b[40:], h.SlotSize)
	le.PutUint64(b[48:], h.ArenaSize)
	le.PutUint64(b[56:], h.ArenaNonce)
	le.PutUint64(b[64:], h.Block)
	le.PutUint64(b[72:], h.BlockNonce)
	le.PutUint32(b[80:], h.RingEntries)
	le.PutUint32(b[84:], h.AckEntries)
	copy(b[88:128], h.Service[:])
	return b
}

// unmarshalHello decodes b without checking it; b must be 128 bytes.
func unmarshalHello(b []byte) hello {
	le := binary.LittleEndian
	var h hello
	h.Magic = le.Uint32(b[0:])
	h.Version = le.Uint16(b[4:])
	h.Type = le.Uint16(b[6:])
	h.Size = le.Uint32(b[8:])
	h.Features = le.Uint32(b[12:])
	h.Pid = le.Uint32(b[16:])
	h.Slot = le.Uint32(b[20:])
	h.NrSlots = le.Uint32(b[24:])
	h.Reserved0 = le.Uint32(b[28:])
	h.RegionBase = le.Uint64(b[32:])
	h.SlotSize = le.Uint64(b[40:])
	h.ArenaSize = le.Uint64(b[48:])
	h.ArenaNonce = le.Uint64(b[56:])
	h.Block = le.Uint64(b[64:])
	h.BlockNonce = le.Uint64(b[72:])
	h.RingEntries = le.Uint32(b[80:])
	h.AckEntries = le.Uint32(b[84:])
	copy(h.Service[:], b[88:128])
	return h
}

// checkShape checks magic, version, type and size of a received handshake
// datagram of n bytes, as hello_check() does.
func checkShape(b []byte, want uint16) (hello, error) {
	if len(b) < 8 {
		return hello{}, fmt.Errorf("handshake message of %d bytes is too short", len(b))
	}
	var full [hsSize]byte
	copy(full[:], b)
	h := unmarshalHello(full[:])
	if h.Magic != helloMagic {
		return h, fmt.Errorf("bad magic %#x (not an rpal peer)", h.Magic)
	}
	if h.Version != WireVersion {
		return h, fmt.Errorf("peer speaks wire version %d, we speak %d", h.Version, WireVersion)
	}
	if h.Type != want {
		return h, fmt.Errorf("expected handshake message type %d, got %d", want, h.Type)
	}
	if len(b) != hsSize || h.Size != hsSize {
		return h, fmt.Errorf("hello of %d bytes (says %d), expected %d", len(b), h.Size, hsSize)
	}
	return h, nil
}

// refuse is a decoded REFUSE message.
type refuse struct {
	Errno  int32
	Reason string
}

func (r *refuse) marshal() []byte {
	b := make([]byte, hsSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], helloMagic)
	le.PutUint16(b[4:], WireVersion)
	le.PutUint16(b[6:], hsRefuse)
	le.PutUint32(b[8:], hsSize)
	le.PutUint32(b[12:], uint32(r.Errno))
	reason := r.Reason
	if len(reason) > 111 {
		reason = reason[:111]
	}
	copy(b[16:127], reason)
	return b
}

// parseRefuse decodes a REFUSE; ok is false if b is not one.  The errno is
// clamped to 1..4095 (else EPROTO), as refuse_parse() does.
func parseRefuse(b []byte) (r refuse, ok bool) {
	le := binary.LittleEndian
	if len(b) != hsSize || le.Uint32(b[0:]) != helloMagic || le.Uint16(b[6:]) != hsRefuse || le.Uint32(b[8:]) != hsSize {
		return r, false
	}
	r.Errno = int32(le.Uint32(b[12:]))
	if r.Errno <= 0 || r.Errno >= 4096 {
		r.Errno = eproto
	}
	reason := append([]byte(nil), b[16:127]...)
	for i, c := range reason {
		if c == 0 {
			reason = reason[:i]
			break
		}
		// A peer's text goes into our errors and logs: printable ASCII
		// only, so that it cannot drive a terminal.
		if c < 0x20 || c > 0x7e {
			reason[i] = '?'
		}
	}
	r.Reason = string(reason)
	return r, true
}

func pow2(x uint64) bool { return x != 0 && x&(x-1) == 0 }

const eproto = int32(syscall.EPROTO)
