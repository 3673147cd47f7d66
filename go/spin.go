// SPDX-License-Identifier: MIT

package rpal

import (
	"strconv"
	"time"
)

// WaitPolicy says what a waiter does before it sleeps (Config.Wait,
// RPAL_WAIT), as librpal's wait_policy.
type WaitPolicy uint8

const (
	// WaitAdaptive spins up to a budget that adapts to how long recent
	// waits lasted (see Stream and docs/GO.md, "Waiting").
	WaitAdaptive WaitPolicy = iota
	// WaitSpin spins the whole ceiling (Config.Spin, or StreamSpin) every
	// time, then sleeps; for a peer on this process's one CPU it yields a
	// sixteenth of the ceiling instead (docs/GO.md, "CPU hints").
	WaitSpin
	// WaitSleep sleeps at once.
	WaitSleep
)

var waitNames = [...]string{"adaptive", "spin", "sleep"}

func (w WaitPolicy) String() string {
	if int(w) < len(waitNames) {
		return waitNames[w]
	}
	return "WaitPolicy(" + strconv.Itoa(int(w)) + ")"
}

// spinner is the adaptive spin budget of one direction.  It keeps a moving
// average of how long waits last.  A spin that catches the event restores
// the ceiling; so does a wait that had to sleep while the average is within
// the ceiling (spinning the ceiling would catch a typical wait).  Beyond it
// the budget halves, down to a sixteenth of the ceiling, so a connection
// whose waits are long (an idle one, a slow peer) soon stops burning CPU,
// while an occasional long wait (a preempted peer) does not stop a
// connection whose waits are short from spinning.  The floor is not zero:
// where a wake-up costs more than the ceiling (cross-core wake-ups on small
// VMs take 30-60 µs), a zero budget would never see a short wait again and
// would stay asleep for good.
//
// At a moderate rate, request/response traffic makes a reader's waits
// alternate: short ones within a call (a reply, or the frames a framework
// sends around it) and long ones between calls.  The average then sits
// above the ceiling while every short wait caught restores it, so every
// long wait would first spin the whole ceiling.  The spinner therefore also
// learns, for each pattern of the last two waits (short: within longAt,
// the ceiling unless a server's Stream sets less), whether the next one
// is usually short, and spins no more than the floor where it is not.  A
// long wait it expected does not cut the budget: the next short one may
// spin it whole.  A server's Stream whose waits mostly defeat that
// prediction spins what would have paid on its recent waits instead
// (chooseBudget).
//
// librpal's adaptive policy (src/spin.c) spins no longer than a sleep
// costs (its CPU, and its wake-up's latency where the peer's gaps are
// shorter than that; Go has no wake page to measure it on).  In Go that
// rule, with the cost a process measures for its own sleeps (a few µs),
// settles gRPC request/response in the slow state where both sides sleep:
// neither side's short spin catches a reply that comes a wake-up later, so
// neither side ever sees the short waits that spinning on both sides would
// give.  Hence the ceiling here.
type spinner struct {
	max, cur, avg time.Duration
	longAt        time.Duration // a wait beyond it is long in hist and follows
	policy        WaitPolicy

	// The last two waits, a bit each (1: it ended within longAt),
	// and for each such pattern whether the next wait is usually short:
	// a counter, -1..1, where >= 0 says yes (one short wait is enough to
	// spin again, two long ones in a row to stop).
	hist    uint8
	follows [4]int8

	// When the last wait ended, and the connection's doorbell rings by
	// then; a wait that began longer than pauseAt after it, for an answer
	// from a peer we rang meanwhile, sleeps at once (see
	// Conn.wokeIdlePeer).  pauseAt is the ceiling, or a Conn's ceiling
	// for a Stream, whose longer one is for the frames within a call.
	end     time.Time
	rings   uint64
	pauseAt time.Duration

	// Of the waits expected long: how many in a row the floor did not
	// catch, and how many since the last that spun it (see forWait).
	floorMisses, unprobed uint8
	// The connection's messages sent when this wait began, and for how
	// many more waits it counts as one that other goroutines write to
	// while its reader waits (see forWait).
	sentAt      uint64
	writtenNear uint8

	// A server Stream's (mixed): how often the pattern mispredicts (a
	// moving average, of 65536), the last waits, and the budget that
	// would have cost least on them (see chooseBudget).
	mixed   bool
	misses  uint16
	recent  [64]time.Duration
	nrecent int
	chosen  time.Duration
}

// costBudgets are the budgets chooseBudget picks from (never more than
// the ceiling).
var costBudgets = [...]time.Duration{0, 5 * time.Microsecond, 10 * time.Microsecond,
	20 * time.Microsecond, 40 * time.Microsecond, 80 * time.Microsecond, 160 * time.Microsecond}

