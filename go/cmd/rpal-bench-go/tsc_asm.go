// SPDX-License-Identifier: MIT

//go:build amd64 || arm64

package main

// tscNow reads the cycle counter `rpal bench` calibrates and converts to
// ns: the TSC with RDTSCP (tsc_amd64.s), or CNTVCT_EL0 after an ISB
// (tsc_arm64.s), as cli/tsc.h does.
func tscNow() uint64

const haveTSC = true
