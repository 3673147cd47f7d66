// SPDX-License-Identifier: MIT

//go:build !amd64 && !arm64

package rpal

// rdtsc is 0 where there is no cycle counter to read: spin times stay 0, and
// so does the page's clock_tsc, which tells readers so.
func rdtsc() uint64 { return 0 }
