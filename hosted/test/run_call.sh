#!/usr/bin/env bash
# run_call.sh RPAL PROG_RPC EXAMPLES_DIR - hosted mode end to end, through `rpal run`:
#  1. 1 client thread x 1,000,000 checksummed round trips, each an RPAL call (the server program's
#     call counter says so), then 4 threads x 250,000 into one server;
#     gettid() inside a handler run by a call is the server thread's; a handler blocked in read()
#     does not block the sender (lazy switch); the server program's call cycles grow by at least
#     what handlers that spin a known number of TSC cycles ran, and by no more than the client's
#     loop took (time-slice accounting); 200 threads that each make a call and end leave
#     nothing in the heap (their sender records go with them); calls run while another server
#     thread re-arms the connections and polls the set;
#     with protection keys on (RPAL_PROTECT_PEERS=2, where the CPU has them), no call leaves the
#     server's open windows in the sender's PKRU; with them off in the server (0), a call whose
#     handler hands a syscall off (it comes back through a signal handler) leaves the sender's
#     own key open;
#     a plain process talks to a hosted server (connected mode, no calls), pausing between round
#     trips so that the server sleeps for each one: no message lost, and the server's doorbells are
#     emptied as it sleeps (no pipe left holding more than a byte or two);
#  2. a fault inside a handler run by a call: the sender's send fails with ECONNRESET, the server
#     is reported failed, the sender goes on and exits 0 (also when the handler overflows its stack
#     and the sender's thread has an alternate signal stack); a SIGSEGV sent with kill() passes on as
#     if the launcher had installed no handler: it ends the process, or, where SIGSEGV was ignored
#     when `rpal run` started, it is ignored and the launcher's handler stays;
#  3. the unchanged connected-mode examples (echo_server, echo_client) run hosted;
#  4. a program whose client thread talks to its own server thread: the handler runs on the server
#     thread every time (no call into a receiver of one's own program).
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PROG=$2 EX=$3
export RPAL_RUNTIME_DIR=${RPAL_RUNTIME_DIR:-$(mktemp -d)}
. "$(dirname "$0")/calls_here.sh"
svc=call-$$

