// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Payload sizes of the check's calls: empty; around 40 and 320 bytes,
// where an rpal stream write stops riding in ring slots; around Kitex's
// 4 KiB buffers; past 256 KiB, which an rpal stream cuts into messages.
var checkSizes = []int{0, 1, 31, 32, 33, 312, 313, 1024, 4088, 4089, 65536, 300000}

const (
	checkCalls     = 240 // one at a time, cycling through checkSizes
	checkParallel  = 4   // then this many goroutines at once
	checkEach      = 40  // calls each
	checkMaxRandom = 16 << 10
)

// check makes checkCalls calls one at a time and checkParallel x checkEach
// at once (the client dials more connections for them) to a server over
// transport, each with its own pseudo-random payload, and compares every
// reply with its request byte for byte.  Then the server must stop
// cleanly on SIGTERM.  It reports what failed and returns false.
func check(transport, addr string) bool {
	srv := child("-serve", transport, addr)
	d := &dialer{transport: transport}
	cli := newClient(d, addr)
	var mu sync.Mutex
	var failures []string
	failed := 0
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if failed++; failed <= 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	echo := func(rng *rand.Rand, size int, what string) {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		req := echoStruct(payload)
		resp, err := cli.GenericCall(context.Background(), method, req)
		if err != nil {
			fail("%s, %d bytes: %v", what, size, err)
			return
		}
		if b, _ := resp.([]byte); !bytes.Equal(b, req) {
			fail("%s, %d bytes: the reply (%d bytes) differs from the request", what, size, len(b))
		}
	}
	for i := 0; i < checkCalls; i++ {
		echo(rand.New(rand.NewPCG(uint64(i), 1)), checkSizes[i%len(checkSizes)], fmt.Sprintf("call %d", i))
	}
	// Calls one at a time must share one pooled connection.
	if n := d.dialed(); n != 1 {
		fail("%d calls one at a time dialed %d connections", checkCalls, n)
	}
	var wg sync.WaitGroup
	for g := 0; g < checkParallel; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for i := 0; i < checkEach; i++ {
				echo(rng, rng.IntN(checkMaxRandom), fmt.Sprintf("goroutine %d call %d", g, i))
			}
		}()
	}
	wg.Wait()
	dialed := d.dialed()
	if !stop(srv, d) {
		fail("the server did not exit cleanly on SIGTERM")
	}
	if failed > 0 {
		for _, f := range failures {
			fmt.Printf("FAIL %s: %s\n", transport, f)
		}
		if failed > len(failures) {
			fmt.Printf("FAIL %s: and %d more\n", transport, failed-len(failures))
		}
		return false
	}
	fmt.Printf("ok   %s: %d calls of 0..%d bytes one at a time, over one connection, then %d x %d at once: all echoed intact; %d connections dialed; the server stopped cleanly\n",
		transport, checkCalls, checkSizes[len(checkSizes)-1], checkParallel, checkEach, dialed)
	return true
}
