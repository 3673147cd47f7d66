// SPDX-License-Identifier: MIT

//go:build !amd64

package rpal

import "sync/atomic"

var fenceWord atomic.Uint32

// loadFence keeps the loads before it (a copy out of the peer's arena)
// ahead of the loads after it (the check that the copy was good).  An
// acquire load, as sync/atomic's loads are on arm64, orders only what
// comes after it; a read-modify-write with acquire and release semantics
// orders both sides.
func loadFence() { fenceWord.Add(1) }