// sleepLatency is what chooseBudget counts for a sleep: about a cross-core
// wake-up on small VMs, the latency it adds to the message that ends it.
const sleepLatency = 40 * time.Microsecond

// missesMixed: where more of the waits than this (of 65536) go against
// the pattern's prediction, a server Stream spins what pays on its recent
// waits instead.
const missesMixed = 65536 / 4

// chooseBudget sets chosen to the budget that would have cost least on
// the recent waits: a wait within it costs its length, any other the
// budget and a sleep.
func (s *spinner) chooseBudget() {
	waits := s.recent[:min(s.nrecent, len(s.recent))]
	best := time.Duration(1<<63 - 1)
	for _, b := range costBudgets {
		b = min(b, s.max)
		var cost time.Duration
		for _, w := range waits {
			if w <= b {
				cost += w
			} else {
				cost += b + sleepLatency
			}
		}
		if cost < best {
			best, s.chosen = cost, b
		}
	}
}

func (s *spinner) init(d time.Duration, policy WaitPolicy) {
	// A new connection is usually busy: every pattern starts as one
	// that short waits follow, and two long ones are needed to stop.
	*s = spinner{max: d, cur: d, longAt: d, pauseAt: d, policy: policy, hist: 3, follows: [4]int8{1, 1, 1, 1}}
}

// expectShort says whether the next wait is likely short.
func (s *spinner) expectShort() bool { return s.follows[s.hist] >= 0 }

// budget is how long this wait may spin.
func (s *spinner) budget() time.Duration {
	switch s.policy {
	case WaitSleep:
		return 0
	case WaitSpin:
		return s.max
	}
	if s.mixed && s.misses > missesMixed {
		return s.chosen
	}
	if !s.expectShort() {
		return min(s.cur, s.max/16)
	}
	return s.cur
}

// Once floorMissesProbe waits expected long in a row have not ended
// within the floor, only one such wait in floorProbeEvery spins it, unless
// one of the last writtenWaits waits saw the connection send.
const (
	floorMissesProbe = 8
	floorProbeEvery  = 4
	writtenWaits     = 16
)

// forWait is the budget of the wait about to begin: budget(), except that
// a wait expected long may sleep at once.  The floor is there to see short
// waits come back, and to catch the short ones that the pattern calls
// long.  Where it has caught none for a while, as between the calls of a
// paced request/response connection, whose waits there are all long, one
// wait in a few sees a change as well, and the others do not pay for a
// spin (and its yields) on every call.  One caught restores the spin on
// all.
//
// Not where other goroutines send on the connection while its reader
// waits (gRPC's handlers and callers): the spin's yields run them on the
// reader's P, where a reader that blocks its thread in a futex at once
// leaves them for another thread to take, tens of µs later.
func (s *spinner) forWait() time.Duration {
	b := s.budget()
	if b == 0 || s.policy != WaitAdaptive || s.expectShort() || s.mixed && s.misses > missesMixed ||
		s.floorMisses < floorMissesProbe || s.writtenNear > 0 {
		return b
	}
	if s.unprobed++; s.unprobed < floorProbeEvery {
		return 0
	}
	s.unprobed = 0
	return b
}

// note adds a wait to the average (weight 1/8), counted as at most twice
// the ceiling so that one preemption does not outweigh many short waits,
// and to what follows the last two waits.
func (s *spinner) note(waited time.Duration) {
	s.avg += (min(waited, 2*s.max) - s.avg) / 8
	var short uint8
	if waited <= s.longAt {
		short = 1
	}
	if s.mixed {
		miss := int32(0)
		if (short == 1) != s.expectShort() {
			miss = 65535
		}
		s.misses = uint16(int32(s.misses) + (miss-int32(s.misses))/16)
		s.recent[s.nrecent%len(s.recent)] = waited
		if s.nrecent++; s.nrecent%16 == 0 {
			s.chooseBudget()
		}
	}
	f := &s.follows[s.hist]
	if short == 1 && *f < 1 {
		*f++
	} else if short == 0 && *f > -1 {
		*f--
	}
	s.hist = (s.hist<<1 | short) & 3
}

// hit records a wait that a spin ended after waited.
func (s *spinner) hit(waited time.Duration) {
	if !s.expectShort() {
		s.floorMisses = 0
	}
	s.note(waited)
	s.cur = s.max
}

// slept records a wait that slept, waited long in all.
func (s *spinner) slept(waited time.Duration) {
	expected := !s.expectShort()
	if expected && s.floorMisses < floorMissesProbe {
		s.floorMisses++
	}
	s.note(waited)
	if s.avg <= s.max || expected && waited > s.max {
		s.cur = s.max
	} else {
		s.cur = max(s.cur/2, s.max/16)
	}
}
