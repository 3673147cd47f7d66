#!/usr/bin/env bash
# run_ps_reply.sh RPAL PROGDIR - what rpal ps shows is bounded and clean:
#  1. a program whose arguments take 200 KB, a second one, and five of 4,000 empty arguments each:
#     rpal ps lists all seven, the first one's arguments cut after 600 bytes of its command line
#     (each argument counted with its NUL) and "..."; rpal ps --json is one valid document listing
#     all seven, argv_cut true for all but the second;
#  2. a listener of our uid that answers with crafted bytes: overlong UTF-8, a surrogate, a code
#     point beyond U+10FFFF, C0 and C1 controls, bidirectional formatting characters and the
#     line and paragraph separators each print as '?', valid UTF-8 as itself;
#  3. an answer longer than rpal ps takes is refused as a whole, not printed cut.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to parse JSON and to fake a host"; exit 77; }
name=psr-$$
sock=$RPAL_RUNTIME_DIR/host-$name.sock

# ---- 1. long arguments, and many empty ones
start_host "$name"
big=$(head -c 100000 /dev/zero | tr '\0' A)
timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 "$big" "$big" >/dev/null 2>&1
timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 >/dev/null 2>&1
empty=()
for _ in $(seq 4000); do empty+=(""); done
for _ in 1 2 3 4 5; do
	timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 "${empty[@]}" >/dev/null 2>&1
done
table=$(timeout 10 "$RPAL" ps "$name" 2>&1)
rows=$(echo "$table" | grep -c "hosted_prog_exit main 0")
width=$(echo "$table" | grep "AAAA" | wc -c)
widest=$(echo "$table" | awk '{ if (length($0) > w) w = length($0) } END { print w }')
[ "$rows" = 7 ] && echo "$table" | grep -q "AAA\.\.\.$" && [ "$width" -lt 800 ] && [ "$widest" -lt 2500 ] &&
	ok "rpal ps: all 7 programs, the first one's arguments cut (its line: $width bytes, the widest $widest)" ||
	bad "rpal ps: $rows rows, long line $width bytes, widest $widest: $(echo "$table" | cut -c1-160)"
timeout 10 "$RPAL" ps "$name" --json >"$tmp/ps.json" 2>&1
out=$(python3 - "$tmp/ps.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%d:%d:%s" % (len(p["argv"]), len("".join(p["argv"])), p["argv_cut"]) for p in d["programs"]))
PY
)
# 600 bytes: the path, "main" and "0" with their NULs, then the first 600 - (path + 7) of
# 100,000 A's, or as many empty arguments.
l=$(printf %s "$PD/hosted_prog_exit" | wc -c)
want="4:597:True 3:$((l + 5)):False"
for _ in 1 2 3 4 5; do want="$want $((3 + 592 - l)):$((l + 5)):True"; done
[ "$out" = "$want" ] &&
	ok "rpal ps --json: one valid document, all 7 programs (arguments:bytes:cut) $out" ||
	bad "rpal ps --json: $out (want $want) $(head -c 300 "$tmp/ps.json")"
kill "$hpid"
wait "$hpid" 2>/dev/null

# ---- 2, 3. a listener that answers what it likes
# fake ANSWER: a listener at the host's name that answers rpal ps with ANSWER, bytes in hex, or
# big:N for N bytes of 'A'.
fake() {
	rm -f "$sock"
	python3 - "$sock" "$1" >"$tmp/fake.out" 2>&1 <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])
s.listen(4)
print("ready", flush=True)
c, _ = s.accept()
c.recv(16)
c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
a = sys.argv[2]
c.send(b"A" * int(a[4:]) if a.startswith("big:") else bytes.fromhex(a))
c.recv(16)
PY
	fpid=$!
	for _ in $(seq 500); do grep -q ready "$tmp/fake.out" 2>/dev/null && break; sleep 0.01; done
}
# "ok é 中 😀" then each bad form between '[' and ']'
good=$(printf 'ok \xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80' | od -An -tx1 | tr -d ' \n')
bads="c0af e080af eda080 f4908080 07 c285 e280ae e281a6 e2808f d89c e280a8 e280a9 ff"
hex=$good
for b in $bads; do hex="${hex}5b${b}5d"; done
fake "${hex}0a"
timeout 10 "$RPAL" ps "$name" >"$tmp/ps.out" 2>&1
wait "$fpid" 2>/dev/null
want=$(printf 'ok \xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80')
for b in $bads; do
	# one '?' per byte of a byte sequence that is not UTF-8, one per character otherwise
	case $b in c0af) want="$want[??]" ;; e080af) want="$want[???]" ;; eda080) want="$want[???]" ;;
		f4908080) want="$want[????]" ;; *) want="$want[?]" ;; esac
done
got=$(cat "$tmp/ps.out")
[ "$got" = "$want" ] && ok "a crafted answer prints as: $got" || bad "a crafted answer printed as: $got (want $want)"
fake big:70000
timeout 10 "$RPAL" ps "$name" >"$tmp/ps.out" 2>"$tmp/ps.err"
rc=$?
wait "$fpid" 2>/dev/null
[ $rc -eq 2 ] && [ ! -s "$tmp/ps.out" ] && grep -q "longer than" "$tmp/ps.err" &&
	ok "an answer of 70,000 bytes: exit 2, nothing printed: $(cat "$tmp/ps.err")" ||
	bad "an answer of 70,000 bytes: exit $rc, $(wc -c <"$tmp/ps.out") bytes printed: $(cat "$tmp/ps.err")"
rm -f "$sock"
exit $fail
