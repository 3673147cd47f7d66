// SPDX-License-Identifier: MIT

//go:build linux

// Command rpal-bench-go is the Go side of two transports of `rpal bench`
// (cli/tr_go.c, docs/BENCH.md): "rpal-go", Go to Go over this module's
// rpal.Conn, and "go-uds", Go to Go over a Unix stream socket with the
// netpoller, its baseline.  It is not meant to be run by hand: the bench
// forks a child per role, pins it, and that child runs this program, so its
// every thread inherits the placement.
//
// The loops are those of cli/run.c, message for message: the client fills
// a message (16-byte header, then a pattern that changes with every
// message), stamps it with RDTSCP just before the send call and waits for
// the echo; the server reads every byte, checks it, stamps its receipt and
// records receipt minus stamp.  Samples, counters and the first error go to
// a shared results file (a memfd, descriptor -results) whose layout is
// fixed below and in cli/tr_go.c; the bench calibrates the TSC and turns
// the samples into statistics.  The server writes one byte to descriptor
// -ready once it listens.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The results file: a header, then one uint64 per measured sample (the
// server's one-way times, or the client's round trips).  cli/tr_go.c
// writes the magic and version before it starts us and reads the rest when
// we exit; both sides change together (struct go_results).
const (
	resMagic   = 0x4f474252 // "RBGO"
	resVersion = 2

	offMagic    = 0  // u32
	offVersion  = 4  // u32
	offProgress = 8  // client: messages done, warm-up included
	offSkew     = 16 // server: one-way samples < 0, clamped
	offBad      = 24 // payload mismatches
	offUserNS   = 32 // CPU time of the measured loop (cpu suite)
	offSysNS    = 40
	offElapsed  = 48 // client: TSC cycles of the measured loop
	offWakeups  = 56 // rpal: doorbell rings made for the peer
	offSleeps   = 64 // rpal: times this side slept
	offHasCount = 72 // u32: wakeups and sleeps are filled in
	offRPCDone  = 80 // rpc client: requests answered and measured
	offUnsent   = 88 // rpc client: open loop overloaded, requests never sent
	offErr      = 128
	errLen      = 256
	offSamples  = 4096
)

type options struct {
	role        string // server or client
	network     string // rpal or unix
	addr        string
	size        int
	count       int // measured messages (a multiple of batch)
	warmup      int // unrecorded messages first (a multiple of batch)
	batch       int
	period      time.Duration // client: one batch per period (cpu suite); 0: back to back
	cpu         bool          // record the CPU time of the measured loop
	rpc         bool          // the rpc suite's loops instead of the ping-pong
	rate        float64       // rpc: requests per second, 0 = closed loop
	seconds     float64       // rpc: measured time
	concurrency int           // rpc: requests outstanding at most
	work        time.Duration
	tscHz       float64       // rpc: the bench's TSC calibration
	spin        time.Duration // rpal: Config.Spin
	wait        string        // rpal: Config.Wait, by name
	zerocopy    bool
	resultsFD   int
	readyFD     int
}

