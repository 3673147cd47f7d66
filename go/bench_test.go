// SPDX-License-Identifier: MIT

//go:build linux

package rpal

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"
)

// Round trips of 32-byte messages between this process and an echo peer
// in a child process (the child dials; its pid-derived slot differs), over
// rpal and over a Unix SOCK_SEQPACKET socket, in the same run:
//
//	go test -run '^$' -bench RoundTrip -benchtime 200000x
//
// Reported: p50 and p99 round-trip latency, and CPU time (both processes)
// per round trip.

func benchPeer(b *testing.B, role, addr string) *exec.Cmd {
	cmd := helperCmd(role, addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("%s helper did not start", role)
	}
	return cmd
}

func childCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, lat []time.Duration, cpu time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(lat)), "cpu-ns/op")
}

func BenchmarkRoundTripRPAL(b *testing.B) {
	name := uniqueName("bench")
	l, err := Listen(name)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cmd := benchPeer(b, "bench-echo-rpal", name)
	c, err := l.AcceptConn()
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 32)
	in := make([]byte, 64)
	for i := 0; i < 1000; i++ { // warm up
		c.Send(msg)
		c.Recv(in)
	}
	lat := make([]time.Duration, 0, b.N)
	cpu0 := selfCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := c.Send(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Recv(in); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	cpu := selfCPU() - cpu0
	c.CloseWrite()
	c.Recv(in)
	c0 := childCPU()
	cmd.Wait()
	// The child ran only for this benchmark: add all of its CPU time.
	report(b, lat, cpu+childCPU()-c0)
	c.Close()
}

func BenchmarkRoundTripUnix(b *testing.B) {
	dir := b.TempDir()
	path := dir + "/bench.sock"
	l, err := net.Listen("unixpacket", path)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cmd := benchPeer(b, "bench-echo-unix", path)
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 32)
	in := make([]byte, 64)
	for i := 0; i < 1000; i++ {
		c.Write(msg)
		c.Read(in)
	}
	lat := make([]time.Duration, 0, b.N)
	cpu0 := selfCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(in); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	cpu := selfCPU() - cpu0
	c.Close()
	c0 := childCPU()
	cmd.Wait()
	report(b, lat, cpu+childCPU()-c0)
}

// benchHelper runs the echo side of the round-trip benchmarks.
func benchHelper(role, addr string) int {
	switch role {
	case "bench-echo-rpal":
		c, err := DialConn(addr)
		if err != nil {
			return 1
		}
		os.Stdout.WriteString("ready\n")
		buf := make([]byte, 64)
		for {
			n, err := c.Recv(buf)
			if err != nil {
				c.Close()
				return 0
			}
			if c.Send(buf[:n]) != nil {
				return 1
			}
		}
	case "bench-echo-unix":
		c, err := net.Dial("unixpacket", addr)
		if err != nil {
			return 1
		}
		os.Stdout.WriteString("ready\n")
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil || n == 0 {
				return 0
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return 0
			}
		}
	}
	return -1
}

// Ping-pong of Stream writes of several sizes between two goroutines of
// this process (the path of a net.Conn user such as gRPC, without the
// cross-process wake-ups):
//
//	go test -run '^$' -bench StreamPingPong
func BenchmarkStreamPingPong(b *testing.B) {
	for _, size := range []int{40, 100, 320, 1000, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			c1, c2, stop, err := streamPair(b)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			go func() {
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(c2, buf); err != nil {
						return
					}
					if _, err := c2.Write(buf); err != nil {
						return
					}
				}
			}()
			msg := make([]byte, size)
			in := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c1.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c1, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
