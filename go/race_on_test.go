// SPDX-License-Identifier: MIT

//go:build race

package rpal

// raceEnabled: the tests run under the race detector (go test -race).
const raceEnabled = true
