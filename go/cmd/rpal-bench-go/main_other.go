// SPDX-License-Identifier: MIT

//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// main reports that this program, the Go side of `rpal bench` (see
// main.go), runs on Linux only.
func main() {
	fmt.Fprintf(os.Stderr, "rpal-bench-go: not supported on %s\n", runtime.GOOS)
	os.Exit(2)
}