func parseFlags() (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("rpal-bench-go", flag.ContinueOnError)
	fs.StringVar(&o.role, "role", "", "server or client")
	fs.StringVar(&o.network, "net", "", "rpal or unix; rpc suite also FRAMEWORK-rpal or FRAMEWORK-unix (grpc, kitex)")
	fs.StringVar(&o.addr, "addr", "", "rpal service or Unix socket address")
	fs.IntVar(&o.size, "size", 32, "message size in bytes, header included")
	fs.IntVar(&o.count, "count", 0, "measured messages")
	fs.IntVar(&o.warmup, "warmup", 0, "unrecorded messages before them")
	fs.IntVar(&o.batch, "batch", 1, "messages per echo")
	fs.DurationVar(&o.period, "period", 0, "client: time between batches (0: back to back)")
	fs.BoolVar(&o.cpu, "cpu", false, "record CPU time of the measured loop")
	fs.BoolVar(&o.rpc, "rpc", false, "request/response at -rate (cli/run.c's rpc loops)")
	fs.Float64Var(&o.rate, "rate", 0, "rpc: requests per second (0: closed loop)")
	fs.Float64Var(&o.seconds, "seconds", 1, "rpc: measured seconds")
	fs.IntVar(&o.concurrency, "concurrency", 1, "rpc: requests outstanding at most")
	fs.DurationVar(&o.work, "work", 0, "rpc: server busy-work per request")
	fs.Float64Var(&o.tscHz, "tsc-hz", 0, "rpc: TSC ticks per second, as the bench calibrated them")
	spinUS := fs.Int64("spin-us", 0, "rpal: spin budget in microseconds before sleeping")
	fs.StringVar(&o.wait, "wait", "adaptive", "rpal: wait policy (adaptive, spin or sleep)")
	fs.BoolVar(&o.zerocopy, "zerocopy", false, "rpal: Alloc/WriteMsg and ReadMsg/Ack instead of Send/Recv")
	fs.IntVar(&o.resultsFD, "results", 3, "descriptor of the results file")
	fs.IntVar(&o.readyFD, "ready", 4, "server: descriptor to write one byte to once listening")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return nil, err
	}
	// rpal.Config allows at most 10 s; `rpal bench` may ask for more.
	o.spin = time.Duration(min(max(*spinUS, 0), 10_000_000)) * time.Microsecond
	switch {
	case o.role != "server" && o.role != "client":
		return nil, fmt.Errorf("-role must be server or client, not %q", o.role)
	case o.network != "rpal" && o.network != "unix" && !isFramework(o.network):
		return nil, fmt.Errorf("-net must be rpal, unix, grpc-rpal, grpc-unix, kitex-rpal or kitex-unix, not %q", o.network)
	case isFramework(o.network) && !o.rpc:
		return nil, fmt.Errorf("-net %s is request/response: it needs -rpc", o.network)
	case o.addr == "":
		return nil, errors.New("-addr is missing")
	case o.size < hdrLen:
		return nil, fmt.Errorf("-size %d is below the %d-byte header", o.size, hdrLen)
	case o.batch < 1 || o.count < 1 || o.warmup < 0 || o.count%o.batch != 0 || o.warmup%o.batch != 0:
		return nil, fmt.Errorf("-count %d and -warmup %d must be multiples of -batch %d", o.count, o.warmup, o.batch)
	case o.zerocopy && o.network != "rpal":
		return nil, errors.New("-zerocopy needs -net rpal")
	case o.rpc && (o.tscHz <= 0 || o.seconds <= 0 || o.concurrency < 1 || o.rate < 0):
		return nil, errors.New("-rpc needs -tsc-hz, -seconds > 0, -concurrency >= 1 and -rate >= 0")
	}
	return o, nil
}

// results is the mapped results file.
type results struct {
	mem     []byte
	samples []uint64
}

func openResults(fd, n int) (*results, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("results descriptor %d: %w", fd, err)
	}
	need := offSamples + 8*int64(n)
	if st.Size < need {
		return nil, fmt.Errorf("results file holds %d bytes, %d samples need %d", st.Size, n, need)
	}
	// Populated now, so no sample store takes a page fault mid-run.
	mem, err := unix.Mmap(fd, 0, int(need), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("cannot map the results file: %w", err)
	}
	r := &results{mem: mem}
	if m, v := *r.u32(offMagic), *r.u32(offVersion); m != resMagic || v != resVersion {
		return nil, fmt.Errorf("results file has magic %#x version %d, want %#x version %d (rpal and rpal-bench-go are from different builds)",
			m, v, resMagic, resVersion)
	}
	if n > 0 {
		r.samples = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[offSamples])), n)
	}
	return r, nil
}

func (r *results) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *results) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

// set stores a counter; the bench reads it while we run (progress) or after.
func (r *results) set(off int, v uint64) { atomic.StoreUint64(r.u64(off), v) }

// fail records the first error, for the bench's table and JSON.
func (r *results) fail(err error) {
	e := r.mem[offErr : offErr+errLen]
	if e[0] == 0 {
		copy(e[:errLen-1], err.Error())
	}
}

// link moves the fixed-size messages of one run, as struct transport does
// in cli/bench.h: txBuf gives the buffer the next message is built in, send
// sends it (more: another message of this batch follows, so the link may
// gather them), recv returns the next message, valid until release.
type link interface {
	txBuf() ([]byte, error)
	send(b []byte, more bool) error
	recv() ([]byte, error)
	release() error
	counts() (wakeups, sleeps uint64, ok bool)
	close() error
}

// Message layout (cli/bench.h struct msg_hdr): the client's TSC stamp, the
// message number, the whole length; then the payload pattern.
const hdrLen = 16

func pattern(seq uint32) byte { return byte(seq*151 + 29) }

