#!/bin/sh
# SPDX-License-Identifier: MIT
#
# bench-machine.sh - the figures the README and docs/BENCH.md quote, taken on
# a machine you have for a few minutes: what it offers (rpal doctor), the
# tests that need memory protection keys, then each suite with its
# baselines in the same invocation.  Text and JSON go to DIR.
#
#   scripts/bench-machine.sh DIR [BUILD]
#
# BUILD (default build, under the repository's root) is built first if it
# holds no rpal.  Go rows run when rpal-bench-go is next to rpal or named by
# RPAL_BENCH_GO (a static build carries to a machine without Go:
# CGO_ENABLED=0 go build in go/cmd/rpal-bench-go).  RPAL_BENCH_ROUNDS sets
# the rounds (default 3); with 3 it takes about 7 minutes on 2 CPUs.
set -u

[ $# -ge 1 ] || { echo "usage: $0 DIR [BUILD]" >&2; exit 2; }
out=$1
b=${2:-build}
rounds=${RPAL_BENCH_ROUNDS:-3}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.." || exit 1

if [ ! -x "$b/rpal" ]; then
	cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPAL_BENCH_GO=OFF >"$out/build.txt" 2>&1 &&
		ninja -C "$b" >>"$out/build.txt" 2>&1 || { echo "build failed: $out/build.txt" >&2; exit 1; }
fi

"$b/rpal" doctor >"$out/doctor.txt" 2>&1

# The *_mpk tests and mpk skip (77) where the CPU has no PKU.
(cd "$b" && ctest -R mpk --output-on-failure) >"$out/mpk-tests.txt" 2>&1 ||
	echo "mpk tests failed: $out/mpk-tests.txt" >&2

failed=0
bench() {
	name=$1
	shift
	echo "$name: rpal bench $*" >&2
	if ! "$b/rpal" bench "$@" --json="$out/$name.json" >"$out/$name.txt" 2>&1; then
		echo "$name failed: $out/$name.txt" >&2
		failed=1
	fi
}

bench latency -t uds-epoll,futex,shm-yield,rpal-connected,rpal-hosted -w sleep,adaptive \
	-p split,same-core -S latency,throughput,cpu -n 100000 -R "$rounds"
for n in 1 16; do
	bench "rpc-c$n" -t uds-epoll,futex,rpal-connected,rpal-hosted -w adaptive -p unpinned,split \
		-S rpc --rates 1000,10000,50000,max --concurrency "$n" -T 1 -R "$rounds"
done

go=${RPAL_BENCH_GO:-$b/rpal-bench-go}
if [ -x "$go" ]; then
	RPAL_BENCH_GO=$go
	export RPAL_BENCH_GO
	bench go -t go-uds,rpal-go -w adaptive -p split,same-core -S latency,throughput -n 50000 -R "$rounds"
	bench go-rpc -t go-uds,rpal-go,grpc-uds,grpc-rpal,kitex-uds,kitex-rpal -w adaptive -p unpinned \
		-S rpc --rates 1000,10000,max -T 1 -R "$rounds"
else
	echo "no rpal-bench-go: Go rows left out" >&2
fi
exit $failed
