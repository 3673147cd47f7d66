// SPDX-License-Identifier: MIT

//go:build !amd64 && !arm64

package main

// tscNow is not available: `rpal bench` stamps messages with the TSC or
// CNTVCT_EL0.
func tscNow() uint64 { return 0 }

const haveTSC = false
