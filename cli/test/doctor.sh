#!/usr/bin/env bash
# doctor.sh PATH/TO/rpal [hosted|connected-only] - `rpal doctor`: here
# connected mode works (exit 0, every probe reported with ok or no and what
# it enables, hosted mode's only where it is built, the wake-up of an
# idle CPU measured, or said to be unmeasurable on one CPU, no file of its
# trial left behind); with rpal_init made to fail, it says why and exits 1.
# The runtime directory line gives the directory's real mode, and is there
# when rpal_init fails because of the directory, which it judges as
# rpal_init does (a symbolic link in its place is refused).  Out of
# descriptors at the connect, it reports the failure and ends.  Its
# pidfd_getfd probe answers the same with stderr closed.
set -u
RPAL=$1
BUILD=${2:-hosted}
fail=0
# Its own runtime directory: nothing else's files to tell apart.
export RPAL_RUNTIME_DIR=$(mktemp -d /tmp/rpal-doctor-test.XXXXXX)
trap 'rm -rf "$RPAL_RUNTIME_DIR"' EXIT
out=$("$RPAL" doctor 2>&1)
rc=$?
echo "$out"
left=$(ls "$RPAL_RUNTIME_DIR" | grep -v '^slots\.lock$' | grep -v '^stat\.')
[ -z "$left" ] || { echo "FAIL: the trial left files in the runtime directory: $left"; fail=1; }
[ $rc -eq 0 ] || { echo "FAIL: exit status $rc where connected mode works"; fail=1; }
for what in "connected mode" "runtime directory" "futex_waitv" "pidfd_open" "SO_PASSRIGHTS" \
	"memory protection keys"; do
	echo "$out" | grep -Eq "^(ok|no) +$what" || { echo "FAIL: no line for $what"; fail=1; }
done
# Hosted mode's probes where it is built; where not, one line that says so.
if [ "$BUILD" = connected-only ]; then
	echo "$out" | grep -Eq "^-- +hosted mode +not in this build" ||
		{ echo "FAIL: no line saying hosted mode is not in this build"; fail=1; }
	echo "$out" | grep -Eq "FSGSBASE|Syscall User Dispatch|libc's signal return" &&
		{ echo "FAIL: hosted mode's probes in a build without it"; fail=1; }
else
	for what in "FSGSBASE" "Syscall User Dispatch" "pidfd_getfd" "libc's signal return"; do
		echo "$out" | grep -Eq "^(ok|no) +$what" || { echo "FAIL: no line for $what"; fail=1; }
	done
	# The pidfd_getfd probe takes a descriptor it made itself: its answer
	# does not depend on the caller's stdio (here, stderr closed).
	if echo "$out" | grep -q "^ok   pidfd_getfd"; then
		closed=$("$RPAL" doctor 2>&-)
		echo "$closed" | grep "pidfd_getfd"
		echo "$closed" | grep -q "^ok   pidfd_getfd" ||
			{ echo "FAIL: with stderr closed, the pidfd_getfd probe says no where it says ok with it open"; fail=1; }
	else
		echo "skip: pidfd_getfd with stderr closed (it is refused here anyway)"
	fi
fi
# The wake-up is measured where two CPUs are allowed, and not on one.
if [ "$(nproc)" -ge 2 ]; then
	echo "$out" | grep -Eq "^-- +wake-up of an idle CPU +[0-9]+\.[0-9] us in FUTEX_WAKE, [0-9]+\.[0-9] us until the sleeper runs" ||
		{ echo "FAIL: no measured wake-up line"; fail=1; }
	echo "$out" | grep -Eq "^-- +wake-up of an idle CPU +0\.0 us in" && { echo "FAIL: a wake-up of 0.0 us"; fail=1; }
fi
one=$(taskset -c 0 "$RPAL" doctor 2>&1)
echo "$one" | grep -Eq "^-- +wake-up of an idle CPU +not measured: this process may use one CPU only" ||
	{ echo "$one" | grep wake-up; echo "FAIL: pinned to one CPU, the wake-up line does not say so"; fail=1; }
echo "$out" | grep -q "^ok   connected mode" || { echo "FAIL: connected mode not ok"; fail=1; }
out=$(RPAL_ARENA_SIZE=12x "$RPAL" doctor 2>&1)
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: exit status $rc with a malformed RPAL_ARENA_SIZE"; fail=1; }
echo "$out" | grep -q "^no   connected mode .*RPAL_ARENA_SIZE" ||
	{ echo "$out"; echo "FAIL: the failure does not name RPAL_ARENA_SIZE"; fail=1; }
