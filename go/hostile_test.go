// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// scribble writes one garbage value into c's block, where its peer reads:
// a header word (nonce, state, indices, waiting, wake_seq), a field of a
// ring slot or ack entry, or a slot's sequence number; values random, small,
// off by a little from what is there, or addresses inside the arena.
func scribble(r *rand.Rand, c *Conn) {
	hdr := []uintptr{bMagic, bNonce, bState, bTxCPU, bRxCPU, bTail, bRxHead, bAckTail, bAckHead, bWaiting, bWakeSeq}
	n := int(c.ringMask + 1)
	ring := uintptr(blockHdrSize)
	acks := ring + uintptr(n)*slotSize
	var off uintptr
	switch r.Intn(4) {
	case 0:
		off = hdr[r.Intn(len(hdr))]
	case 1:
		off = ring + uintptr(r.Intn(n))*slotSize + []uintptr{sLen, sFlags, sAddr}[r.Intn(3)]
	case 2:
		off = acks + uintptr(r.Intn(n))*ackSize + uintptr(r.Intn(2))*aAddr
	default:
		off = ring + uintptr(r.Intn(n))*slotSize + sSeq
	}
	var v uint64
	switch r.Intn(5) {
	case 0:
		v = r.Uint64()
	case 1:
		v = uint64(r.Intn(64))
	case 2:
		v = atomic.LoadUint64((*uint64)(unsafe.Add(c.me, off&^7))) + uint64(r.Intn(5)) - 2
	case 3:
		v = c.p.arenaAddr + uint64(r.Int63n(int64(c.p.cfg.ArenaSize)))
	default:
		v = 1 << 32
	}
	if off%8 == 0 && r.Intn(2) == 0 {
		atomic.StoreUint64((*uint64)(unsafe.Add(c.me, off)), v)
	} else {
		atomic.StoreUint32((*uint32)(unsafe.Add(c.me, off&^3)), uint32(v))
	}
}

// A peer that mixes honest traffic (sends, reads and acks, some acks
// twice) with garbage written into its own block, while we call every
// receive and send of Conn and Stream with a 20 ms deadline: no panic,
// every call returns within its deadline (a violation, EPIPE, the
// deadline, end of stream, or data), and Close returns at once.
func TestHostileScribble(t *testing.T) {
	g0 := runtime.NumGoroutine()
	var mu sync.Mutex
	errs := map[string]int{}
	defer func() {
		for k, v := range errs {
			t.Logf("%4d %.90s", v, k)
		}
	}()
	for iter := range 40 {
		c1, c2, stopPair, err := streamPair(t)
		if err != nil {
			t.Fatal(err)
		}
		a, b := c1.(*Stream).Conn(), c2.(*Stream).Conn()
		r := rand.New(rand.NewSource(int64(iter)))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := rand.New(rand.NewSource(int64(iter) + 1000))
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch pr.Intn(4) {
				case 0:
					b.Send(make([]byte, 1+pr.Intn(5000)))
				case 1:
					if m, err := b.TryReadMsg(); err == nil {
						m.Ack()
						if pr.Intn(128) == 0 {
							b.ackPush(m.addr) // twice
						}
					}
				case 2:
					scribble(pr, b)
				default:
					time.Sleep(time.Duration(pr.Intn(200)) * time.Microsecond)
				}
			}
		}()
		s := NewStream(a)
		ops := []func() error{
			func() error { _, err := a.Recv(make([]byte, 8192)); return err },
			func() error {
				m, err := a.ReadMsg()
				if err == nil {
					_ = m.Bytes()
					err = m.Ack()
				}
				return err
			},
			func() error { m, err := a.PeekMsg(); _ = m; return err },
			func() error { return a.Send(make([]byte, 1+r.Intn(3000))) },
			func() error { _, err := a.SendBatch([][]byte{make([]byte, 10), make([]byte, 500)}); return err },
			func() error { _, err := s.Read(make([]byte, 100)); return err },
			func() error { _, err := s.Write(make([]byte, 1+r.Intn(2000))); return err },
		}
		for range 30 {
			op := ops[r.Intn(len(ops))]
			a.SetDeadline(time.Now().Add(20 * time.Millisecond))
			done := make(chan struct{})
			go func() {
				err := op()
				mu.Lock()
				k := fmt.Sprint(err)
				if i := strings.LastIndex(k, ": "); i >= 0 {
					k = k[i+2:]
				}
				if i := strings.Index(k, " ("); i >= 0 {
					k = k[:i]
				}
				errs[k]++
				mu.Unlock()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				buf := make([]byte, 1<<20)
				t.Fatalf("iteration %d: a call still blocked 3 s after its 20 ms deadline\n%s", iter, buf[:runtime.Stack(buf, true)])
			}
		}
		close(stop)
		wg.Wait()
		closed := make(chan struct{})
		go func() { stopPair(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(3 * time.Second):
			t.Fatalf("iteration %d: Close blocked", iter)
		}
	}
	until(t, "goroutines left behind", func() bool { return runtime.NumGoroutine() <= g0 })
	if runtime.NumGoroutine() > g0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%s", buf[:runtime.Stack(buf, true)])
	}
}
