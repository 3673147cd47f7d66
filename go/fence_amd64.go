// SPDX-License-Identifier: MIT

package rpal

// loadFence keeps the loads before it (a copy out of the peer's arena)
// ahead of the loads after it (the check that the copy was good).  x86
// does not reorder loads with loads; a call the compiler cannot inline
// keeps it from moving them either.
//
//go:noinline
func loadFence() {}
