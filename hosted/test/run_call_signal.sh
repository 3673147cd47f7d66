#!/usr/bin/env bash
# run_call_signal.sh RPAL PROG_RPC - a signal handled by a program while one of its threads runs
# another program's receiver in a call is that program's: the kernel runs the handler on top of
# the receiver's code, and the handler's system calls are made as the signalled program's, on its
# thread; once it returns, the receiver's are handed to the receiver's own thread again.
#  1. prog_rpc signals: 5 calls that each spin 100 ms on the client's thread, a timer sending that
#     thread SIGUSR1 20 ms in: the handler's getpid() is the client's, its write(2) lands in the
#     client's pipe, pthread_sigmask() in it sees SIGUSR1 blocked, SIGUSR1 is not left blocked
#     after the call, and the server's getpid() after the handler is the server's.
#  1b. prog_rpc sigfill: the same with the handler installed with a full sa_mask (sigfillset), so
#     SIGSYS is blocked while it runs: its system calls through its libc are made as usual.
#  2. prog_rpc sigexit: the handler calls _exit(42) in the call: the client ends with status 42,
#     and the server's receiver it ran is lost with it (as after kill -9 of the client).
#  3. prog_rpc sigvec: 8 calls that keep values in the server's vector and other registers while
#     the client's handler clobbers them and makes failing system calls, on the server's stack and
#     on an alternate signal stack, alone and with a second signal's handler nested in it: the
#     server's registers come back intact, errno is set, both handlers' system calls are ours.
#  4. prog_rpc sigstorm: 300000 echo calls under a 37 us timer whose handler calls getpid(): some
#     handlers run where the call is entered or left (the call's system calls blocked, the
#     client's own fs base); the client must live through them.  Again with every signal blocked
#     in the handler (sigfillset).
#  5. prog_rpc sigfault: the handler writes to address 3 or so in the call: the client dies of
#     SIGSEGV, reported as a fault in its own handler; the server is not said to have faulted.
# Under rpal run and under rpal host + rpal join.  Prints what it checks; exits 0 pass, 1 fail,
# 77 skip.
set -u
RPAL=$1 PROG=$2
. "$(dirname "$0")/hostlib.sh"
. "$(dirname "$0")/calls_here.sh"
svc=callsig-$$

signals_ok() {
	local what=$1 rc=$2 out=$3 mask=${4:-}
	echo "$out" | sed 's/^/  | /'
	if [ "$rc" -eq 0 ] && echo "$out" | grep -q "^signals: 5 calls, the handler ran inside [1-5] of them; 0 went wrong$"; then
		ok "$what: the handler's getpid, write and signal mask were the client's, inside the call$mask; the server's syscalls after it were the server's"
	else
		bad "$what${mask:+ (}${mask# }${mask:+)}: rc $rc"
	fi
}

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-1" ::: "$PROG" signals "$svc-1" 5 2>&1)
signals_ok "rpal run" $? "$out"

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-m" ::: "$PROG" sigfill "$svc-m" 5 2>&1)
signals_ok "rpal run" $? "$out" " with every signal (SIGSYS too) blocked in the handler"

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-2" ::: "$PROG" sigexit "$svc-2" 2>&1)
echo "$out" | sed 's/^/  | /'
if echo "$out" | grep -q "^rpal run: \[1\] .* exited with status 42$" &&
	! echo "$out" | grep -q "^rpal run: \[0\] .* exited with status 42$"; then
	ok "rpal run: _exit(42) in the client's handler during a call ended the client, not the server"
else
	bad "rpal run: _exit(42) in the client's handler during a call did not end the client alone with 42"
fi

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-3" ::: "$PROG" sigvec "$svc-3" 8 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
if echo "$out" | grep -q "^sigvec: no AVX$"; then
	echo "skip: sigvec: no AVX"
elif [ "$rc" -eq 0 ] && echo "$out" | grep -q "^sigvec: 8 calls, the handler ran inside [1-8] of them; 0 went wrong$"; then
	ok "rpal run: the server's ymm, r12-r15, MXCSR and x87 control word survived the client's handlers (own stack, alternate stack, nested), whose failed calls set errno"
else
	bad "rpal run: sigvec: rc $rc"
fi

# storm SERVICE [fill] WHAT: 300000 calls under the timer, every handler's getpid() ours.
storm() {
	local out rc
	out=$(timeout 60 "$RPAL" run "$PROG" server "$1" ::: "$PROG" sigstorm "$1" 300000 $2 2>&1)
	rc=$?
	echo "$out" | sed 's/^/  | /'
	if [ "$rc" -eq 0 ] && echo "$out" | grep -q "^sigstorm: 300000 of 300000 calls, the handler ran [1-9][0-9]* times, 0 of them with another pid$"; then
		ok "rpal run: $3"
	else
		bad "rpal run: sigstorm $2: rc $rc"
	fi
}
storm "$svc-4" "" "the client lived through a handler's system calls at every point of 300000 calls"
storm "$svc-5" fill "the same with every signal (SIGSYS too) blocked in the handler"

out=$(timeout 60 "$RPAL" run "$PROG" server "$svc-f" ::: "$PROG" sigfault "$svc-f" 2>&1)
echo "$out" | sed 's/^/  | /'
if echo "$out" | grep -q "^rpal run: \[1\] .* was killed by signal 11" &&
	echo "$out" | grep -q "in its own signal handler during an RPAL call" &&
	! echo "$out" | grep -q "^rpal run: \[0\] .* failed: signal 11"; then
	ok "rpal run: a fault in the client's handler during a call killed the client, and the server is not blamed for it"
else
	bad "rpal run: a fault in the client's handler during a call was not the client's"
fi

start_host "$svc"
"$RPAL" join "$svc" "$PROG" server "$svc-h" >"$tmp/server.out" 2>&1 &
jpid=$!
out=$(timeout 60 "$RPAL" join "$svc" "$PROG" signals "$svc-h" 5 2>&1)
rc=$?
wait $jpid
signals_ok "rpal host + rpal join" $rc "$out"
"$RPAL" join "$svc" "$PROG" server "$svc-hm" >"$tmp/server-m.out" 2>&1 &
jpid=$!
out=$(timeout 60 "$RPAL" join "$svc" "$PROG" sigfill "$svc-hm" 5 2>&1)
rc=$?
wait $jpid
signals_ok "rpal host + rpal join" $rc "$out" " with every signal (SIGSYS too) blocked in the handler"
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null
exit $fail
