// SPDX-License-Identifier: MIT

package rpal

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

// Policy says who may connect: a peer is accepted if AllowSameUID is set and
// its uid equals ours, or its uid is in UIDs, or its gid is in GIDs.  A nil
// *Policy means same uid only.  Both ends check the other.
type Policy struct {
	AllowSameUID bool
	UIDs         []uint32
	GIDs         []uint32
}

// allows checks a peer's credentials (SO_PEERCRED) against the policy.
func (p *Policy) allows(uid, gid uint32) bool {
	if (p == nil || p.AllowSameUID) && int(uid) == os.Geteuid() {
		return true
	}
	if p == nil {
		return false
	}
	for _, u := range p.UIDs {
		if u == uid {
			return true
		}
	}
	for _, g := range p.GIDs {
		if g == gid {
			return true
		}
	}
	return false
}

// socketPath maps a service name to its socket address and lock path
// (docs/PROTOCOL.md §2).
func (p *process) socketPath(service string) (addr, lock string, err error) {
	switch {
	case service == "":
		return "", "", fmt.Errorf("empty service name: %w", syscall.EINVAL)
	case service[0] == '@':
		if len(service) > 108 {
			return "", "", fmt.Errorf("service name %s is too long: %w", service, syscall.ENAMETOOLONG)
		}
		return service, "", nil
	case strings.IndexByte(service, 0) >= 0:
		// The kernel ends a socket path at its first NUL: "a\x00b" would
		// reach the socket "a" (abstract names, above, may hold any byte).
		return "", "", fmt.Errorf("service name %q contains a NUL byte: %w", service, syscall.EINVAL)
	case service[0] == '/':
		addr = service
	case strings.Contains(service, "/"):
		return "", "", fmt.Errorf("service name %s contains '/' (use an absolute path): %w", service, syscall.EINVAL)
	default:
		addr = p.rundir + "/" + service + ".sock"
	}
	if len(addr) >= 108 {
		return "", "", fmt.Errorf("socket path for service %s is too long: %w", service, syscall.ENAMETOOLONG)
	}
	return addr, addr + ".lock", nil
}

// side is our half of a connection being set up: a fresh block and doorbell.
type side struct {
	blockAddr uint64
	block     unsafe.Pointer
	nonce     uint64
	ringEnt   uint32
	bell      int // our end of the doorbell socket pair: we sleep on it
	ringEnd   int // the other end: sent in our hello, then closed
	cpu       uint32
}

// noCPU is the "unknown" CPU hint.
const noCPU = 0xffffffff

func (p *process) helloFor(typ uint16, s *side, service string) hello {
	h := hello{
		Magic: helloMagic, Version: WireVersion, Type: typ, Size: hsSize,
		Pid: uint32(os.Getpid()), Slot: p.slot, NrSlots: p.cfg.NrSlots,
		RegionBase: p.cfg.RegionBase, SlotSize: p.cfg.SlotSize, ArenaSize: p.cfg.ArenaSize,
		ArenaNonce: p.nonce, Block: s.blockAddr, BlockNonce: s.nonce,
		RingEntries: s.ringEnt, AckEntries: s.ringEnt,
	}
	copy(h.Service[:39], service)
	return h
}

// checkPeer checks a hello's geometry against our address map
// (hello_check_peer()); nothing is mapped yet.
func (p *process) checkPeer(h *hello) error {
	c := &p.cfg
	if h.RegionBase != c.RegionBase || h.SlotSize != c.SlotSize || h.NrSlots != c.NrSlots {
		return refused(syscall.EPROTO, "peer's region %#x x %d x %#x differs from ours %#x x %d x %#x",
			h.RegionBase, h.NrSlots, h.SlotSize, c.RegionBase, c.NrSlots, c.SlotSize)
	}
	if h.Slot >= c.NrSlots {
		return refused(syscall.EPROTO, "peer slot %d out of range", h.Slot)
	}
	if h.Slot == p.slot && int(h.Pid) != os.Getpid() {
		return refused(syscall.EADDRINUSE, "peer claims our own slot %d", h.Slot)
	}
	if h.ArenaSize < 1<<20 || h.ArenaSize > c.SlotSize || h.ArenaSize%pageSize != 0 {
		return refused(syscall.EPROTO, "peer arena size %#x invalid", h.ArenaSize)
	}
	for _, e := range []uint32{h.RingEntries, h.AckEntries} {
		if !pow2(uint64(e)) || e < 8 || e > 65536 {
			return refused(syscall.EPROTO, "peer ring or ack entries %d invalid", e)
		}
	}
	base := h.RegionBase + uint64(h.Slot)*h.SlotSize
	bsize := blockBytes(h.RingEntries, h.AckEntries)
	if h.Block%cacheLine != 0 || h.Block < base+pageSize || h.Block >= base+h.ArenaSize || bsize > base+h.ArenaSize-h.Block {
		return refused(syscall.EPROTO, "peer block %#x is not inside its arena", h.Block)
	}
	return nil
}

// checkMapped says whether the peer's mapped arena, pm, holds the whole
// block its hello names: checkPeer placed it by the hello's arena size,
// and the mapping may be an earlier one of the same peer (mapPeer).
func checkMapped(h *hello, pm *peerMap) error {
	if h.Block < pm.addr+pageSize || h.Block >= pm.addr+pm.size || blockBytes(h.RingEntries, h.AckEntries) > pm.addr+pm.size-h.Block {
		return refused(syscall.EPROTO, "peer block %#x is not inside its mapped arena", h.Block)
	}
	return nil
}

// checkBlock compares the peer's mapped block with its hello (block_check()).
func checkBlock(pb unsafe.Pointer, h *hello) error {
	u32 := func(off uintptr) uint32 { return *(*uint32)(unsafe.Add(pb, off)) }
	u16 := func(off uintptr) uint16 { return *(*uint16)(unsafe.Add(pb, off)) }
	if u32(bMagic) != blockMagic || u16(bVersion) != WireVersion || *(*uint64)(unsafe.Add(pb, bNonce)) != h.BlockNonce {
		return refused(syscall.EPROTO, "peer block header does not match its hello")
	}
	if u32(bRingEntries) != h.RingEntries || u32(bAckEntries) != h.AckEntries || u16(bHdrSize) != blockHdrSize ||
		u32(bRingOff) != blockHdrSize || u32(bAckOff) != blockHdrSize+h.RingEntries*slotSize {
		return refused(syscall.EPROTO, "peer block geometry does not match its hello")
	}
	return nil
}
