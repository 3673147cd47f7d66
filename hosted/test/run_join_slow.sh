#!/usr/bin/env bash
# run_join_slow.sh RPAL PROGDIR - a program that takes 2 s to load (prog_ctor's library constructor
# sleeps, CTOR_MODE=libslow) holds up nothing else the host does:
#  1. rpal ps answers within 1 s while it loads, and lists it as loading (the table and --json);
#  2. a join that comes meanwhile waits for that load, then starts, and both programs run;
#  3. a host told to stop during a load stops once it is done, and that join is refused with a
#     sentence that says so;
#  4. a host told to stop during a load that never ends (CTOR_MODE=libstuck) stops 5 s later
#     without it, saying so, and that joiner is told the host went away.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"
now() { date +%s%N; }
# loading: wait (5 s at most) until rpal ps lists a program loading.
loading() {
	for _ in $(seq 500); do "$RPAL" ps slow 2>/dev/null | grep -q ' loading ' && return 0; sleep 0.01; done
	return 1
}
start_host slow
t0=$(now)
CTOR_MODE=libslow "$RPAL" join slow "$PD/hosted_prog_ctor" slow </dev/null >"$tmp/slow.out" 2>&1 &
slow=$!
loading || bad "rpal ps never listed the slow program as loading"

# ---- 1
ps_start=$(now)
"$RPAL" ps slow >"$tmp/ps.out" 2>&1
rc=$?
ms=$((($(now) - ps_start) / 1000000))
[ $rc -eq 0 ] && [ $ms -lt 1000 ] && ok "rpal ps answers in $ms ms while a program loads for 2 s" ||
	bad "rpal ps while a program loads: exit $rc after $ms ms: $(cat "$tmp/ps.out")"
grep -Eq '^ +- loading .* [^ ]*hosted_prog_ctor slow$' "$tmp/ps.out" && ok "rpal ps lists it: $(grep loading "$tmp/ps.out")" ||
	bad "rpal ps does not list the program loading: $(cat "$tmp/ps.out")"
json=$("$RPAL" ps slow --json)
echo "$json" | python3 -c '
import json, sys
p = json.load(sys.stdin)["programs"]
sys.exit(not (len(p) == 1 and p[0]["pid"] is None and p[0]["state"] == "loading" and p[0]["argv"][1] == "slow"))' &&
	ok "rpal ps --json lists it with pid null and state loading" || bad "rpal ps --json during the load: $json"

# ---- 2
"$RPAL" join slow "$PD/hosted_prog_ctor" quick </dev/null >"$tmp/quick.out" 2>&1
rc=$?
ms=$((($(now) - t0) / 1000000))
grep -q "argc 2" "$tmp/quick.out" && [ $rc -eq 0 ] && [ $ms -ge 1500 ] &&
	ok "a join during the load ran once the load was done ($ms ms after the slow one began)" ||
	bad "a join during the load: exit $rc after $ms ms: $(cat "$tmp/quick.out")"
for _ in $(seq 500); do grep -q "libslow" "$tmp/slow.out" && break; sleep 0.01; done
grep -q "CTOR_MODE=libslow" "$tmp/slow.out" && ok "the slow program started and runs" ||
	bad "the slow program did not start: $(cat "$tmp/slow.out")"
kill -TERM $slow 2>/dev/null
wait $slow 2>/dev/null

# ---- 3
CTOR_MODE=libslow "$RPAL" join slow "$PD/hosted_prog_ctor" late </dev/null >"$tmp/late.out" 2>&1 &
late=$!
loading || bad "rpal ps never listed the third program as loading"
kill -TERM $hpid
t0=$(now)
wait $late
rc=$?
for _ in $(seq 1000); do kill -0 $hpid 2>/dev/null || break; sleep 0.01; done
ms=$((($(now) - t0) / 1000000))
kill -0 $hpid 2>/dev/null && bad "the host still runs $ms ms after SIGTERM" ||
	ok "the host told to stop during a load stopped $ms ms later"
[ $rc -ne 0 ] && grep -q 'host "slow" is stopping' "$tmp/late.out" &&
	ok "the join whose load it waited for is refused (exit $rc): $(cat "$tmp/late.out")" ||
	bad "the join during the stop: exit $rc: $(cat "$tmp/late.out")"

# ---- 4
start_host slow
CTOR_MODE=libstuck "$RPAL" join slow "$PD/hosted_prog_ctor" stuck </dev/null >"$tmp/stuck.out" 2>&1 &
stuck=$!
loading || bad "rpal ps never listed the stuck program as loading"
kill -TERM $hpid
t0=$(now)
for _ in $(seq 1500); do kill -0 $hpid 2>/dev/null || break; sleep 0.01; done
ms=$((($(now) - t0) / 1000000))
if kill -0 $hpid 2>/dev/null; then
	bad "the host still runs $ms ms after SIGTERM during a load that never ends"
	kill -9 $hpid
else
	grep -q "did not end within 5 s of the stop: stopping without it" "$tmp/slow.err" &&
		ok "the host told to stop during a load that never ends stopped $ms ms later: $(grep 'did not end' "$tmp/slow.err")" ||
		bad "the host stopped without saying why: $(cat "$tmp/slow.err")"
fi
wait $stuck
rc=$?
[ $rc -ne 0 ] && ok "its joiner exits $rc: $(cat "$tmp/stuck.out")" || bad "its joiner: exit $rc: $(cat "$tmp/stuck.out")"
exit $fail
