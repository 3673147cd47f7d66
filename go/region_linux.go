// SPDX-License-Identifier: MIT

package rpal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// madviseDontfork keeps a mapping out of forked children (MADV_DONTFORK).
func madviseDontfork(ptr unsafe.Pointer, n uint64) {
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(ptr), uintptr(n), unix.MADV_DONTFORK)
}

// reserveAgain puts the PROT_NONE reservation back over [a, a+n).
func reserveAgain(a, n uint64) { reserveAt(a, n, unix.MAP_FIXED) }

// reserveHole puts the reservation back over [a, a+n) where a failed
// MAP_FIXED mapping may have left a hole, without replacing whatever
// landed there meanwhile (the Go heap may grow into a hole).
func reserveHole(a, n uint64) { reserveAt(a, n, unix.MAP_FIXED_NOREPLACE) }

// reserveAt maps [a, a+n) PROT_NONE with how (MAP_FIXED or
// MAP_FIXED_NOREPLACE), kept out of forked children.
func reserveAt(a, n uint64, how int) {
	ptr, err := unix.MmapPtr(-1, 0, addrPtr(a), uintptr(n), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|how)
	if err == nil {
		madviseDontfork(ptr, n)
	}
}

// mapCountNote is, for a mapping that failed with err, ": the process has
// N mappings, the most vm.max_map_count allows" where that is the cause
// (ENOMEM with the map count at its limit), else "".
func mapCountNote(err error) string {
	if err != unix.ENOMEM {
		return ""
	}
	maps, err1 := os.ReadFile("/proc/self/maps")
	limit, err2 := os.ReadFile("/proc/sys/vm/max_map_count")
	if err1 != nil || err2 != nil {
		return ""
	}
	n := bytes.Count(maps, []byte{'\n'})
	max, err := strconv.Atoi(strings.TrimSpace(string(limit)))
	if err != nil || n < max-1 {
		return ""
	}
	return fmt.Sprintf(": the process has %d mappings, the most vm.max_map_count allows", n)
}

// rundirSetup creates (0700) or checks the runtime directory: owned by us
// or root, not writable by others.
func rundirSetup(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create runtime directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("cannot stat runtime directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("runtime directory %s is not a directory: %w", dir, syscall.ENOTDIR)
	}
	if st.Uid != uint32(os.Geteuid()) && st.Uid != 0 {
		return fmt.Errorf("runtime directory %s belongs to uid %d, not us (%d) or root: %w", dir, st.Uid, os.Geteuid(), syscall.EPERM)
	}
	if st.Mode&0o002 != 0 {
		return fmt.Errorf("runtime directory %s has mode %04o; anyone may write it (want 0700): %w", dir, st.Mode&0o7777, syscall.EPERM)
	}
	return nil
}

func (p *process) setup() error {
	p.rundir = p.cfg.runtimeDir()
	if err := rundirSetup(p.rundir); err != nil {
		return err
	}
	size := p.cfg.SlotSize * uint64(p.cfg.NrSlots)
	r, err := unix.MmapPtr(-1, 0, addrPtr(p.cfg.RegionBase), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED_NOREPLACE)
	if err == unix.ENOMEM {
		// Not another mapping in the way: the map count, RLIMIT_AS, or
		// a region past the end of the user address space.
		if note := mapCountNote(err); note != "" {
			return fmt.Errorf("cannot reserve %d bytes at %#x%s: %w", size, p.cfg.RegionBase, note, err)
		}
		return fmt.Errorf("cannot reserve %d bytes at %#x: the kernel refused it (RLIMIT_AS, ulimit -v? past the user "+
			"address space? set RPAL_REGION_BASE lower, or shrink the region): %w", size, p.cfg.RegionBase, err)
	}
	if err != nil {
		hint := "set RPAL_REGION_BASE, the same in every peer"
		if err == unix.EEXIST && p.cfg.RegionBase < 1<<46 {
			// Go 1.26 and later put the heap at a random address below
			// 1<<46 on amd64; the race detector's shadow memory lies in
			// 0x200000000000..0x400000000000.
			hint += ", at or above 0x400000000000 (the default is 0x680000000000)"
		}
		return fmt.Errorf("cannot reserve %d bytes at %#x: something is mapped there (%s): %w", size, p.cfg.RegionBase, hint, err)
	}
	if uintptr(r) != uintptr(p.cfg.RegionBase) { // a kernel without NOREPLACE
		_ = unix.MunmapPtr(r, uintptr(size))
		return fmt.Errorf("region %#x is not free: %w", p.cfg.RegionBase, syscall.EEXIST)
	}
	madviseDontfork(r, size)
	p.region, p.regionSize = r, size
	if err = p.claimSlot(); err == nil {
		err = p.createArena()
	}
	if err == nil {
		p.statSetup()
	}
	if err != nil {
		if p.lockFile != nil {
			p.lockFile.Close()
		}
		_ = unix.MunmapPtr(r, uintptr(size))
	}
	return err
}

