// SPDX-License-Identifier: MIT

//go:build amd64 || arm64

package rpal

// rdtsc reads the CPU's cycle counter (the TSC on amd64, CNTVCT_EL0 on
// arm64): the unit of the statistics page's spin times (PROTOCOL.md
// section 9), which readers convert to ns with the page's clock pair.
func rdtsc() uint64
