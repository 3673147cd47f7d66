#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer harnesses of test/fuzz/ and run each one.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]
#
# SECONDS per harness (default 60; 0 = only replay the checked-in corpus).
# HARNESS: handshake, ring (default: all).  Environment:
#   BUILD_FUZZ   build directory (default build-fuzz)
#   FUZZ_JOBS    parallel fuzzing processes per harness (default 1)
#
# Installs clang from Debian's packages when it is missing.  New corpus
# entries go to $BUILD_FUZZ/corpus/<harness>/ (the checked-in seeds in
# test/fuzz/corpus/<harness>/ are only read); a crashing input is written to
# $BUILD_FUZZ/artifacts/<harness>/.  Exits nonzero if any harness crashed.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
SECS=${1:-60}
shift || true
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(handshake ring)
B=${BUILD_FUZZ:-build-fuzz}
JOBS=${FUZZ_JOBS:-1}

case $SECS in ''|*[!0-9]*) echo "usage: $0 [SECONDS] [HARNESS...]" >&2; exit 2 ;; esac

# ------------------------------------------------------------ toolchain
CC_FUZZ=""
for c in clang clang-14 clang-15 clang-16 clang-17 clang-18 clang-19; do
	if command -v "$c" >/dev/null 2>&1; then CC_FUZZ=$c; break; fi
done
has_fuzzer() {   # the libFuzzer runtime comes in libclang-rt-NN-dev
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' |
		"$1" -x c -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1
}
if [ -z "$CC_FUZZ" ] || ! has_fuzzer "$CC_FUZZ"; then
	echo "fuzz: installing clang (Debian packages)"
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >/dev/null &&
		$SUDO apt-get install -y -qq clang >/dev/null || true
	[ -n "$CC_FUZZ" ] || CC_FUZZ=$(command -v clang || true)
	if [ -n "$CC_FUZZ" ] && ! has_fuzzer "$CC_FUZZ"; then
		v=$("$CC_FUZZ" -dumpversion | cut -d. -f1)
		$SUDO apt-get install -y -qq "libclang-rt-$v-dev" >/dev/null 2>&1 || true
	fi
	if [ -z "$CC_FUZZ" ] || ! has_fuzzer "$CC_FUZZ"; then
		echo "fuzz: no clang with libFuzzer (apt-get install clang libclang-rt-NN-dev)" >&2
		exit 1
	fi
fi

# ---------------------------------------------------------------- build
GEN=(); command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ -f "$B/CMakeCache.txt" ] && ! grep -q "^CMAKE_C_COMPILER:.*clang" "$B/CMakeCache.txt"; then
	echo "fuzz: $B was configured with another compiler; remove it first" >&2
	exit 1
fi
if grep -q 'RPAL_FUZZ' CMakeLists.txt; then
	SRC=.          # the top level adds test/fuzz when RPAL_FUZZ is on
else
	SRC=test/fuzz  # or build the harnesses as a project of their own
fi
if ! cmake -S "$SRC" -B "$B" "${GEN[@]}" -DCMAKE_C_COMPILER="$CC_FUZZ" -DRPAL_FUZZ=ON \
	-DCMAKE_BUILD_TYPE=Debug >"$B.configure.log" 2>&1; then
	cat "$B.configure.log" >&2
	echo "fuzz: configure failed" >&2
	exit 1
fi
if ! cmake --build "$B" --target rpal_fuzzers -j "$(nproc)" >"$B.build.log" 2>&1; then
	tail -50 "$B.build.log" >&2
	echo "fuzz: build failed" >&2
	exit 1
fi

# ------------------------------------------------------------------ run
pass=0
fail=0
for h in "${HARNESSES[@]}"; do
	bin=$B/fuzz/fuzz_$h
	seeds=$ROOT/test/fuzz/corpus/$h
	work=$B/corpus/$h
	art=$B/artifacts/$h
	log=$B/logs/fuzz_$h.log
	if [ ! -x "$bin" ]; then
		echo "fuzz_$h: FAIL (no such harness)"
		fail=$((fail + 1))
		continue
	fi
	mkdir -p "$work" "$art" "$(dirname "$log")"
	start_mark=$B/logs/.start_$h
	touch "$start_mark"
	if [ "$SECS" -eq 0 ]; then
		"$bin" -runs=0 -artifact_prefix="$art/" "$seeds" >"$log" 2>&1
		rc=$?
	elif [ "$JOBS" -gt 1 ]; then
		# Workers write fuzz-N.log in the cwd; keep them with the others.
		(cd "$B/logs" && "$ROOT/$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
			-print_final_stats=1 -jobs="$JOBS" -workers="$JOBS" \
			-artifact_prefix="$ROOT/$art/" "$ROOT/$work" "$seeds") >"$log" 2>&1
		rc=$?
		cat "$B"/logs/fuzz-*.log >>"$log" 2>/dev/null
		rm -f "$B"/logs/fuzz-*.log
	else
		"$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1
		rc=$?
	fi
	execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
	[ "$SECS" -eq 0 ] && execs=$(grep -o 'Done [0-9]* runs' "$log" | awk '{print $2}' | tail -1)
	cov=$(grep -oE '(cov|ft): [0-9]+' "$log" | tail -2 | tr '\n' ' ')
	corp=$(find "$work" -type f | wc -l)
	if [ $rc -eq 0 ] && ! grep -qE 'ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error:|invariant failed' "$log"; then
		echo "fuzz_$h: PASS ${SECS}s, ${execs:-0} execs, ${cov}corpus $corp (+$(ls "$seeds" | wc -l) seeds)"
		pass=$((pass + 1))
	else
		crash=$(find "$art" -type f -newer "$start_mark" 2>/dev/null | head -1)
		echo "fuzz_$h: FAIL rc=$rc, ${execs:-0} execs${crash:+, reproducer $crash}; log $log"
		grep -m3 -E 'ERROR:|runtime error:|invariant failed|SUMMARY' "$log" | sed 's/^/    /'
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
