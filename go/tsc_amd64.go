// SPDX-License-Identifier: MIT

package rpal

// rdtsc reads the time-stamp counter: the unit of the statistics page's
// spin times (PROTOCOL.md section 9), which readers convert to ns with the
// page's clock pair.
func rdtsc() uint64
