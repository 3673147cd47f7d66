// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("RPAL_RUNTIME_DIR") == "" {
		dir, err := os.MkdirTemp("", "rpal-go-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("RPAL_RUNTIME_DIR", dir)
		code := runTests(m)
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if h := os.Getenv("RPAL_GO_HELPER"); h != "" {
		return runHelper(h)
	}
	return m.Run()
}