func fill(b []byte, seq uint32) {
	le := (*[hdrLen]byte)(b)
	putU64(le[0:], 0)
	putU32(le[8:], seq)
	putU32(le[12:], uint32(len(b)))
	p := b[hdrLen:]
	if len(p) == 0 {
		return
	}
	p[0] = pattern(seq)
	for n := 1; n < len(p); n *= 2 {
		copy(p[n:], p[:n])
	}
}

// check reads every payload byte and reports whether b is message seq,
// intact, with the stamp it carries.
func check(b []byte, seq uint32, size int) (uint64, bool) {
	if len(b) != size || size < hdrLen {
		return 0, false
	}
	want := 0x0101010101010101 * uint64(pattern(seq))
	var acc uint64
	i := hdrLen
	for ; i+8 <= size; i += 8 {
		acc |= getU64(b[i:]) ^ want
	}
	for ; i < size; i++ {
		acc |= uint64(b[i] ^ byte(want))
	}
	return getU64(b), acc == 0 && getU32(b[8:]) == seq && getU32(b[12:]) == uint32(size)
}

func putU64(b []byte, v uint64) { *(*uint64)(unsafe.Pointer(&b[0])) = v }
func putU32(b []byte, v uint32) { *(*uint32)(unsafe.Pointer(&b[0])) = v }
func getU64(b []byte) uint64    { _ = b[7]; return *(*uint64)(unsafe.Pointer(&b[0])) }
func getU32(b []byte) uint32    { _ = b[3]; return *(*uint32)(unsafe.Pointer(&b[0])) }

type cpuUse struct{ user, sys time.Duration }

