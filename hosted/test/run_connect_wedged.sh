#!/usr/bin/env bash
# run_connect_wedged.sh RPAL WEDGED_LISTENER PROGDIR - a host socket whose listener never accepts (its
# backlog full: a wedged host, or anything of our uid that took the name) holds no command for
# ever: rpal ps, rpal join and rpal host NAME each give up after 5 s, exit 2 and say why; a
# socket there of another uid gets no request from rpal ps or rpal join (as root only); and a
# host closes the descriptors an empty request carries.  A host answers rpal ps and a join at
# once beside 50 connections that send nothing, and beside a flood of them from two processes:
# requests sent 300 ms after connecting, 30 joins and 30 rpal ps; rpal join to a listener that
# accepts and never answers gives up after RPAL_JOIN_TIMEOUT (3 s here).
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 WEDGED=$2 PD=$3
. "$(dirname "$0")/hostlib.sh"
name=wedged-$$
sock=$RPAL_RUNTIME_DIR/host-$name.sock
rm -f "$sock"
"$WEDGED" "$sock" >"$tmp/wedged.out" &
wpid=$!
for _ in $(seq 500); do grep -q ready "$tmp/wedged.out" 2>/dev/null && break; sleep 0.01; done
grep -q ready "$tmp/wedged.out" || { bad "the wedged listener did not start"; exit 1; }
echo "a listener at $sock that never accepts: $(cat "$tmp/wedged.out") connection(s) fill its backlog"

# check WHAT GREP ARGS...: `timeout 12 rpal ARGS...` must exit 2 within 10 s, its stderr matching GREP.
check() {
	local what=$1 want=$2 start rc secs out
	shift 2
	start=$(date +%s%N)
	out=$(timeout 12 "$RPAL" "$@" 2>&1 </dev/null)
	rc=$?
	secs=$(( ($(date +%s%N) - start) / 1000000000 ))
	echo "  | $out"
	if [ $rc -eq 2 ] && [ $secs -lt 10 ] && echo "$out" | grep -q "$want"; then
		ok "$what: exit 2 after ${secs} s"
	else
		bad "$what: exit $rc after ${secs} s (124: still waiting in connect), stderr: $out"
	fi
}
# The four at once: each waits its 5 s.
cpids=
check "rpal ps $name" "did not accept the connection within 5 s" ps "$name" >"$tmp/c1" & cpids="$cpids $!"
check "rpal ps $name --json" "did not accept the connection within 5 s" ps "$name" --json >"$tmp/c2" & cpids="$cpids $!"
check "rpal join $name /bin/true" "did not accept the connection within 5 s" join "$name" /bin/true >"$tmp/c3" &
cpids="$cpids $!"
check "rpal host $name" "is taken" host "$name" >"$tmp/c4" & cpids="$cpids $!"
wait $cpids
cat "$tmp"/c[1-4]
grep -q "^FAIL" "$tmp"/c[1-4] && fail=1
[ -S "$sock" ] && ok "rpal host left the listener's socket in place" || bad "rpal host removed $sock"
kill "$wpid"
wait "$wpid" 2>/dev/null
rm -f "$sock"

# A socket at the host's name that another uid listens on (anyone who may
# write the runtime directory could put one there) gets no request: a
# request carries the joiner's environment and terminal.
if [ "$(id -u)" = 0 ] && command -v python3 >/dev/null; then
	python3 - "$sock" >"$tmp/other.out" 2>&1 <<'PY' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])
os.setgid(65534); os.setuid(65534)     # listen() records these credentials
s.listen(8)
print("ready", flush=True)
s.settimeout(30)
while True:
    try:
        c, _ = s.accept()
    except OSError:
        break
    c.settimeout(3)
    try:
        got = c.recv(1 << 20)
    except OSError:
        got = b""
    print("request of %d bytes" % len(got), flush=True)
PY
	opid=$!
	for _ in $(seq 500); do grep -q ready "$tmp/other.out" 2>/dev/null && break; sleep 0.01; done
	check "rpal ps $name, uid 65534's socket" "not a host of ours" ps "$name"
	check "rpal join $name /bin/true, uid 65534's socket" "not a host of ours" join "$name" /bin/true
	sleep 0.5
	if grep -q "request of [1-9]" "$tmp/other.out"; then
		bad "a socket of uid 65534 received a request: $(cat "$tmp/other.out")"
	else
		ok "uid 65534's socket received no request"
	fi
	kill "$opid" 2>/dev/null
	wait "$opid" 2>/dev/null
	rm -f "$sock"
else
	echo "skip (part): another uid's socket needs root and python3"
fi

# An empty request that carries descriptors: the host closes them (kept, they
# would fill its table until no join could pass it its three).
if command -v python3 >/dev/null; then
	start_host "$name"
	before=$(ls /proc/$hpid/fd | wc -l)
	python3 - "$sock" <<'PY'
import os, socket, sys
for _ in range(5):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    r, w = os.pipe()
    s.sendmsg([b""], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(__import__("array").array("i", [r, w, r]))))])
    s.recv(100)
    s.close(); os.close(r); os.close(w)
PY
	after=$(ls /proc/$hpid/fd | wc -l)
	[ "$after" -le "$before" ] && ok "5 empty requests with 3 descriptors each: the host holds $before, then $after" ||
		bad "5 empty requests with 3 descriptors each: the host held $before descriptors, now $after"

	# 50 connections that send nothing hold up no one: rpal ps and a join are answered at once.
	python3 - "$sock" >"$tmp/idle.out" 2>&1 <<'PY' &
