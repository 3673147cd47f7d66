#!/usr/bin/env bash
# run_host_fail.sh RPAL PROG_RPC - a program that fails inside an RPAL call under `rpal host` does not
# end silently: its joiner prints the sentence `rpal run` prints, and the host's stderr names it.
#  1. prog_rpc crasher makes the server fault inside a call: the server's joiner says "PATH (pid N)
#     failed: signal 11 ... inside an RPAL call" and exits 139; the host's stderr says the same.
#  2. kill -9 of a crasher whose thread spins in the server's handler: the crasher's joiner says it
#     "ended inside an RPAL call: the receiver it was running is lost", the server's joiner that "a
#     caller's thread ended (killed, or by an execve) while it ran this program's receiver"; the
#     host names both.
#  3. kill -9 of the server while its handler spins on a caller's thread, before the handler's
#     system call: the call fails with ECONNRESET (-104), and so does the next send.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PROG=$2
. "$(dirname "$0")/hostlib.sh"
. "$(dirname "$0")/calls_here.sh"
svc=hfail-$$
# A host of its own for each part (start_host fN): the crasher counts the calls into program 0.
# serve N: a joined server of service $svc-N in host fN, ready: program 0; its joiner's pid in $sj.
serve() {
	timeout 60 "$RPAL" join "f$1" "$PROG" server "$svc-$1" >"$tmp/srv$1.out" 2>&1 &
	sj=$!
	for _ in $(seq 1000); do grep -q "server: ready" "$tmp/srv$1.out" && break; sleep 0.01; done
}
# kill_after FILE TEXT SECONDS: once FILE shows TEXT followed by a pid, kill -9 that pid SECONDS
# later; the pid in $killed.
kill_after() {
	for _ in $(seq 1000); do grep -q "$2" "$1" && break; sleep 0.01; done
	killed=$(sed -n "s/.*$2[^0-9]*\([0-9]*\).*/\1/p" "$1")
	sleep "$3"
	[ -n "$killed" ] && kill -9 "$killed"
}
# named_pid FILE: the pid that the first "(pid N)" in FILE names.
named_pid() { sed -n 's/.*(pid \([0-9]*\)).*/\1/p' "$1" | head -1; }

# ---- 1. a fault inside a call
start_host f1
serve 1
out=$(timeout 60 "$RPAL" join f1 "$PROG" crasher "$svc-1" 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 0 ] && echo "$out" | grep -q "send of CRASH returned -104" && ok "the crasher's send failed with ECONNRESET, it exited 0" ||
	bad "crasher: rc $rc"
wait $sj
rc=$?
sed 's/^/  | /' "$tmp/srv1.out"
line=$(grep "^rpal join: $PROG (pid [0-9]*) failed: signal 11 (.*) inside an RPAL call, at address" "$tmp/srv1.out")
[ $rc -eq 139 ] && [ -n "$line" ] && ok "the server's joiner exits 139 and says: $line" ||
	bad "the server's joiner: rc $rc, no failure sentence"
spid=$(named_pid "$tmp/srv1.out")
grep -q "^rpal host f1: $PROG (pid ${spid:-none}) failed: signal 11 .* inside an RPAL call" "$tmp/f1.err" &&
	ok "the host's stderr names the failed program: $(grep "pid $spid" "$tmp/f1.err")" ||
	bad "the host's stderr: $(cat "$tmp/f1.err")"

kill -TERM $hpid
wait $hpid

# ---- 2. kill -9 of a caller inside a call
start_host f2
serve 2
timeout 60 "$RPAL" join f2 "$PROG" crasher "$svc-2" spin >"$tmp/cr2.out" 2>&1 &
cj=$!
kill_after "$tmp/cr2.out" "spinning in a call" 0.2
kpid=$killed
wait $cj
crc=$?
wait $sj
src=$?
sed 's/^/  | crasher: /' "$tmp/cr2.out"
sed 's/^/  | server: /' "$tmp/srv2.out"
line=$(grep "^rpal join: $PROG (pid ${kpid:-none}) ended inside an RPAL call: the receiver it was running is lost" "$tmp/cr2.out")
[ $crc -eq 137 ] && [ -n "$line" ] && ok "the killed caller's joiner exits 137 and says: $line" ||
	bad "the killed caller's joiner: rc $crc"
line=$(grep "^rpal join: $PROG (pid [0-9]*) failed: a caller's thread ended (killed, or by an execve) while it ran this program's receiver" "$tmp/srv2.out")
[ $src -ne 0 ] && [ -n "$line" ] && ok "the server's joiner exits $src and says: $line" ||
	bad "the server's joiner: rc $src, no failure sentence"
spid=$(named_pid "$tmp/srv2.out")
grep -q "^rpal host f2: $PROG (pid ${kpid:-none}) ended inside an RPAL call" "$tmp/f2.err" &&
	grep -q "^rpal host f2: $PROG (pid ${spid:-none}) failed: a caller's thread ended" "$tmp/f2.err" &&
	ok "the host's stderr names both" || bad "the host's stderr: $(cat "$tmp/f2.err")"

kill -TERM $hpid
wait $hpid

# ---- 3. kill -9 of the callee inside a call, before its system call
start_host f3
serve 3
timeout 60 "$RPAL" join f3 "$PROG" calleekill "$svc-3" >"$tmp/ck.out" 2>&1 &
cj=$!
kill_after "$tmp/ck.out" "calling, server pid" 0.5
wait $cj
crc=$?
wait $sj
sed 's/^/  | /' "$tmp/ck.out"
[ $crc -eq 0 ] && grep -qx "calleekill: send -104" "$tmp/ck.out" && grep -qx "calleekill: send -104 after it" "$tmp/ck.out" &&
	ok "a call whose server was killed before its handler's system call fails with ECONNRESET, and so does the next send" ||
	bad "the caller of a killed server: rc $crc"
kill -TERM $hpid
wait $hpid
exit $fail
