// SPDX-License-Identifier: MIT

package rpal

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// monoNs reads CLOCK_MONOTONIC, the clock of the page's clock pair.
func monoNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func statSize(entries uint32) int64 {
	return statHdrSize + int64(entries)*statEntrySize
}

// statSetup makes and publishes our page: made under a temporary name,
// locked (flock, LOCK_EX) and filled, then renamed into place, so that a
// reader never sees it half written, and the lock, which the kernel drops
// with our last reference to the file, tells it whether we are alive.  A
// Go process has no rpal_fini(): its page stays behind when it exits,
// unlocked, which readers skip, and the slot's next owner replaces it.
// Without a page, counters stay private.
func (p *process) statSetup() {
	path := p.rundir + "/stat." + strconv.FormatUint(uint64(p.slot), 10)
	tmp := path + ".new"
	// A leftover of a crash of the slot's previous owner is ours to replace.
	_ = unix.Unlink(tmp)
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	fail := func() {
		unix.Close(fd)
		_ = unix.Unlink(tmp)
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil || unix.Ftruncate(fd, statSize(statFirstEntries)) != nil {
		fail()
		return
	}
	// The whole of what it may grow to: growing is ftruncate alone, and
	// entries never move under the connections that point at them.
	mapLen := uintptr(statSize(statMaxConns))
	m, err := unix.MmapPtr(fd, 0, nil, mapLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		fail()
		return
	}
	madviseDontfork(m, uint64(mapLen))
	h := (*statHdr)(m)
	h.version = statVersion
	h.hdrSize = statHdrSize
	h.entrySize = statEntrySize
	h.pid = uint32(os.Getpid())
	h.uid = uint32(os.Geteuid())
	h.slot = p.slot
	h.started = time.Now().Unix()
	made := time.Now()
	h.clockNs, h.clockTSC = monoNs(), rdtsc()
	copy(h.name[:len(h.name)-1], filepath.Base(os.Args[0]))
	h.nrEntries.Store(statFirstEntries)
	h.magic = statMagic
	if unix.Rename(tmp, path) != nil {
		_ = unix.MunmapPtr(m, mapLen)
		fail()
		return
	}
	p.stat = &statPage{
		hdr:  h,
		made: made,
		grow: func(n uint32) bool { return unix.Ftruncate(fd, statSize(n)) == nil },
	}
}
