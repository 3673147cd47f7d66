#!/usr/bin/env bash
# top_signal.sh PATH/TO/rpal PATH/TO/cli_test_stat - SIGTERM, SIGINT and
# SIGHUP end `rpal top --batch` at once, with status 0, wherever they find
# it: in its wait for the next interval (-d 3600), and in a write to a pipe
# whose reader never reads (`rpal top -b | sleep 30` once the pipe is full).
set -u
RPAL=$1
HELPER=$2
fail=0
tmp=$(mktemp -d)
"$HELPER" pair 30 > "$tmp/pair.pid" &
pair=$!
reader=
trap 'kill $pair $reader 2>/dev/null; [ -n "${tp:-}" ] && kill -9 $tp 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -s "$tmp/pair.pid" ] && break; sleep 0.1; done
[ -s "$tmp/pair.pid" ] || { echo "FAIL: the busy pair did not start"; exit 1; }

# ended SIG WHERE: top (pid $tp) must be gone within 2 s of SIG, with status 0.
ended() {
	local sig=$1 where=$2 rc
	kill -"$sig" "$tp"
	for _ in $(seq 20); do kill -0 "$tp" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$tp" 2>/dev/null; then
		echo "FAIL: SIG$sig $where: rpal top still runs 2 s later (wchan $(cat "/proc/$tp/wchan" 2>/dev/null))"
		kill -9 "$tp"
		wait "$tp" 2>/dev/null
		fail=1
	else
		wait "$tp"
		rc=$?
		[ $rc -eq 0 ] && echo "PASS: SIG$sig $where: rpal top ends at once, status 0" ||
			{ echo "FAIL: SIG$sig $where: status $rc, not 0"; fail=1; }
	fi
	tp=
}

for sig in TERM INT HUP; do
	"$RPAL" top --batch -d 3600 >/dev/null &
	tp=$!
	sleep 0.3
	ended "$sig" "in the wait of -d 3600"
done

mkfifo "$tmp/fifo"
for sig in TERM INT HUP; do
	sleep 60 < "$tmp/fifo" &
	reader=$!
	"$RPAL" top --batch -d 0.05 > "$tmp/fifo" &
	tp=$!
	# The pipe is full once top has written most of 64 KiB and then
	# nothing for a second (20 of its intervals).
	last=-1 same=0 full=
	for _ in $(seq 300); do
		kill -0 "$tp" 2>/dev/null || break
		w=$(awk '/^wchar:/ { print $2 }' "/proc/$tp/io" 2>/dev/null)
		[ "${w:-0}" = "$last" ] && same=$((same + 1)) || same=0
		[ "${w:-0}" -ge 32768 ] && [ $same -ge 4 ] && { full=1; break; }
		last=${w:-0}
		sleep 0.25
	done
	if [ -z "$full" ]; then
		echo "FAIL: rpal top --batch never filled the pipe (wrote ${w:-?} bytes)"
		fail=1
		kill -9 "$tp" 2>/dev/null
		wait "$tp" 2>/dev/null
		tp=
	else
		echo "rpal top --batch -d 0.05 > a pipe nobody reads: stuck after $w bytes"
		ended "$sig" "in a write to a full pipe"
	fi
	kill "$reader" 2>/dev/null
	wait "$reader" 2>/dev/null
	reader=
done
[ $fail -eq 0 ] && echo "PASS: signals end rpal top wherever it is"
exit $fail
