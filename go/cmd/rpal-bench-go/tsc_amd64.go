// SPDX-License-Identifier: MIT

package main

// tscNow reads the time stamp counter with RDTSCP (tsc_amd64.s): the clock
// of `rpal bench`, which calibrates it and converts cycles to ns.
func tscNow() uint64

const haveTSC = true