# A well-formed but refused value: given in decimal, and named as the source.
out=$(RPAL_ARENA_SIZE=12 "$RPAL" doctor 2>&1)
echo "$out" | grep -q "^no   connected mode .*arena_size 12 (0xc) .*(from RPAL_ARENA_SIZE=12)" ||
	{ echo "$out"; echo "FAIL: a refused RPAL_ARENA_SIZE=12 is not given as such"; fail=1; }
# Out of descriptors at the connect, before it reaches the listener: the
# trial ends at once, the failure and its reason are reported, exit 1.
# Which limit that takes depends on what the process inherits, so each
# limit is tried up from a few descriptors, none of them allowed to hang.
found=0
for n in $(seq 4 64); do
	out=$(ulimit -n $n; timeout 20 "$RPAL" doctor 2>&1)
	rc=$?
	[ $rc -eq 124 ] && { echo "FAIL: with ulimit -n $n, rpal doctor hung"; fail=1; break; }
	if echo "$out" | grep -q "^no   connected mode .*rpal_connect: socket() failed (Too many open files)"; then
		echo "$out" | grep -E "^(ok|no) +connected mode"
		found=1
		[ $rc -eq 1 ] || { echo "FAIL: exit status $rc with ulimit -n $n"; fail=1; }
		break
	fi
done
[ $found -eq 1 ] || [ $fail -ne 0 ] ||
	{ echo "FAIL: no ulimit -n in 4..64 made the connect's socket() fail"; fail=1; }
# A directory of mode 0711 or 0750 is what peers of several uids share
# (rpal_init accepts it): ok, and the line says it is shared, with its
# mode.  One that anyone may write, rpal_init refuses: no, and why.
odd=$(mktemp -d /tmp/rpal-doctor-dir.XXXXXX)
for mode in 0711 0750; do
	chmod $mode "$odd"
	out=$(RPAL_RUNTIME_DIR=$odd "$RPAL" doctor 2>&1)
	echo "$out" | grep -E "runtime directory"
	echo "$out" | grep -Eq "^ok +runtime directory +$odd \(ours, mode $mode: shared; " ||
		{ echo "FAIL: a directory of mode $mode is not reported as ok and shared"; fail=1; }
done
chmod 0777 "$odd"
out=$(RPAL_RUNTIME_DIR=$odd "$RPAL" doctor 2>&1)
echo "$out" | grep -E "runtime directory"
echo "$out" | grep -Eq "^no +runtime directory +$odd \(mode 0777: anyone may write it\)" ||
	{ echo "FAIL: a directory of mode 0777 is not reported as refused"; fail=1; }
# A directory of ours of mode 0500, for a user other than root (whom no mode
# stops): connected mode fails there, and the line says why, not "ok".
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	chmod 0500 "$odd"
	chown nobody "$odd"
	out=$(RPAL_RUNTIME_DIR=$odd setpriv --reuid=nobody --regid=nogroup --clear-groups "$RPAL" doctor 2>&1)
	echo "$out" | grep -E "runtime directory"
	echo "$out" | grep -Eq "^no +runtime directory +$odd \(mode 0500: we cannot" ||
		{ echo "FAIL: a directory of ours we cannot write to is not reported as such"; fail=1; }
else
	echo "skip: a directory of mode 0500 (needs root and setpriv to run as another user)"
fi
# refused WHAT REASON: doctor with $odd for a runtime directory exits 1, and
# its runtime directory line says "no ... $odd (REASON)".
refused() {
	local out rc
	out=$(RPAL_RUNTIME_DIR=$odd "$RPAL" doctor 2>&1)
	rc=$?
	echo "$out" | grep -E "connected mode|runtime directory"
	[ $rc -eq 1 ] || { echo "FAIL: exit status $rc with $1 for a runtime directory"; fail=1; }
	echo "$out" | grep -Eq "^no +runtime directory +$odd \($2\)" ||
		{ echo "FAIL: with $1 for a runtime directory, no runtime directory line says ($2)"; fail=1; }
}
# A runtime directory that is a file: rpal_init fails, and the line names it.
chmod 0700 "$odd"
rm -rf "$odd"
touch "$odd"
refused "a file" "not a directory"
rm -f "$odd"
# A symbolic link to a directory of ours, in the runtime directory's place:
# rpal_init refuses it, and so does the line (the same check), not "ok".
real=$(mktemp -d /tmp/rpal-doctor-real.XXXXXX)
ln -s "$real" "$odd"
refused "a symbolic link" "a symbolic link, not a directory"
rm -f "$odd"
rm -rf "$real"
[ $fail -eq 0 ] && echo "PASS: rpal doctor"
exit $fail
