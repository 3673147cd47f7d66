// SPDX-License-Identifier: MIT

//go:build !amd64 || race

package rpal

import "sync/atomic"

// storeRelease stores v at p, ordered after every store before it: where
// a plain store is not a release (arm64), or where the race detector must
// see the store as the synchronisation it is, sync/atomic's.
func storeRelease32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