// mappedLockBase is where the "mapped" bytes of slots.lock start: a
// process that maps slot i's arena holds a read lock on byte
// mappedLockBase+i (docs/PROTOCOL.md §1).
const mappedLockBase = 4096

// lockByte sets an OFD lock of type typ on one byte of the slot lock file;
// EAGAIN or EACCES means another holder conflicts.
func lockByte(fd uintptr, typ int16, b int64) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: b, Len: 1}
	return unix.FcntlFlock(fd, unix.F_OFD_SETLK, &lk)
}

// claimSlot takes an OFD write lock on one byte of <rundir>/slots.lock,
// starting from a pid-derived slot as librpal does.  A slot is free only
// when nobody owns it and nobody still maps its previous owner's arena
// (the mapped byte can be write-locked): a survivor reading a dead peer's
// messages must never see that memory replaced.
func (p *process) claimSlot() error {
	path := p.rundir + "/slots.lock"
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o660)
	if err != nil {
		return fmt.Errorf("cannot open slot lock file %s: %w", path, err)
	}
	n := p.cfg.NrSlots
	mapped := 0
	for i := uint32(0); i < n; i++ {
		slot := (uint32(os.Getpid()) + i) % n
		err := lockByte(uintptr(fd), unix.F_WRLCK, int64(slot))
		if err == nil {
			err = lockByte(uintptr(fd), unix.F_WRLCK, mappedLockBase+int64(slot))
			if err == nil {
				_ = lockByte(uintptr(fd), unix.F_UNLCK, mappedLockBase+int64(slot))
				p.slot = slot
				p.lockFile = os.NewFile(uintptr(fd), path)
				p.lockFd = uintptr(fd)
				return nil
			}
			_ = lockByte(uintptr(fd), unix.F_UNLCK, int64(slot))
			if err == unix.EAGAIN || err == unix.EACCES {
				mapped++
			}
		}
		if err != unix.EAGAIN && err != unix.EACCES {
			unix.Close(fd)
			return fmt.Errorf("cannot lock slot %d in %s: %w", slot, path, err)
		}
	}
	unix.Close(fd)
	return fmt.Errorf("all %d slots in %s are taken (%d of them still mapped by peers of a departed owner): %w", n, path, mapped, syscall.EBUSY)
}

func randomU64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func (p *process) createArena() error {
	size := p.cfg.ArenaSize
	base := p.slotAddr(p.slot)
	fd, err := unix.MemfdCreate("rpal-arena", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create for the arena failed: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return fmt.Errorf("cannot size the arena to %d bytes: %w", size, err)
	}
	m, err := unix.MmapPtr(fd, 0, addrPtr(base), uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("cannot map the arena at %#x%s: %w", base, mapCountNote(err), err)
	}
	madviseDontfork(m, size)
	// No shrink or grow: a peer's mapping can never SIGBUS.  Future-write:
	// nobody can map it writable again; our mapping stays writable.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		reserveAgain(base, size)
		unix.Close(fd)
		return fmt.Errorf("cannot seal the arena memfd: %w", err)
	}
	p.nonce = randomU64()
	if p.nonce == 0 {
		p.nonce = 1
	}
	*(*uint32)(unsafe.Add(m, ahMagic)) = arenaMagic
	*(*uint16)(unsafe.Add(m, ahVersion)) = WireVersion
	*(*uint16)(unsafe.Add(m, ahHdrSize)) = arenaHdrSize
	*(*uint32)(unsafe.Add(m, ahSlot)) = p.slot
	*(*uint32)(unsafe.Add(m, ahPid)) = uint32(os.Getpid())
	*(*uint64)(unsafe.Add(m, ahArenaSize)) = size
	*(*uint64)(unsafe.Add(m, ahBase)) = base
	*(*uint64)(unsafe.Add(m, ahHeapOff)) = pageSize
	*(*uint64)(unsafe.Add(m, ahNonce)) = p.nonce
	p.memfd = fd
	p.arena = m
	p.arenaAddr = base
	p.alloc = newAllocator(pageSize, size)
	return nil
}

// mappedLock sets (F_RDLCK) or drops (F_UNLCK) our lock on slot's mapped
// byte.
func (p *process) mappedLock(slot uint32, typ int16) error {
	return lockByte(p.lockFd, typ, mappedLockBase+int64(slot))
}

// unmapPeer puts the reservation back over a peer's arena, then lets its
// slot go.
func (p *process) unmapPeer(slot uint32, addr, size uint64) {
	reserveAgain(addr, size)
	_ = p.mappedLock(slot, unix.F_UNLCK)
}

