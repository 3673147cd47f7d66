#!/usr/bin/env bash
# run_hostile.sh RPAL PROG_HOSTILE - what a joined program does to its own process does not end
# another program of the host, nor itself.
#  1. A program that execs another rpal program (prog_hostile exec prog_hostile client ...): its
#     pid and parent stay the host's, its environment still names the host's block, its memory is
#     its own.  With no server, the client says it cannot connect and exits 1 (its librpal must not
#     read the block through an address that its new image does not map: signal 11); with a joined
#     server, the exec'd client is an ordinary peer, its messages are answered, and the server runs
#     on (it must not read the client's arena through the host's region: signal 11) and serves a
#     joined client with RPAL calls.
#  2. A client thread that blocks every signal, or a client that ignores SIGSYS, before its first
#     send, sends into a handler that makes a system call: the kernel's SIGSYS for it would find
#     the signal blocked or ignored and end the client, and the server with the receiver it ran.
#     Both run on, the answers come, and the server quits when told.
#  3. A client whose thread runs the server's handler in a call (it spins for seconds) while its
#     main thread execs `sleep 4`: the exec ends that thread and the receiver with it.  The
#     launcher sees the exec, says so, and fails the server at once, not when the new image
#     ends: under rpal run the server's failure is reported before the client's exit; under
#     rpal host the server's joiner ends within 3 s of the exec, with the client's still running.
#     A client killed there instead is not taken for one that called execve: rpal run says it
#     ended inside a call.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PROG=$2
. "$(dirname "$0")/hostlib.sh"
. "$(dirname "$0")/calls_here.sh"
svc=hostile-$$
start_host hs
# state PID: the state `rpal ps` gives the program PID.
state() { "$RPAL" ps hs | awk -v p="$1" '$1 == p { print $2 }'; }

# ---- 1. execve
out=$(timeout 30 "$RPAL" join hs "$PROG" exec "$PROG" client "$svc-none" ping 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 1 ] && echo "$out" | grep -q "client: connect $svc-none" &&
	ok "an exec'd rpal program with no server says it cannot connect and exits 1" ||
	bad "an exec'd rpal program with no server: rc $rc"

timeout 60 "$RPAL" join hs "$PROG" server "$svc" >"$tmp/srv.out" 2>&1 &
sj=$!
for _ in $(seq 1000); do grep -q "server: ready" "$tmp/srv.out" && break; sleep 0.01; done
spid=$("$RPAL" ps hs --json | grep -o '"pid": [0-9]*' | tail -1 | sed 's/.*: //')
out=$(timeout 30 "$RPAL" join hs "$PROG" exec "$PROG" client "$svc" syscall ping 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c 'answer')" = 2 ] &&
	ok "an exec'd rpal client is answered by a joined server" || bad "the exec'd client: rc $rc"
st=$(state "$spid")
[ "$st" = running ] && ok "the server (pid $spid) is still running" ||
	bad "the server (pid $spid) is $st: $(cat "$tmp/srv.out")"
out=$(timeout 30 "$RPAL" join hs "$PROG" client "$svc" syscall ping 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "a joined client is answered after it" || bad "a joined client after it: rc $rc, $out"

# ---- 2. a sender whose thread cannot take SIGSYS
for how in blockall ignsys; do
	out=$(timeout 30 "$RPAL" join hs "$PROG" client "$svc" $how syscall ping syscall 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  | /'
	[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c 'answer')" = 3 ] &&
		ok "$how: the client's sends into a handler that makes a system call are answered, exit 0" ||
		bad "$how: the client exits $rc"
	sleep 0.3 # the host marks a program failed as it reaps it
	st=$(state "$spid")
	[ "$st" = running ] && ok "$how: the server is still running" ||
		bad "$how: the server is $st: $(cat "$tmp/srv.out")"
done
timeout 30 "$RPAL" join hs "$PROG" client "$svc" quit >/dev/null 2>&1
wait $sj
rc=$?
[ $rc -eq 0 ] && grep -q "server: quit" "$tmp/srv.out" && ok "the server quits when told, exit 0" ||
	bad "the server's joiner: rc $rc: $(cat "$tmp/srv.out")"
"$RPAL" ps hs | sed 's/^/  | /'

# ---- 3. execve while a thread runs another program's receiver
timeout 30 "$RPAL" run "$PROG" server "$svc-r" ::: "$PROG" client "$svc-r" ping execspin >"$tmp/run3.out" 2>&1
sed 's/^/  | /' "$tmp/run3.out"
lost=$(grep -n "called execve inside an RPAL call: the receiver it was running is lost" "$tmp/run3.out" | cut -d: -f1)
failed=$(grep -n "failed: a caller's thread ended (killed, or by an execve)" "$tmp/run3.out" | cut -d: -f1)
exited=$(grep -n "\[1\] .* exited with status 0" "$tmp/run3.out" | cut -d: -f1)
[ -n "$lost" ] && [ -n "$failed" ] && [ -n "$exited" ] && [ "$failed" -lt "$exited" ] &&
	ok "rpal run: the exec is reported and the server fails before the exec'd client ends" ||
	bad "rpal run: lines $lost, $failed, $exited"

timeout 30 "$RPAL" run "$PROG" server "$svc-k" ::: "$PROG" client "$svc-k" ping killspin >"$tmp/run4.out" 2>&1
grep -q "ended inside an RPAL call: the receiver it was running is lost" "$tmp/run4.out" &&
	! grep -q "called execve" "$tmp/run4.out" &&
	ok "rpal run: a client killed inside the call ended inside it, no execve said" ||
	bad "rpal run, a client killed inside the call: $(cat "$tmp/run4.out")"

timeout 60 "$RPAL" join hs "$PROG" server "$svc-h" >"$tmp/srv3.out" 2>&1 &
sj=$!
for _ in $(seq 1000); do grep -q "server: ready" "$tmp/srv3.out" && break; sleep 0.01; done
timeout 60 "$RPAL" join hs "$PROG" client "$svc-h" ping execspin >"$tmp/cl3.out" 2>&1 &
cj=$!
for _ in $(seq 1000); do grep -q "exec sleep 4" "$tmp/cl3.out" && break; sleep 0.01; done
for _ in $(seq 300); do kill -0 $sj 2>/dev/null || break; sleep 0.01; done
if kill -0 $sj 2>/dev/null; then
	bad "rpal host: the server's joiner still runs 3 s after the exec: $(cat "$tmp/srv3.out")"
else
	kill -0 $cj 2>/dev/null && ok "rpal host: the server's joiner ended within 3 s of the exec, the client's still runs" ||
		bad "rpal host: the client's joiner ended too early: $(cat "$tmp/cl3.out")"
	grep -q "failed: a caller's thread ended" "$tmp/srv3.out" && ok "its joiner says why: $(grep failed "$tmp/srv3.out")" ||
		bad "the server's joiner: $(cat "$tmp/srv3.out")"
fi
grep -q "called execve inside an RPAL call" "$tmp/hs.err" && ok "the host names the client" ||
	bad "the host: $(cat "$tmp/hs.err")"
wait $cj
rc=$?
[ $rc -eq 0 ] && ok "the exec'd client's joiner exits 0 (sleep's status)" || bad "the client's joiner: rc $rc"

kill -TERM $hpid
wait $hpid
exit $fail
