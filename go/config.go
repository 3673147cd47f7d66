// SPDX-License-Identifier: MIT

package rpal

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Defaults, identical to librpal's (include/rpal.h).  Each can be overridden
// in Config or through the same RPAL_* environment variables.
const (
	DefaultRegionBase       = 0x680000000000 // RPAL_REGION_BASE (104 TiB)
	DefaultSlotSize         = 64 << 30       // RPAL_SLOT_SIZE
	DefaultNrSlots          = 256            // RPAL_NR_SLOTS
	DefaultArenaSize        = 64 << 20       // RPAL_ARENA_SIZE
	DefaultRingEntries      = 256            // RPAL_RING_ENTRIES
	DefaultSpin             = 50 * time.Microsecond
	DefaultStreamSpin       = 50 * time.Microsecond // Go only: RPAL_STREAM_SPIN_US
	DefaultHandshakeTimeout = 1000 * time.Millisecond
)

// Config holds the process-wide settings read once by Init.  Start from
// DefaultConfig and change what you need: a zero field is not its default
// (a zero Spin never spins, a zero geometry is refused).
type Config struct {
	RegionBase       uint64        // start of the reserved region, slot-aligned
	SlotSize         uint64        // bytes per slot; a power of two >= 1 MiB
	NrSlots          uint32        // slots in the region, 2..4096
	ArenaSize        uint64        // this process's arena; page multiple in 1 MiB..SlotSize
	RingEntries      uint32        // slots per ring direction; power of two in 8..65536
	Spin             time.Duration // longest spin before a waiter sleeps (RPAL_SPIN_US); 0 never spins
	StreamSpin       time.Duration // the same for a Stream's reader (RPAL_STREAM_SPIN_US); see Stream
	Wait             WaitPolicy    // what a waiter does before it sleeps (RPAL_WAIT=adaptive|spin|sleep)
	HandshakeTimeout time.Duration // bound on the whole handshake (RPAL_HANDSHAKE_MS)
	ConnBudget       uint64        // bytes of our arena one connection's peer may hold (RPAL_CONN_BUDGET); 64 KiB..ArenaSize, 0 means ArenaSize/4
	RuntimeDir       string        // "" means $XDG_RUNTIME_DIR/rpal, else /tmp/rpal-<euid>; DefaultConfig copies $RPAL_RUNTIME_DIR in

	envErr string // the first malformed RPAL_* variable
}

// DefaultConfig returns the defaults with the RPAL_* environment overrides
// applied, as rpal_config_default() does (which also reads
// RPAL_PROTECT_PEERS, for memory protection keys this package does not
// use): decimal, or hexadecimal with 0x.  A malformed variable keeps the
// default and makes Init fail.
func DefaultConfig() Config {
	c := Config{
		RegionBase:       DefaultRegionBase,
		SlotSize:         DefaultSlotSize,
		NrSlots:          DefaultNrSlots,
		ArenaSize:        DefaultArenaSize,
		RingEntries:      DefaultRingEntries,
		Spin:             DefaultSpin,
		StreamSpin:       DefaultStreamSpin,
		HandshakeTimeout: DefaultHandshakeTimeout,
	}
	c.envU64("RPAL_REGION_BASE", &c.RegionBase)
	c.envU64("RPAL_SLOT_SIZE", &c.SlotSize)
	c.envU32("RPAL_NR_SLOTS", &c.NrSlots)
	c.envU64("RPAL_ARENA_SIZE", &c.ArenaSize)
	c.envU32("RPAL_RING_ENTRIES", &c.RingEntries)
	c.envU64("RPAL_CONN_BUDGET", &c.ConnBudget)
	us := uint32(c.Spin / time.Microsecond)
	c.envU32("RPAL_SPIN_US", &us)
	c.Spin = time.Duration(us) * time.Microsecond
	us = uint32(c.StreamSpin / time.Microsecond)
	c.envU32("RPAL_STREAM_SPIN_US", &us)
	c.StreamSpin = time.Duration(us) * time.Microsecond
	if w := os.Getenv("RPAL_WAIT"); w != "" {
		c.Wait = WaitPolicy(len(waitNames))
		for i, n := range waitNames {
			if w == n {
				c.Wait = WaitPolicy(i)
			}
		}
		if c.Wait == WaitPolicy(len(waitNames)) {
			c.Wait = WaitAdaptive
			if c.envErr == "" {
				c.envErr = fmt.Sprintf("RPAL_WAIT=%.32s is not adaptive, spin or sleep", w)
			}
		}
	}
	ms := uint32(c.HandshakeTimeout / time.Millisecond)
	c.envU32("RPAL_HANDSHAKE_MS", &ms)
	c.HandshakeTimeout = time.Duration(ms) * time.Millisecond
	if d := os.Getenv("RPAL_RUNTIME_DIR"); d != "" && len(d) < 108 {
		c.RuntimeDir = d
	}
	return c
}

// envU64 parses decimal, or hexadecimal with 0x (never octal).
func (c *Config) envU64(name string, v *uint64) {
	s := os.Getenv(name)
	if s == "" {
		return
	}
	base, digits := 10, s
	if len(s) > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		base, digits = 16, s[2:]
	}
	x, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		if c.envErr == "" {
			c.envErr = fmt.Sprintf("%s=%.40s is not a number", name, s)
		}
		return
	}
	*v = x
}

