#!/usr/bin/env bash
# Every example answers --help with its usage and status 2, and does
# nothing else: no socket file, no service, no wait for a peer.
set -u
dir=$1
run=${RPAL_TEST_EMULATOR:-}
cwd=$(mktemp -d)
trap 'rm -rf "$cwd"' EXIT
fail=0
for ex in "$dir"/*; do
	[ -x "$ex" ] && [ -f "$ex" ] || continue
	out=$(cd "$cwd" && timeout 10 $run "$ex" --help 2>&1)
	rc=$?
	echo "$(basename "$ex") --help: status $rc: $out"
	[ $rc -eq 2 ] && echo "$out" | grep -q "^usage: " ||
		{ echo "FAIL: $(basename "$ex") --help did not print its usage and exit 2"; fail=1; }
done
[ -z "$(ls -A "$cwd")" ] || { echo "FAIL: --help left files: $(ls -A "$cwd")"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: every example answers --help"
exit $fail
