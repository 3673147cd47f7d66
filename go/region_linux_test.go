// SPDX-License-Identifier: MIT

package rpal

import (
	"testing"

	"golang.org/x/sys/unix"
)

// A failed MAP_FIXED of a peer's arena may leave a hole in the region:
// reserveHole fills it again, but never replaces what landed there since.
func TestReserveHole(t *testing.T) {
	const page = 4096
	area, err := unix.MmapPtr(-1, 0, nil, 3*page, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(area, 3*page)
	mid := uint64(uintptr(area)) + page
	taken := func() bool {
		p, err := unix.MmapPtr(-1, 0, addrPtr(mid), page, unix.PROT_NONE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
		if err == nil {
			unix.MunmapPtr(p, page)
		}
		return err == unix.EEXIST
	}

	if err := unix.MunmapPtr(addrPtr(mid), page); err != nil {
		t.Fatal(err)
	}
	if taken() {
		t.Fatal("the hole is not free")
	}
	reserveHole(mid, page)
	if !taken() {
		t.Fatal("reserveHole left the hole free")
	}

	// Something of ours in the hole: it stays, with its contents.
	if err := unix.MunmapPtr(addrPtr(mid), page); err != nil {
		t.Fatal(err)
	}
	p, err := unix.MmapPtr(-1, 0, addrPtr(mid), page, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		t.Fatal(err)
	}
	*(*uint64)(p) = 0x5eed
	reserveHole(mid, page)
	if got := *(*uint64)(addrPtr(mid)); got != 0x5eed {
		t.Fatalf("reserveHole replaced a mapping in the hole: read %#x", got)
	}
}

// The map count is named only where it is the cause.
func TestMapCountNote(t *testing.T) {
	if n := mapCountNote(unix.EEXIST); n != "" {
		t.Fatalf("EEXIST: %q", n)
	}
	// This process is far from vm.max_map_count.
	if n := mapCountNote(unix.ENOMEM); n != "" {
		t.Fatalf("ENOMEM below the map count: %q", n)
	}
}
