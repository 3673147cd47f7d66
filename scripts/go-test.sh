#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# go-test.sh [BUILD_DIR] - the Go package's tests, called by `make test`.
#
# Downloads the Go module's dependencies, builds the C interop peers
# (go/interop/c), test/old_kernel.c and test/vectors/check_vectors.c with
# gcc against librpal in BUILD_DIR (default: build), then runs: go vet; go vet and a
# CGO_ENABLED=0 build of cmd/rpal-bench-go (rpal bench's Go side, its own
# module); gofmt;
# the tests with the race detector, the tests with CGO_ENABLED=0 (interop
# included), the same as on Linux 5.15 (under old_kernel), the C
# check of the shared test vectors, builds the gRPC example and runs its
# stopped-clients check, 40 clients stopped mid-call, and its check that one
# dialer uses rpal locally and TCP otherwise, and builds the Kitex example
# and runs its echo check (skip the examples with
# RPAL_GO_SKIP_EXAMPLES=1).  Prints "N passed, N failed"; exits
# non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac

passed=0
failed=0
failures=()
step() {   # step NAME COMMAND...
	local name=$1
	shift
	echo "=== $name"
	if "$@"; then
		passed=$((passed + 1))
		echo "--- ok: $name"
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "--- FAIL: $name"
	fi
}

# The Go toolchain of this machine kind lives in /usr/local/go.
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
if ! command -v go >/dev/null; then
	echo "go-test.sh: go is not installed"
	echo "0 passed, 1 failed"
	exit 1
fi
if [ ! -e "$BUILD/src/librpal.so" ]; then
	echo "go-test.sh: $BUILD/src/librpal.so not found (build the C library first)"
	echo "0 passed, 1 failed"
	exit 1
fi

OUT="$BUILD/go-interop"
mkdir -p "$OUT"
export RPAL_INTEROP_BIN="$OUT"
# Our own runtime directory: sockets and the slot lock file of this run only.
RUNDIR=$(mktemp -d /tmp/rpal-go-test.XXXXXX)
trap 'rm -rf "$RUNDIR"' EXIT
export RPAL_RUNTIME_DIR="$RUNDIR"
export GOFLAGS=${GOFLAGS:-}

build_c() {
	local ok=0
	for p in echo_server echo_client; do
		gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I include -I src \
			"go/interop/c/$p.c" -o "$OUT/$p" \
			-L "$BUILD/src" -lrpal -Wl,-rpath,"$BUILD/src" || ok=1
	done
	gcc -std=c11 -O2 -Wall -Wextra -Werror -I src test/vectors/check_vectors.c -o "$OUT/check_vectors" || ok=1
	gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror test/old_kernel.c -o "$OUT/old_kernel" || ok=1
	return $ok
}

step "go mod download" bash -c 'cd go && go mod download'
step "build C peers" build_c
step "go vet" bash -c 'cd go && go vet ./...'
# `rpal bench`'s Go side (rpal-go, go-uds and the gRPC and Kitex rows), its
# own module: pure Go.
step "go mod download, go vet and build cmd/rpal-bench-go (CGO_ENABLED=0)" bash -c 'cd go/cmd/rpal-bench-go && go mod download && go vet ./... && CGO_ENABLED=0 go build -o /dev/null .'
step "builds for darwin, windows, freebsd (rpal: not supported there)" bash -c 'cd go && for os in darwin windows freebsd; do GOOS=$os GOARCH=amd64 CGO_ENABLED=0 go build ./... || exit 1; done'
step "gofmt" bash -c 'cd go && test -z "$(gofmt -l .)" || { gofmt -l .; false; }'
step "go test -race" bash -c 'cd go && go test -race -count=1 -timeout 150s ./...'
step "go test (CGO_ENABLED=0)" bash -c 'cd go && CGO_ENABLED=0 go test -count=1 -timeout 120s -v ./... 2>&1 | grep -E "^(=== RUN|--- |PASS|FAIL|ok)" | grep -v "=== RUN"; exit ${PIPESTATUS[0]}'
# Again as on an older kernel, C peers included (test/old_kernel.c): 5.15,
# without futex_waitv and SO_PASSRIGHTS.
step "go test as on Linux 5.15" bash -c "cd go && CGO_ENABLED=0 go test -count=1 -timeout 120s -exec '$OUT/old_kernel 5.15' ./..."
step "check_vectors (C)" "$OUT/check_vectors" test/vectors
# The examples are modules of their own (the package depends on neither
# gRPC nor Kitex).
if [ -z "${RPAL_GO_SKIP_EXAMPLES:-}" ]; then
	step "build examples/grpcecho" bash -c 'cd go/examples/grpcecho && go mod download && go vet ./... && go build -o "$0/grpcecho" .' "$OUT"
	# gRPC end to end: 40 clients stopped in turn with 16 calls of 1 MiB in
	# flight each, then a healthy client's calls must go through.
	step "grpcecho -stopped 40" "$OUT/grpcecho" -stopped 40
	step "build examples/kitexecho (CGO_ENABLED=0)" bash -c 'cd go/examples/kitexecho && go mod download && go vet ./... && CGO_ENABLED=0 go build -o "$0/kitexecho" .' "$OUT"
	# Kitex end to end, over rpal and over a Unix socket: 400 calls of 0 B
	# to 300 KiB each, replies compared byte for byte, calls one at a time
	# on one pooled connection, then a clean server shutdown.
	step "kitexecho -check" "$OUT/kitexecho" -check
	# One address for local and remote: rpal.TCPDialer must reach a server
	# on this machine that listens both ways (rpal.ListenTCP) over rpal, and
	# a TCP-only server over TCP, through gRPC's dns and passthrough targets.
	step "grpcecho -both" "$OUT/grpcecho" -both
fi

echo
for f in "${failures[@]+"${failures[@]}"}"; do
	echo "FAILED: $f"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