func (c *Config) envU32(name string, v *uint32) {
	x := uint64(*v)
	c.envU64(name, &x)
	if x <= 0xffffffff {
		*v = uint32(x)
	} else if c.envErr == "" {
		c.envErr = fmt.Sprintf("%s=%d is too large", name, x)
	}
}

// check names the first bad field and its limit (rpal_config_check()).
func (c *Config) check() error {
	const userTop = uint64(1) << 47
	switch {
	case c.envErr != "":
		return fmt.Errorf("config: %s", c.envErr)
	case c.SlotSize == 0 && c.NrSlots == 0 && c.RegionBase == 0 && c.ArenaSize == 0:
		// A Config literal that sets only what its author cares about:
		// its zero fields are not the defaults.
		return errors.New("config: no region geometry (SlotSize, NrSlots, RegionBase and ArenaSize are 0): start from DefaultConfig() and change what you need")
	case !pow2(c.SlotSize) || c.SlotSize < 1<<20:
		return fmt.Errorf("config: slot size %d (%#x) must be a power of two >= 1 MiB%s", c.SlotSize, c.SlotSize, envNote("RPAL_SLOT_SIZE", c.SlotSize))
	case c.NrSlots < 2 || c.NrSlots > 4096:
		return fmt.Errorf("config: nr_slots %d must be in 2..4096%s", c.NrSlots, envNote("RPAL_NR_SLOTS", uint64(c.NrSlots)))
	case c.RegionBase == 0 || c.RegionBase%c.SlotSize != 0:
		return fmt.Errorf("config: region base %#x must be non-zero and slot-size aligned%s", c.RegionBase, envNote("RPAL_REGION_BASE", c.RegionBase))
	case c.SlotSize > userTop/uint64(c.NrSlots) || c.RegionBase > userTop-c.SlotSize*uint64(c.NrSlots):
		return fmt.Errorf("config: region %#x + %d x %#x passes the 47-bit user address limit", c.RegionBase, c.NrSlots, c.SlotSize)
	case c.ArenaSize < 1<<20 || c.ArenaSize > c.SlotSize || c.ArenaSize%pageSize != 0:
		return fmt.Errorf("config: arena size %d (%#x) must be a page multiple in 1 MiB..slot size%s", c.ArenaSize, c.ArenaSize, envNote("RPAL_ARENA_SIZE", c.ArenaSize))
	case !pow2(uint64(c.RingEntries)) || c.RingEntries < 8 || c.RingEntries > 65536:
		return fmt.Errorf("config: ring entries %d must be a power of two in 8..65536%s", c.RingEntries, envNote("RPAL_RING_ENTRIES", uint64(c.RingEntries)))
	case c.Spin < 0 || c.Spin > 10*time.Second:
		return fmt.Errorf("config: spin %v must be in 0..10s", c.Spin)
	case c.StreamSpin < 0 || c.StreamSpin > 10*time.Second:
		return fmt.Errorf("config: stream spin %v must be in 0..10s", c.StreamSpin)
	case c.Wait > WaitSleep:
		return fmt.Errorf("config: wait policy %d must be WaitAdaptive, WaitSpin or WaitSleep", c.Wait)
	case c.ConnBudget != 0 && (c.ConnBudget < 64<<10 || c.ConnBudget > c.ArenaSize):
		return fmt.Errorf("config: connection budget %d must be in 64 KiB..arena size (0: a quarter of the arena)%s", c.ConnBudget, envNote("RPAL_CONN_BUDGET", c.ConnBudget))
	case c.HandshakeTimeout <= 0 || c.HandshakeTimeout > time.Minute:
		return fmt.Errorf("config: handshake timeout %v must be in 1ms..60s%s", c.HandshakeTimeout,
			envNote("RPAL_HANDSHAKE_MS", uint64(c.HandshakeTimeout/time.Millisecond)))
	case len(c.RuntimeDir) >= 108:
		return fmt.Errorf("config: runtime directory name is too long")
	}
	return nil
}

// envNote is " (from NAME=value)" where the variable is set and reads as
// value, the likely source of a field check refuses; else "".
func envNote(name string, value uint64) string {
	var c Config
	x := ^value
	c.envU64(name, &x)
	if x != value {
		return ""
	}
	return fmt.Sprintf(" (from %s=%.40s)", name, os.Getenv(name))
}

// connBudget is the per-connection budget in effect.
func (c *Config) connBudget() uint64 {
	if c.ConnBudget != 0 {
		return c.ConnBudget
	}
	return c.ArenaSize / 4
}

// dataReserve is the part of the arena message buffers leave free, so that
// a new connection's block always fits.
func (c *Config) dataReserve() uint64 {
	return min(c.ArenaSize/64, 1<<20)
}

// runtimeDir resolves the runtime directory as rpal_runtime_dir() does.
func (c *Config) runtimeDir() string {
	if c.RuntimeDir != "" {
		return c.RuntimeDir
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); len(x) > 0 && x[0] == '/' {
		return x + "/rpal"
	}
	return fmt.Sprintf("/tmp/rpal-%d", os.Geteuid())
}
