#!/usr/bin/env bash
# run_join_signal.sh RPAL PROGDIR - a joiner waiting for the host's answer (a load that takes 2 s:
# prog_ctor's library constructor sleeps, CTOR_MODE=libslow) ends on SIGINT or SIGTERM at once,
# by that signal (exit status 130, 143), and the program, once started, gets that signal:
#  1. SIGINT: the joiner ends within 1 s, status 130; the program is then killed by SIGINT (rpal ps
#     lists it as killed), not left running its 20 s.
#  2. SIGTERM: the same, status 143.
#  3. A joiner started with SIGINT ignored (as `cmd &` in a script) ignores it while it waits, as
#     the program will; SIGTERM then ends it.
#  4. A running program that SIGINT ends: the joiner ends by SIGINT itself, not exit 130.
#  5. A joiner that stops waiting (RPAL_JOIN_TIMEOUT=1) exits 2 after 1 s, naming the host, and
#     the program, started after all, is killed by SIGKILL, not left running without its joiner;
#     RPAL_JOIN_TIMEOUT that is not a number of seconds is refused.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"
start_host js
now() { date +%s%N; }
# state N: program N's state in rpal ps --json
state() { "$RPAL" ps js --json | grep -o '"state": "[a-z]*"' | sed -n "$(($1 + 1))s/.*: \"\(.*\)\"/\1/p"; }
# ended_state N: program N's state once it has ended (10 s at most; else its last state, or nothing).
ended_state() {
	local st
	for _ in $(seq 100); do
		st=$(state "$1")
		[ -n "$st" ] && [ "$st" != running ] && [ "$st" != loading ] && break
		sleep 0.1
	done
	echo "$st"
}

# signal_waiting SIG STATUS N: a slow join gets SIG 0.5 s in; it must end with STATUS within 1 s,
# and program N must end killed within 10 s.
signal_waiting() {
	# A background job of a script starts with SIGINT ignored: take it back to its default.
	CTOR_MODE=libslow $dfl "$RPAL" join js "$PD/hosted_prog_ctor" x >"$tmp/j.out" 2>&1 &
	local j=$! t0 rc ms st
	sleep 0.5
	t0=$(now)
	kill -"$1" $j
	for _ in $(seq 500); do kill -0 $j 2>/dev/null || break; sleep 0.01; done
	kill -9 $j 2>/dev/null # it ignored the signal
	wait $j
	rc=$?
	ms=$((($(now) - t0) / 1000000))
	[ $rc -eq "$2" ] && [ $ms -lt 1000 ] && ok "SIG$1 while the joiner waits: it exits $rc after $ms ms" ||
		bad "SIG$1 while the joiner waits: rc $rc after $ms ms, $(cat "$tmp/j.out")"
	st=$(ended_state "$3")
	[ "$st" = killed ] && ok "the program, once started, got SIG$1: rpal ps says $st" ||
		bad "program $3 after SIG$1 to its joiner: ${st:-not listed}"
}

# ---- 1, 2
dfl="env --default-signal=INT"
if $dfl true 2>/dev/null; then
	signal_waiting INT 130 0
	signal_waiting TERM 143 1
else
	echo "skip: SIGINT: no env --default-signal (coreutils 8.31) to undo the shell's SIG_IGN"
	dfl=
	signal_waiting TERM 143 0
fi

# ---- 3. SIGINT ignored by the joiner's parent
(trap '' INT; CTOR_MODE=libslow exec "$RPAL" join js "$PD/hosted_prog_ctor" x) >"$tmp/j.out" 2>&1 &
j=$!
sleep 0.5
kill -INT $j
sleep 0.3
kill -0 $j 2>/dev/null && ok "an ignored SIGINT stays ignored while the joiner waits" || bad "the joiner ended on an ignored SIGINT"
kill -TERM $j
for _ in $(seq 500); do kill -0 $j 2>/dev/null || break; sleep 0.01; done
kill -9 $j 2>/dev/null
wait $j
rc=$?
[ $rc -eq 143 ] && ok "SIGTERM then ends it (143)" || bad "SIGTERM after the ignored SIGINT: rc $rc"

# ---- 4. a running program that a signal ends: the joiner ends by it, as an exec'd job would (a
# shell loop stops); perl tells a death by a signal from an exit with 128 + N, as bash's $? does not.
how=$tmp/how
perl -e '$SIG{INT} = "DEFAULT"; system(@ARGV); print(($? & 127) ? "signal " . ($? & 127) . "\n" : "exit " . ($? >> 8) . "\n")' \
	"$RPAL" join js "$PD/hosted_prog_proc" hold /dev/null >"$how" 2>"$tmp/j.out" &
p=$!
for _ in $(seq 500); do grep -q holding "$how" && break; sleep 0.01; done
kill -INT "$(pgrep -P $p)"
wait $p
grep -q "^signal 2$" "$how" && ok "a joined program that SIGINT ends: the joiner ends by SIGINT" ||
	bad "a joined program that SIGINT ends: the joiner's $(grep -v holding "$how"), want signal 2"

# ---- 5. a joiner that stops waiting
n=$("$RPAL" ps js --json | grep -o '"argv"' | wc -l)
t0=$(now)
CTOR_MODE=libslow RPAL_JOIN_TIMEOUT=1 timeout 10 "$RPAL" join js "$PD/hosted_prog_ctor" x >/dev/null 2>"$tmp/j.err"
rc=$? ms=$((($(now) - t0) / 1000000))
[ $rc -eq 2 ] && [ $ms -ge 900 ] && [ $ms -lt 1900 ] && grep -q 'host "js" did not answer within 1 s' "$tmp/j.err" &&
	ok "RPAL_JOIN_TIMEOUT=1 and a 2 s load: exit 2 after $ms ms: $(cat "$tmp/j.err")" ||
	bad "RPAL_JOIN_TIMEOUT=1 and a 2 s load: exit $rc after $ms ms: $(cat "$tmp/j.err")"
st=$(ended_state "$n")
code=$("$RPAL" ps js --json | grep -o '"exit_status": [0-9]*' | sed -n "$((n + 1))s/.*: //p")
[ "$st" = killed ] && [ "$code" = 137 ] && ok "the program started after it gave up: killed by SIGKILL (status $code)" ||
	bad "the program started after its joiner gave up: ${st:-not listed} (status ${code:-none})"
RPAL_JOIN_TIMEOUT=1s "$RPAL" join js "$PD/hosted_prog_ctor" x >/dev/null 2>"$tmp/j.err"
rc=$?
[ $rc -eq 2 ] && grep -q "RPAL_JOIN_TIMEOUT=1s" "$tmp/j.err" && ok "RPAL_JOIN_TIMEOUT=1s refused: $(cat "$tmp/j.err")" ||
	bad "RPAL_JOIN_TIMEOUT=1s: exit $rc, $(cat "$tmp/j.err")"

timeout 10 "$RPAL" ps js >/dev/null && ok "the host answers rpal ps after it" || bad "the host does not answer"
kill -TERM $hpid
wait $hpid
exit $fail
