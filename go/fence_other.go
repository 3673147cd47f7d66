// SPDX-License-Identifier: MIT

//go:build !amd64

package rpal

import "sync/atomic"

var fenceWord atomic.Uint32

// loadFence keeps the loads before it (a copy out of the peer's arena)
// ahead of the loads after it (the check that the copy was good).  An
// acquire load, as sync/atomic's loads are on arm64, orders only what
// comes after it.  A read-modify-write: with LSE (LDADDAL) a full
// barrier; without, its store-release stays after the copy, and the
// caller's next load must be a sync/atomic one (LDAR), which a
// store-release does not pass.  Both callers' next load is.
func loadFence() { fenceWord.Add(1) }
