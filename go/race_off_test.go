// SPDX-License-Identifier: MIT

//go:build !race

package rpal

const raceEnabled = false