# stress THREADS N MIN_CALLS [meddle]: THREADS x N round trips, every message checksummed both ways.
stress() {
	local threads=$1 n=$2 min_calls=$3 meddle=${4:-} total=$(($1 * $2))
	out=$(timeout 120 "$RPAL" run --stat "$PROG" server "$svc-$threads$meddle" $meddle ::: "$PROG" client "$svc-$threads$meddle" "$threads" "$n" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  | /'
	[ $rc -eq 0 ] && ok "rpal run exited 0" || bad "rpal run exited $rc"
	echo "$out" | grep -q "client: $total round trips in .* 0 errors" && ok "$threads sender(s): $total round trips, 0 errors" ||
		bad "round trips"
	# The stress, then 205 echoes from short-lived threads (5 of them a warm-up).
	echo "$out" | grep -q "server: served $((total + 205)), bad 0, run twice at once 0" &&
		ok "server checked $((total + 205)) checksums, never ran on two threads at once" || bad "server checksums or concurrency"
	calls=$(echo "$out" | sed -n 's/^client: stat \[0\] .* calls=\([0-9]*\) .*/\1/p')
	[ "${calls:-0}" -ge "$min_calls" ] && ok "$calls RPAL calls into the server (at least $min_calls)" ||
		bad "only ${calls:-0} RPAL calls (wanted $min_calls): the call path was not used"
	# Never more calls than requests sent before the stat line: the stress, 205 from short-lived
	# threads, GETTID, BLOCK and 1,600 SPINs for each run of the accounting probe (it runs again
	# when a timed call was preempted).
	local runs=$((1 + $(echo "$out" | grep -c '^client: accounting run [0-9]*: .*; again$')))
	local sent=$((total + 207 + 1600 * runs))
	[ "${calls:-0}" -le $sent ] && ok "no call counted twice (at most $sent)" ||
		bad "$calls calls counted for $sent requests"
	echo "$out" | grep -q "gettid in handler is the server's thread" && ok "gettid() in a call is the server thread's" ||
		bad "gettid in a call"
	grow=$(echo "$out" | sed -n 's/^client: 200 short-lived sender threads (\([0-9]*\) calls, 0 errors): heap grew by \(-*[0-9]*\) bytes/\1 \2/p')
	# Each sender thread's record (40 bytes + malloc's 16) goes when the thread ends.
	[ -n "$grow" ] && [ "${grow%% *}" -ge 100 ] && [ "${grow##* }" -lt 2000 ] &&
		ok "200 threads that made calls and ended left ${grow##* } bytes in the heap (${grow%% *} calls)" ||
		bad "short-lived sender threads: ${grow:-no report} (calls, bytes left)"
	echo "$out" | grep -q "^client: accounting ok: [1-9]" && ok "callee cycles counted: at least each call's spin, at most the loop's time" ||
		bad "time-slice accounting: $(echo "$out" | grep "^client: accounting" || echo no report)"
	echo "$out" | grep -q "the blocked read completed on the server's thread" &&
		echo "$out" | grep -q "send returned in [0-9] ms" && ok "a blocking read in a call does not block the sender" ||
		bad "blocking read in a call"
}
# One sender: every message is a call.  Several senders on 2 CPUs: a busy server takes the
# others' messages through the ring (RCV_PENDING) in the same call; sleeping senders are woken
# by syscalls that the lazy switch hands to the server's thread.
stress 1 1000000 1000000
stress 4 250000 10000
# While calls run, another server thread re-arms the connections and polls the set: the parked
# owner's lock-free path must give way to it (epoll.c, set_take) without losing a message.
stress 2 100000 10000 meddle
mods=$(echo "$out" | sed -n 's/^server: another thread re-armed connections \([0-9]*\) times and polled the set \([0-9]*\) times/\1 \2/p')
[ "${mods%% *}" -gt 100 ] 2>/dev/null && [ "${mods##* }" -gt 100 ] 2>/dev/null &&
	ok "another thread re-armed connections and polled the set (${mods% *} and ${mods#* } times) while calls ran" ||
	bad "the meddling thread did not get in (${mods:-nothing})"

# Protection keys: the server parks inside rpal_epoll_wait() with its windows on its peers open.
# keys_run PROTECT SVC N: server and a client of N round trips, with RPAL_PROTECT_PEERS=PROTECT;
# sets out, rc, and stat (the client's "stat [0]" line: the server program's counters).
keys_run() {
	out=$(RPAL_PROTECT_PEERS=$1 timeout 60 "$RPAL" run --stat "$PROG" server "$svc-$2" ::: "$PROG" client "$svc-$2" 1 "$3" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  | /'
	stat=$(echo "$out" | grep "^client: stat \[0\] ")
}
if grep -qw ospke /proc/cpuinfo; then
	keys_run 2 k 20000
	calls=$(echo "$stat" | sed -n 's/.* calls=\([0-9]*\) .*/\1/p')
	[ $rc -eq 0 ] && [ "${calls:-0}" -ge 20000 ] && echo "$out" | grep -q "client: PKRU changed across 0 of 2[0-9]\{4\} sends" &&
		ok "protection keys on: $calls calls, none left the server's windows open in the sender" ||
		bad "protection keys on: rc $rc, ${calls:-0} calls, or PKRU changed across a call"
	# Keys off for the server: the sender's own key must survive a call that hands off.
	keys_run 0 j 2000
	handoffs=$(echo "$stat" | sed -n 's/.* handoffs=\([0-9]*\).*/\1/p')
	[ $rc -eq 0 ] && [ "${handoffs:-0}" -ge 1 ] && echo "$out" | grep -q "client: PKRU changed across 0 of" &&
		ok "protection keys off in the server: the sender's own key is open again after $handoffs hand-offs" ||
		bad "protection keys off in the server: rc $rc, ${handoffs:-0} hand-offs, or PKRU changed across a call"
else
	echo "skipped: protection keys (no ospke in /proc/cpuinfo)"
fi

# A plain-process client: the hosted server sleeps for each message and is woken by a doorbell.
log=$(mktemp)
timeout 60 "$RPAL" run "$PROG" server "$svc-x" > "$log" 2>&1 &
pid=$!
out=$(PROG_RPC_GAP_US=50 timeout 60 "$PROG" client "$svc-x" 1 3000 2>&1)
rc=$?
wait "$pid"
src=$?
echo "$out" | sed 's/^/  | /'
sed 's/^/  | /' "$log"
unread=$(sed -n 's/^server: largest unread pipe \([0-9]*\) bytes/\1/p' "$log")
[ $rc -eq 0 ] && [ $src -eq 0 ] && echo "$out" | grep -q "client: 3000 round trips in .* 0 errors" &&
	grep -q "server: served 3000, bad 0" "$log" && ok "a plain process and a hosted server: 3000 round trips" ||
	bad "plain client to hosted server: rc $rc, server rc $src"
[ -n "$unread" ] && [ "$unread" -le 2 ] && ok "the hosted server's doorbells were emptied ($unread bytes left at most)" ||
	bad "a pipe of the hosted server holds ${unread:-?} unread bytes"
rm -f "$log"

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-2" ::: "$PROG" crasher "$svc-2" 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 1 ] && ok "rpal run exits 1 when a program failed" || bad "rpal run exited $rc after a fault"
echo "$out" | grep -q "failed: signal 11 .*inside an RPAL call" && ok "the faulting program is reported failed" ||
	bad "no failure report"
echo "$out" | grep -q "send of CRASH returned -104" && ok "the sender's send failed with ECONNRESET" ||
	bad "sender's send after the fault"
echo "$out" | grep -q "\[1\] .* exited with status 0" && ok "the sender went on and exited 0" || bad "sender status"
# kill -9 of a caller while its thread runs the server's handler: the server fails, reported as
# having lost its receiver with that caller, not as a fault of its own.
tmp_k=$(mktemp)
"$RPAL" run "$PROG" server "$svc-k" ::: "$PROG" crasher "$svc-k" spin >"$tmp_k" 2>&1 &
rk=$!
for _ in $(seq 1000); do grep -q "spinning in a call" "$tmp_k" && break; sleep 0.01; done
kpid=$(sed -n 's/.*spinning in a call, pid \([0-9]*\).*/\1/p' "$tmp_k")
sleep 0.2
[ -n "$kpid" ] && kill -9 "$kpid"
for _ in $(seq 3000); do kill -0 $rk 2>/dev/null || break; sleep 0.01; done
kill -9 $rk 2>/dev/null
wait $rk
rc=$?
out=$(cat "$tmp_k")
echo "$out" | sed 's/^/  | /'
echo "$out" | grep -q "\[1\] .* was killed by signal 9" && echo "$out" | grep -q "\[0\] .* failed: .*lost" &&
	! echo "$out" | grep -q "\[0\] .*at address 0x0" && [ $rc -eq 1 ] &&
	ok "kill -9 of a caller inside a call: the server is reported as having lost its receiver with it" ||
	bad "kill -9 of a caller inside a call: rc $rc, wrong report"
rm -f "$tmp_k"
# A receiver that overflows its stack in a call: the launcher's handler runs on the sender
# thread's alternate stack, and only the receiver fails.
out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-o" ::: "$PROG" crasher "$svc-o" overflow 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 1 ] && echo "$out" | grep -q "failed: signal 11 .*inside an RPAL call" &&
	echo "$out" | grep -q "send of CRASH returned -104" && echo "$out" | grep -q "\[1\] .* exited with status 0" &&
	ok "a stack overflow inside a call fails only the receiver (sender with an alternate stack)" ||
	bad "stack overflow inside a call: rpal run exited $rc"

# Signals that are not the launcher's go on as if it had installed nothing (host.c, chain): a
# kill -SEGV ends `rpal run` by SIGSEGV; with SIGSEGV ignored when it started, the kill is ignored
# and the launcher's fault handler stays installed.
# sig_run NAME [ignore]: starts a hosted server; sets pid and log once it is ready.
sig_run() {
	log=$(mktemp)
	if [ -n "${2:-}" ]; then
		(trap '' SEGV; exec timeout 60 "$RPAL" run "$PROG" server "$svc-$1") > "$log" 2>&1 &
	else
		timeout 60 "$RPAL" run "$PROG" server "$svc-$1" > "$log" 2>&1 &
	fi
	pid=$!
	for _ in $(seq 300); do grep -q "server: ready" "$log" && break; sleep 0.02; done
}
sig_run s1
kill -SEGV "$(pgrep -P "$pid")" 2>/dev/null
wait "$pid"
rc=$?
# timeout reports a child killed by a signal as 128+signal.
[ $rc -eq 139 ] && ok "kill -SEGV ends rpal run by SIGSEGV" || bad "kill -SEGV: rpal run exited $rc"
rm -f "$log"
sig_run s2 ignore
child=$(pgrep -P "$pid")
kill -SEGV "$child" 2>/dev/null
sleep 0.2
caught=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$child/status" 2>/dev/null)
kill -0 "$child" 2>/dev/null && [ -n "$caught" ] && [ $((0x$caught >> 10 & 1)) -eq 1 ] &&
	ok "SIGSEGV ignored at start: kill -SEGV ignored, the fault handler still installed" ||
	bad "SIGSEGV ignored at start: after kill -SEGV, alive and caught: ${caught:-gone}"
kill "$child" 2>/dev/null
wait "$pid" 2>/dev/null
rm -f "$log"

# Same source, both modes: the connected-mode examples, unchanged, hosted.  The server never
# exits, so stop the process once the client is done.
log=$(mktemp)
timeout 60 "$RPAL" run "$EX/echo_server" "$svc-3" ::: "$EX/echo_client" "$svc-3" > "$log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "echo_client exited" "$log" && break; sleep 0.1; done
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
sed 's/^/  | /' "$log"
grep -q "echo_client: 1000 messages echoed" "$log" && grep -q "echo_client exited with status 0" "$log" &&
	ok "examples/echo_server + echo_client, unchanged, under rpal run" || bad "examples under rpal run"
rm -f "$log"

out=$(timeout 60 "$RPAL" run "$PROG" selfcall "$svc-4" 20000 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
if [ $rc -eq 0 ] && echo "$out" | grep -q "^selfcall: 20000 round trips, gettid() in the handler was not the server thread's in 0$"; then
	ok "a program's client thread and its own server thread: every handler ran on the server thread"
else
	bad "selfcall: rc $rc"
fi
exit $fail
