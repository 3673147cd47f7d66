#!/usr/bin/env bash
# aarch64.sh build|test [DIR] - the connected core (-DRPAL_HOSTED=OFF) for AArch64 Linux, cross
# built with Debian's gcc-aarch64-linux-gnu in DIR (default build-aarch64), and the Go package
# vetted for arm64.  `test` then runs the C tests and the Go package's (-short) under
# qemu-user: RPAL_QEMU, or a
# qemu-aarch64 of version 8 or later on PATH, or else Debian bookworm-backports' qemu-user,
# fetched into DIR/qemu (nothing is installed for it).  qemu 7.2, bookworm's own, aborts in
# children forked by a process with threads, which most tests are.
#
# Under the emulator the region is 256 slots of 256 MiB (CMakeLists.txt), and the checks that
# need what it lacks are skipped with a reason (test/helpers.h: t_skip_emulated).  Memory order
# is the host's there: the emulator checks that the code runs on AArch64, not that its barriers
# are enough on an AArch64 CPU.
set -euo pipefail
mode=${1:-build}
case $mode in build | test) ;; *) echo "usage: $0 build|test [DIR]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${2:-build-aarch64}
case $dir in /*) ;; *) dir=$root/$dir ;; esac

if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
	echo "aarch64: installing gcc-aarch64-linux-gnu"
	sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
fi

qemu_ok() { # a qemu-aarch64 of version 8 or later
	local v
	v=$("$1" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -1)
	[ -n "$v" ] && [ "$v" -ge 8 ]
}

find_qemu() {
	local q
	if [ -n "${RPAL_QEMU:-}" ]; then
		qemu_ok "$RPAL_QEMU" || { echo "aarch64: RPAL_QEMU=$RPAL_QEMU is not a qemu-aarch64 of version 8 or later" >&2; exit 1; }
		echo "$RPAL_QEMU"
		return
	fi
	q=$(command -v qemu-aarch64 || true)
	if [ -n "$q" ] && qemu_ok "$q"; then
		echo "$q"
		return
	fi
	q=$dir/qemu/usr/bin/qemu-aarch64
	if ! qemu_ok "$q"; then
		local apt=$dir/qemu-apt
		echo "aarch64: fetching qemu-user from bookworm-backports into $dir/qemu" >&2
		mkdir -p "$apt/lists/partial" "$apt/debs"
		echo "deb http://deb.debian.org/debian bookworm-backports main" >"$apt/sources.list"
		local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
			-o "Dir::State::Lists=$apt/lists" -o Debug::NoLocking=1)
		apt-get "${opts[@]}" update -qq >/dev/null
		(cd "$apt/debs" && apt-get "${opts[@]}" download qemu-user 2>/dev/null >/dev/null)
		dpkg-deb -x "$apt"/debs/qemu-user_*.deb "$dir/qemu"
		qemu_ok "$q" || { echo "aarch64: no usable qemu-aarch64 in the fetched package" >&2; exit 1; }
	fi
	echo "$q"
}

qemu=
[ "$mode" = test ] && qemu=$(find_qemu)
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
	-DRPAL_QEMU="$qemu" -DRPAL_HOSTED=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j "$(nproc)"
go=$(command -v go || echo /usr/local/go/bin/go)
if [ -x "$go" ]; then
	(cd "$root/go" && GOARCH=arm64 CGO_ENABLED=0 "$go" vet ./... && GOARCH=arm64 CGO_ENABLED=0 "$go" test -c -o /dev/null .)
	echo "aarch64: the Go package builds and vets for arm64"
fi
case $mode in
build) echo "aarch64: the connected core builds for AArch64 (in $dir)" ;;
test)
	echo "aarch64: running the tests under $("$qemu" --version | head -1)"
	# qemu 10.0 now and then hangs in a child forked by a process with
	# threads (its own futex, a lock copied held): a test that fails runs
	# once more.
	(cd "$dir" && ctest --output-on-failure -j "$(nproc)" --timeout 180 -LE flaky --repeat until-pass:2)
	if [ -x "$go" ]; then
		echo "aarch64: the Go package's tests (-short) under the emulator"
		(cd "$root/go" && GOARCH=arm64 CGO_ENABLED=0 "$go" test -c -o "$dir/rpal-go.test" . &&
			mkdir -p "$dir/rt-go" &&
			RPAL_TEST_EMULATOR="$qemu" RPAL_RUNTIME_DIR="$dir/rt-go" RPAL_REGION_BASE=0x680000000000 \
				RPAL_SLOT_SIZE=0x10000000 RPAL_NR_SLOTS=256 timeout 600 "$qemu" "$dir/rpal-go.test" -test.short)
	fi
	;;
esac
