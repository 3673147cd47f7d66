#!/usr/bin/env bash
# run_join_refused.sh RPAL PROGDIR - joins that `rpal host` refuses cost it nothing:
#  1. 16 refused joins (a shell script) leave every entry of the host free: a good join then
#     starts, and `rpal ps` counts only it.
#  2. 15 joins of a PIE whose main is not exported are refused before loading: a good join then
#     starts, `rpal ps` counts 2 programs loaded.
#  3. Statically linked programs (an executable, a static PIE) are refused as such.
#  4. A join of a FIFO is refused at once, and the host answers `rpal ps` meanwhile.
#  5. Requests built by hand: 16 with a working directory that does not exist are refused
#     before loading (a good join then starts); an umask out of range is refused.
#  6. A join with more arguments than a host takes (5000) is refused by rpal join, saying why.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"
start_host r
loaded() { "$RPAL" ps r --json | grep -o '"programs_loaded": [0-9]*' | sed 's/.*: //'; }
# good: a join that must start and exit 0
good() {
	out=$(timeout 20 "$RPAL" join r "$PD/hosted_prog_exit" main 0 2>&1)
	rc=$?
	[ $rc -eq 0 ] && ok "$1: a good join starts and exits 0 ($(loaded) loaded)" || bad "$1: good join rc $rc: $out"
}

# ---- 1. refused before loading
printf '#!/bin/sh\necho hi\n' >"$tmp/script.sh"
chmod +x "$tmp/script.sh"
refused=0
for _ in $(seq 16); do
	timeout 20 "$RPAL" join r "$tmp/script.sh" >/dev/null 2>&1
	[ $? -eq 2 ] && refused=$((refused + 1))
done
[ $refused -eq 16 ] && ok "16 joins of a shell script refused" || bad "only $refused of 16 shell scripts refused"
good "after 16 refused joins"
n=$(loaded)
[ "$n" = 1 ] && ok "rpal ps: 1 program loaded" || bad "rpal ps: $n programs loaded, not 1"

# ---- 2. no exported main
refused=0
for _ in $(seq 15); do
	out=$(timeout 20 "$RPAL" join r "$PD/hosted_prog_noexport" main 0 2>&1)
	[ $? -eq 2 ] && echo "$out" | grep -q "main is not exported" && refused=$((refused + 1))
done
[ $refused -eq 15 ] && ok "15 joins without an exported main refused: $out" || bad "only $refused of 15 refused: $out"
good "after 15 joins without an exported main"
n=$(loaded)
[ "$n" = 2 ] && ok "rpal ps: 2 programs loaded" || bad "rpal ps: $n programs loaded, not 2"

# ---- 3. statically linked programs, plain and PIE: refused, and said so
for prog in hosted_prog_static hosted_prog_static_pie; do
	[ -x "$PD/$prog" ] || { echo "SKIP (part): no $prog (the C library cannot be linked statically here)"; continue; }
	out=$(timeout 20 "$RPAL" run "$PD/$prog" main 0 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "statically linked" && ok "rpal run of $prog: $out" ||
		bad "rpal run of $prog: rc $rc, $out"
done

# ---- 4. a FIFO
mkfifo "$tmp/fifo"
# To a file: a host stuck in open() would keep a pipe's write end, passed on with descriptor 1.
timeout -k 2 10 "$RPAL" join r "$tmp/fifo" >"$tmp/fifo.out" 2>&1
rc=$?
out=$(cat "$tmp/fifo.out")
[ $rc -eq 2 ] && echo "$out" | grep -q "not a regular file" && ok "a FIFO is refused: $out" ||
	bad "join of a FIFO: rc $rc (124 or 137: the host hung in open), $out"
timeout 10 "$RPAL" ps r >/dev/null 2>&1 && ok "the host answers rpal ps after it" || bad "the host does not answer rpal ps"
out=$(timeout -k 2 10 "$RPAL" run "$tmp/fifo" 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "not a regular file" && ok "rpal run of a FIFO: exit 2, $out" ||
	bad "rpal run of a FIFO: rc $rc, $out"

# ---- 5. a join request built by hand: a working directory the program's process could not
# enter, 16 times, costs no namespace (a good join then starts, 3 programs loaded in all); an
# umask out of range is refused, not dropped for the host's own.
if command -v python3 >/dev/null; then
	cat >"$tmp/req.py" <<'PY'
import ctypes, os, socket, sys
class Rlim(ctypes.Structure):
    _fields_ = [("resource", ctypes.c_int32), ("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]
class Req(ctypes.Structure):   # cmd_host.c's struct join_req
    _fields_ = [("magic", ctypes.c_char * 8), ("version", ctypes.c_uint32), ("argc", ctypes.c_uint32),
                ("envc", ctypes.c_uint32), ("umask", ctypes.c_int32), ("sigmask", ctypes.c_uint64),
                ("ignored", ctypes.c_uint64), ("nrlimits", ctypes.c_uint32), ("rlimits", Rlim * 16),
                ("cwd_len", ctypes.c_uint32)]
sock, cwd, prog, umask = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = Req(magic=b"RPALJOIN", version=1, argc=3, envc=0, umask=umask, cwd_len=len(cwd) + 1)
msg = bytes(r) + b"\0".join(s.encode() for s in (cwd, prog, prog, "main", "0")) + b"\0"
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sock)
null = os.open("/dev/null", os.O_RDWR)
socket.send_fds(s, [msg], [null, null, null])
s.settimeout(20)
print(s.recv(4096).decode(errors="replace"))
PY
	sock=$RPAL_RUNTIME_DIR/host-r.sock
	refused=0
	for i in $(seq 16); do
		out=$(timeout 20 python3 "$tmp/req.py" "$sock" "$tmp/gone-$i" "$PD/hosted_prog_exit" 18 2>&1)
		echo "$out" | grep -q "^ERROR .*cannot enter its working directory" && refused=$((refused + 1))
	done
	[ $refused -eq 16 ] && ok "16 joins with a working directory that does not exist refused: $out" ||
		bad "only $refused of 16 joins with a missing working directory refused: $out"
	good "after 16 joins with a missing working directory"
	n=$(loaded)
	[ "$n" = 3 ] && ok "rpal ps: 3 programs loaded" || bad "rpal ps: $n programs loaded, not 3"
	out=$(timeout 20 python3 "$tmp/req.py" "$sock" / "$PD/hosted_prog_exit" -5 2>&1)
	echo "$out" | grep -q "^ERROR .*umask -5" && ok "an umask of -5 refused: $out" || bad "an umask of -5: $out"
else
	echo "SKIP (part): no python3 to build join requests by hand"
fi

out=$(timeout 20 "$RPAL" join r "$PD/hosted_prog_exit" $(seq 4999) 2>&1)
rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "5000 arguments: a host takes at most 4096 arguments" &&
	ok "5000 arguments refused: $out" || bad "5000 arguments: rc $rc: $out"

kill -TERM $hpid
for _ in $(seq 1000); do kill -0 $hpid 2>/dev/null || break; sleep 0.01; done
kill -0 $hpid 2>/dev/null && { bad "the host does not stop on SIGTERM"; kill -9 $hpid; }
wait $hpid
rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: the host exits 0" || bad "host stop: rc $rc, $(cat "$tmp/r.err")"
exit $fail
