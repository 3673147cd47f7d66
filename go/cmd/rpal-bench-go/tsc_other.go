// SPDX-License-Identifier: MIT

//go:build !amd64

package main

// tscNow is not available: `rpal bench` stamps messages with the x86 TSC.
func tscNow() uint64 { return 0 }

const haveTSC = false