// mapPeer maps a peer's arena, or shares an existing mapping of the same
// incarnation (peer_map() in src/region.c).  The hello and memfd are checked.
func (p *process) mapPeer(memfd int, h *hello, pid int) (*peerMap, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	base := p.slotAddr(h.Slot)
	if old := p.peers[h.Slot]; old != nil {
		if !old.dead && old.pid == pid && old.nonce == h.ArenaNonce {
			// The hello's block and rings are placed by its size:
			// another one than the mapping's would put them past it.
			if old.size != h.ArenaSize {
				return nil, fmt.Errorf("peer pid %d says its arena (slot %d) is %#x bytes; it is mapped here with %#x: %w",
					pid, h.Slot, h.ArenaSize, old.size, syscall.EPROTO)
			}
			old.refs++
			return old, nil
		}
		// Connections still read through this mapping: it is never
		// replaced under them.  A claimer that follows the protocol
		// cannot get here (our mapped byte keeps it off the slot).
		if !old.dead {
			return nil, fmt.Errorf("peer pid %d claims slot %d, which live pid %d holds: %w", pid, h.Slot, old.pid, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("peer pid %d claims slot %d, still mapped for open connections of departed pid %d: %w", pid, h.Slot, old.pid, syscall.EADDRINUSE)
	}
	var m unsafe.Pointer
	if pid == os.Getpid() {
		m = p.arena // same address space: our own mapping is the one
	} else {
		if err := p.mappedLock(h.Slot, unix.F_RDLCK); err != nil {
			return nil, fmt.Errorf("slot %d of peer pid %d is being claimed anew (%v): %w", h.Slot, pid, err, syscall.EADDRINUSE)
		}
		var err error
		m, err = unix.MmapPtr(memfd, 0, addrPtr(base), uintptr(h.ArenaSize), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			note := mapCountNote(err)
			reserveHole(base, h.ArenaSize)
			_ = p.mappedLock(h.Slot, unix.F_UNLCK)
			return nil, fmt.Errorf("cannot map peer arena of slot %d%s: %w", h.Slot, note, err)
		}
		madviseDontfork(m, h.ArenaSize)
	}
	if *(*uint32)(unsafe.Add(m, ahMagic)) != arenaMagic ||
		*(*uint32)(unsafe.Add(m, ahSlot)) != h.Slot ||
		*(*uint64)(unsafe.Add(m, ahArenaSize)) != h.ArenaSize ||
		*(*uint64)(unsafe.Add(m, ahBase)) != base ||
		*(*uint64)(unsafe.Add(m, ahNonce)) != h.ArenaNonce ||
		*(*uint64)(unsafe.Add(m, ahHeapOff)) >= h.ArenaSize {
		if pid != os.Getpid() {
			p.unmapPeer(h.Slot, base, h.ArenaSize)
		}
		return nil, fmt.Errorf("peer arena header does not match its hello (slot %d): %w", h.Slot, syscall.EPROTO)
	}
	pm := &peerMap{slot: h.Slot, pid: pid, nonce: h.ArenaNonce, addr: base, size: h.ArenaSize, base: m, refs: 1, memfd: -1}
	if pid != os.Getpid() {
		// Our own descriptor of the memfd: the handshake's is closed
		// after it.
		fd, err := unix.FcntlInt(uintptr(memfd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			p.unmapPeer(h.Slot, base, h.ArenaSize)
			return nil, fmt.Errorf("cannot keep the arena descriptor of peer slot %d: %w", h.Slot, err)
		}
		pm.memfd = fd
		pm.written = make([]uint64, (h.ArenaSize/pageSize+63)/64)
	}
	p.peers[h.Slot] = pm
	return pm, nil
}

// pagesCheck is the slow path of pagesWritten: the bitmap word by word,
// then the memfd for where its first hole at or after the range's first
// page is (SEEK_HOLE: a page never written is a hole; one swapped out is
// not); the range's pages are noted as written if that is past its end.
func (pm *peerMap) pagesCheck(addr, n uint64) bool {
	first, last := (addr-pm.addr)/pageSize, (addr+n-1-pm.addr)/pageSize
	known := true
	for w := first / 64; w <= last/64 && known; w++ {
		want := ^uint64(0)
		if w == first/64 {
			want &= ^uint64(0) << (first % 64)
		}
		if w == last/64 {
			want &= ^uint64(0) >> (63 - last%64)
		}
		known = atomic.LoadUint64(&pm.written[w])&want == want
	}
	if known {
		return true
	}
	hole, err := unix.Seek(pm.memfd, int64(first*pageSize), unix.SEEK_HOLE)
	if err != nil || uint64(hole) < addr+n-pm.addr {
		return false
	}
	// Every page up to the hole, not the range alone: the kernel walked
	// them all to find it, and a walk per message would cost in
	// proportion to all the peer ever wrote.
	last = min(uint64(hole), pm.size)/pageSize - 1
	for i := first; i <= last; i = (i/64 + 1) * 64 {
		bits := ^uint64(0) << (i % 64)
		if i/64 == last/64 {
			bits &= ^uint64(0) >> (63 - last%64)
		}
		atomic.OrUint64(&pm.written[i/64], bits)
	}
	return true
}