import socket, sys, time
held = []
for _ in range(50):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    held.append(s)
print("ready", flush=True)
time.sleep(20)
PY
	ipid=$!
	for _ in $(seq 500); do grep -q ready "$tmp/idle.out" 2>/dev/null && break; sleep 0.01; done
	start=$(date +%s%N)
	out=$(timeout 20 "$RPAL" ps "$name" 2>&1)
	rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 ))
	[ $rc -eq 0 ] && [ $ms -lt 2000 ] && ok "rpal ps beside 50 idle connections: answered in $ms ms" ||
		bad "rpal ps beside 50 idle connections: exit $rc after $ms ms: $out"
	start=$(date +%s%N)
	out=$(timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 2>&1)
	rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 ))
	[ $rc -eq 0 ] && [ $ms -lt 2000 ] && ok "a join beside 50 idle connections: done in $ms ms" ||
		bad "a join beside 50 idle connections: exit $rc after $ms ms: $out"
	kill "$ipid" 2>/dev/null
	wait "$ipid" 2>/dev/null

	# Nor does a flood of them: two processes connect as fast as the host accepts, each holding
	# its last 100 connections, while 30 joins and 30 rpal ps run one after another.  5 of the
	# joins start a program; 25 ask for a script, which the host refuses once it has read the
	# request (a host loads 15 programs in its life).
	printf '#!/bin/sh\n' >"$tmp/script"
	chmod +x "$tmp/script"
	fpids=
	for _ in 1 2; do
		python3 - "$sock" <<'PY' &
import socket, sys, time
held, end = [], time.time() + 30
while time.time() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(1)
    try:
        s.connect(sys.argv[1])
    except OSError:
        s.close()
        continue
    held.append(s)
    if len(held) > 100:
        held.pop(0).close()
PY
		fpids="$fpids $!"
	done
	sleep 0.5
	# A client that sends its request 300 ms after it connected (a busy machine) is answered too.
	out=$(python3 - "$sock" <<'PY'
import socket, struct, sys, time
got = []
for _ in range(3):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # Blocking, for room in the backlog as rpal's connect waits (5 s at most).
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 5, 0))
    s.connect(sys.argv[1])
    s.settimeout(5)
    time.sleep(0.3)
    try:
        s.send(b"PS")
        got.append("answered" if s.recv(1 << 16).startswith(b'{"host"') else "wrong answer")
    except OSError as e:
        got.append(e.strerror)
    s.close()
print(", ".join(got))
PY
)
	[ "$out" = "answered, answered, answered" ] &&
		ok "3 requests sent 300 ms after connecting, beside a flood of connections: $out" ||
		bad "3 requests sent 300 ms after connecting, beside a flood of connections: $out"
	failed=0 worst=0
	for i in $(seq 30); do
		for what in join ps; do
			start=$(date +%s%N)
			case $what,$i in
			join,[1-5]) out=$(timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 2>&1 >/dev/null)
				rc=$? want=0 ;;
			join,*) out=$(timeout 20 "$RPAL" join "$name" "$tmp/script" 2>&1 >/dev/null)
				rc=$?; echo "$out" | grep -q "loads ELF programs" && want=$rc || want="2 with the host's refusal" ;;
			ps,*) out=$(timeout 20 "$RPAL" ps "$name" 2>&1 >/dev/null)
				rc=$? want=0 ;;
			esac
			ms=$(( ($(date +%s%N) - start) / 1000000 ))
			[ $ms -gt $worst ] && worst=$ms
			if [ "$rc" != "$want" ] || [ $ms -ge 2000 ]; then
				failed=$((failed + 1))
				echo "  | rpal $what: exit $rc (want $want) after $ms ms: $out"
			fi
		done
	done
	kill $fpids 2>/dev/null
	wait $fpids 2>/dev/null
	[ $failed = 0 ] && ok "30 joins and 30 rpal ps beside a flood of connections: all answered, the slowest in $worst ms" ||
		bad "30 joins and 30 rpal ps beside a flood of connections: $failed of 60 failed or took 2 s"
	kill "$hpid"
	wait "$hpid" 2>/dev/null

	# A listener of ours that accepts and never answers: rpal join gives up within its bound.
	rm -f "$sock"
	python3 - "$sock" >"$tmp/mute.out" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])
s.listen(8)
print("ready", flush=True)
held = []
s.settimeout(30)
while True:
    try:
        held.append(s.accept()[0])
    except OSError:
        break
PY
	mpid=$!
	for _ in $(seq 500); do grep -q ready "$tmp/mute.out" 2>/dev/null && break; sleep 0.01; done
	start=$(date +%s%N)
	# To a file: the listener holds the descriptors the request passed, a pipe's write end among them.
	RPAL_JOIN_TIMEOUT=3 timeout 30 "$RPAL" join "$name" /bin/true >"$tmp/mute.join" 2>&1 </dev/null &
	jpid=$!
	check "rpal ps $name, a listener that never answers" "did not answer" ps "$name"
	wait "$jpid"
	rc=$? secs=$(( ($(date +%s%N) - start) / 1000000000 ))
	out=$(cat "$tmp/mute.join")
	echo "  | $out"
	[ $rc -eq 2 ] && [ $secs -lt 10 ] && echo "$out" | grep -q "did not answer within 3 s" &&
		ok "rpal join to a listener that never answers: exit 2 after $secs s" ||
		bad "rpal join to a listener that never answers: exit $rc after $secs s (124: still waiting): $out"
	kill "$mpid" 2>/dev/null
	wait "$mpid" 2>/dev/null
	rm -f "$sock"
fi
exit $fail