func cpuNow() cpuUse {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return cpuUse{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

func (r *results) cpu(from cpuUse) {
	to := cpuNow()
	r.set(offUserNS, uint64(to.user-from.user))
	r.set(offSysNS, uint64(to.sys-from.sys))
}

// serve is cli/run.c's serve(): receive, check, stamp, echo the last
// message of each batch.
func serve(l link, o *options, r *results) error {
	total := o.warmup + o.count
	var skew uint64
	var cpu0 cpuUse
	for i := 0; i < total; i++ {
		if i == o.warmup && o.cpu {
			cpu0 = cpuNow()
		}
		m, err := l.recv()
		if err != nil {
			return fmt.Errorf("server: receiving message %d: %w", i, err)
		}
		sent, ok := check(m, uint32(i), o.size)
		if !ok {
			r.set(offBad, 1)
			return fmt.Errorf("server: message %d arrived corrupted", i)
		}
		now := tscNow()
		if i >= o.warmup {
			// Cross-CPU TSC skew could make this negative: clamp and count.
			if now < sent {
				skew++
				now = sent
			}
			r.samples[i-o.warmup] = now - sent
		}
		if (i+1)%o.batch != 0 {
			if err := l.release(); err != nil {
				return fmt.Errorf("server: releasing message %d: %w", i, err)
			}
			continue
		}
		if err := echo(l, m, i); err != nil {
			return err
		}
	}
	if o.cpu {
		r.cpu(cpu0)
	}
	r.set(offSkew, skew)
	// Orderly shutdown: the client closes once it has its last echo.
	if _, err := l.recv(); err == nil {
		return errors.New("server: the client sent more messages than agreed")
	}
	return nil
}

// echo sends message i (m, just received) back, then releases it; copied
// out first, since zero-copy data goes away with the release.
func echo(l link, m []byte, i int) error {
	out, err := l.txBuf()
	if err != nil {
		return fmt.Errorf("server: buffer for the echo of message %d: %w", i, err)
	}
	copy(out, m)
	if err := l.release(); err != nil {
		return fmt.Errorf("server: releasing message %d: %w", i, err)
	}
	if err := l.send(out, false); err != nil {
		return fmt.Errorf("server: echo of message %d: %w", i, err)
	}
	return nil
}

// drive is cli/run.c's drive(): send a batch, each message stamped just
// before its send call, and time the echo of its last message.
func drive(l link, o *options, r *results) error {
	total := o.warmup + o.count
	var start time.Time
	var tStart uint64
	var cpu0 cpuUse
	for i := 0; i < total; i += o.batch {
		if i == o.warmup {
			if o.cpu {
				cpu0 = cpuNow()
			}
			start = time.Now()
			tStart = tscNow()
		}
		if o.period > 0 && i >= o.warmup {
			// Fixed rate: sleep until this batch's slot, as a real client idles.
			time.Sleep(time.Until(start.Add(time.Duration((i-o.warmup)/o.batch) * o.period)))
		}
		var t0 uint64
		for k := 0; k < o.batch; k++ {
			b, err := l.txBuf()
			if err != nil {
				return fmt.Errorf("client: buffer for message %d: %w", i+k, err)
			}
			fill(b, uint32(i+k))
			now := tscNow()
			putU64(b, now)
			if k == 0 {
				t0 = now
			}
			if err := l.send(b, k+1 < o.batch); err != nil {
				return fmt.Errorf("client: sending message %d: %w", i+k, err)
			}
		}
		last := i + o.batch - 1
		m, err := l.recv()
		if err != nil {
			return fmt.Errorf("client: receiving the echo of message %d: %w", last, err)
		}
		if _, ok := check(m, uint32(last), o.size); !ok {
			r.set(offBad, 1)
			return fmt.Errorf("client: echo of message %d arrived corrupted", last)
		}
		if err := l.release(); err != nil {
			return fmt.Errorf("client: releasing echo %d: %w", last, err)
		}
		t1 := tscNow()
		if i >= o.warmup {
			r.samples[(i-o.warmup)/o.batch] = t1 - t0
		}
		if (i/o.batch)&255 == 0 {
			r.set(offProgress, uint64(i+o.batch))
		}
	}
	r.set(offElapsed, tscNow()-tStart)
	if o.cpu {
		r.cpu(cpu0)
	}
	r.set(offProgress, uint64(total))
	return nil
}

func ready(o *options) error {
	f := os.NewFile(uintptr(o.readyFD), "ready")
	if f == nil {
		return fmt.Errorf("ready descriptor %d is not open", o.readyFD)
	}
	defer f.Close()
	if _, err := f.Write([]byte{'R'}); err != nil {
		return fmt.Errorf("cannot report readiness: %w", err)
	}
	return nil
}

func runRole(o *options, r *results) error {
	if !haveTSC {
		return errors.New("rpal-bench-go: stamps need the TSC or CNTVCT_EL0 (amd64 or arm64)")
	}
	if isFramework(o.network) {
		return runFramework(o, r)
	}
	var l link
	var err error
	if o.network == "rpal" {
		l, err = openRPAL(o)
	} else {
		l, err = openUnix(o)
	}
	if err != nil {
		return err
	}
	switch {
	case o.rpc && o.role == "server":
		err = rpcServe(l, o, r)
	case o.rpc:
		err = rpcDrive(l, o, r)
	case o.role == "server":
		err = serve(l, o, r)
	default:
		err = drive(l, o, r)
	}
	if w, s, ok := l.counts(); ok {
		r.set(offWakeups, w)
		r.set(offSleeps, s)
		atomic.StoreUint32(r.u32(offHasCount), 1)
	}
	if cerr := l.close(); err == nil && cerr != nil && !errors.Is(cerr, io.EOF) {
		err = fmt.Errorf("%s: close: %w", o.role, cerr)
	}
	return err
}

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpal-bench-go:", err)
		os.Exit(2)
	}
	n := o.count
	if o.role == "client" {
		n = o.count / o.batch
	} else if o.rpc {
		n = 0 // the rpc server records no samples
	}
	r, err := openResults(o.resultsFD, n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpal-bench-go:", err)
		os.Exit(2)
	}
	stop, err := startProfile(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpal-bench-go:", err)
		os.Exit(2)
	}
	err = runRole(o, r)
	stop()
	if err != nil {
		r.fail(err)
		os.Exit(1)
	}
}

// startProfile starts a CPU profile of this process when the environment
// names a folder for it (RPAL_BENCH_GO_PROFILE): the file is
// NET-ROLE-PID.pprof there, for `go tool pprof`.  It returns what ends it.
func startProfile(o *options) (func(), error) {
	dir := os.Getenv("RPAL_BENCH_GO_PROFILE")
	if dir == "" {
		return func() {}, nil
	}
	path := fmt.Sprintf("%s/%s-%s-%d.pprof", dir, o.network, o.role, os.Getpid())
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile (RPAL_BENCH_GO_PROFILE): %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// errShort is a message of the wrong length.
func errShort(n, want int) error {
	return fmt.Errorf("message of %d bytes, expected %d: %w", n, want, syscall.EBADMSG)
}
