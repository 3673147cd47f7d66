#!/usr/bin/env bash
# write_error.sh PATH/TO/rpal PATH/TO/cli_test_stat - output that cannot be written is an error:
# rpal stat (table, --json, --prometheus), rpal top --batch and rpal doctor
# writing to a full disk (/dev/full) exit non-zero and say why on stderr,
# so that `rpal stat --prometheus > f.$$ && mv f.$$ f` never installs a cut
# file; rpal top --batch ends once its reader is gone, also where SIGPIPE
# is ignored (it would otherwise write to a closed pipe for ever).
set -u
RPAL=$1
HELPER=$2
fail=0
[ -w /dev/full ] || { echo "SKIP: no /dev/full"; exit 77; }
# Something to list: a live pair, so the table and both formats print rows.
tmp=$(mktemp -d)
"$HELPER" pair 30 > "$tmp/pair.pid" &
pair=$!
trap 'kill $pair 2>/dev/null; wait $pair 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -s "$tmp/pair.pid" ] && break; sleep 0.1; done
[ -s "$tmp/pair.pid" ] || { echo "FAIL: the busy pair did not start"; exit 1; }
for args in "stat" "stat --json" "stat --prometheus" "top --batch -n 1 -d 0.05" "doctor"; do
	# shellcheck disable=SC2086
	err=$("$RPAL" $args 2>&1 >/dev/full)
	rc=$?
	echo "rpal $args > /dev/full: status $rc, stderr: $(echo "$err" | tail -n 1)"
	[ $rc -ne 0 ] || { echo "FAIL: rpal $args exits 0 though none of its output was written"; fail=1; }
	echo "$err" | grep -q "No space left on device" ||
		{ echo "FAIL: rpal $args does not say why its output is lost"; fail=1; }
	echo "$err" | grep -q "^rpal ${args%% *}: " ||
		{ echo "FAIL: rpal $args does not name its command in the message"; fail=1; }
done
# A reader that goes away, with SIGPIPE ignored as some supervisors leave it.
start=$(date +%s)
(trap '' PIPE; timeout 10 "$RPAL" top --batch -d 0.05 | head -n 1 >/dev/null; echo "${PIPESTATUS[0]}" > "$tmp/top.rc")
rc=$(cat "$tmp/top.rc")
echo "rpal top --batch | head -n 1, SIGPIPE ignored: status $rc after $(($(date +%s) - start)) s"
[ "$rc" != 124 ] || { echo "FAIL: rpal top --batch went on writing to a closed pipe"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: output that cannot be written is an error"
exit $fail
