#!/usr/bin/env bash
# run_setuid.sh RPAL PROG_RPC - a program of a launcher run as root that drops its privileges
# (libc's setresuid and setresgid to 65534, in a program with two threads: both change, the
# program is not killed) still wakes another program's parked receiver: the kernel refuses
# it pidfd_getfd of that program, and the launcher passes the receiver's kick eventfd on instead.
# Under `rpal run` and under `rpal host` + `rpal join`: prog_rpc's dropper makes 200 GETTID round
# trips into prog_rpc's server, each an RPAL call whose syscall is handed off to the server's
# sleeping thread, which only a kick wakes.  Each must complete within 10 s, librpal must not say
# "cannot wake a receiver", and the dropper must stay non-dumpable.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PROG=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root: a program can drop its privileges only from root"; exit 77; }
. "$(dirname "$0")/hostlib.sh"
. "$(dirname "$0")/calls_here.sh"
svc=setuid-$$
N=200

# check WHAT RC OUT: the dropper's report in OUT, RC the status of what ran it.
check() {
	local what=$1 rc=$2 out=$3
	echo "$out" | sed 's/^/  | /'
	local threads
	threads=$(echo "$out" | sed -n 's/^dropper: \([0-9]*\) of \1 threads run as uid and gid 65534$/\1/p')
	[ "${threads:-0}" -ge 2 ] &&
		ok "$what: libc's setresuid and setresgid changed all $threads threads of the dropper" ||
		bad "$what: not every thread of the dropper changed its ids, or it was killed"
	echo "$out" | grep -q "^dropper: uid 65534 gid 65534, dumpable 0, pidfd_getfd of the server (pid [0-9]*): Operation not permitted" &&
		ok "$what: the dropper runs as uid 65534, non-dumpable, and may not take the server's descriptors" ||
		bad "$what: the dropper did not drop its privileges, or pidfd_getfd was not refused"
	if echo "$out" | grep -q "stalled for 10 s"; then
		bad "$what: an RPAL call stalled: the server's parked thread was never woken"
	elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		bad "$what: timed out (rc $rc): the calls stalled"
	fi
	local line hand
	line=$(echo "$out" | grep "^dropper: $N round trips in ")
	hand=$(echo "$line" | sed -n 's/.* \([0-9]*\) hand-offs, dumpable 0$/\1/p')
	[ "$rc" -eq 0 ] && [ "${hand:-0}" -ge 1 ] &&
		ok "$what: $N round trips completed (${hand} hand-offs woke the server's thread), still non-dumpable" ||
		bad "$what: rc $rc, ${line:-no report}"
	echo "$out" | grep -q "cannot wake a receiver" && bad "$what: librpal said it cannot wake a receiver" ||
		ok "$what: no \"cannot wake a receiver\" line"
}

out=$(timeout 40 "$RPAL" run "$PROG" server "$svc-r" ::: "$PROG" dropper "$svc-r" $N 2>&1)
check "rpal run" $? "$out"

start_host "$svc"
"$RPAL" join "$svc" "$PROG" server "$svc-h" >"$tmp/server.out" 2>&1 &
jpid=$!
out=$(timeout 40 "$RPAL" join "$svc" "$PROG" dropper "$svc-h" $N 2>&1)
rc=$?
kill $jpid 2>/dev/null
wait $jpid 2>/dev/null
check "rpal host + rpal join" $rc "$out
$(cat "$tmp/server.out")"
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null
exit $fail
