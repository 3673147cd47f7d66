#!/usr/bin/env bash
# run_ps_reply.sh RPAL PROGDIR - what rpal ps shows is bounded and clean:
#  1. a program whose arguments take 200 KB, a second one, and five of 4,000 empty arguments each:
#     rpal ps lists all seven, the first one's arguments cut after 600 bytes of its command line
#     (each argument counted with its NUL) and "..."; rpal ps --json is one valid document listing
#     all seven, argv_cut true for all but the second;
#  2. a listener of our uid that answers with crafted bytes: overlong UTF-8, a surrogate, a code
#     point beyond U+10FFFF, a broken sequence, C0 and C1 controls, DEL, NUL, bidirectional
#     formatting characters, the line and paragraph separators and a no-break space each print
#     as \xNN or \u{N} (--json: \uXXXX, \ufffd for a byte that is not UTF-8), valid UTF-8, newline
#     and tab as themselves; rpal join prints that listener's refusal the same way;
#  3. an answer longer than rpal ps takes is refused as a whole, not printed cut;
#  4. a program joined with each of those in its arguments, and one whose argument lines up
#     a fake row after 100 spaces: the table shows the exact escaped bytes, with no two spaces
#     together in the command column; --json has each argument exact (U+FFFD for each byte that
#     is not UTF-8).
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
bads="c0af e080af eda080 f4908080 e228a1 80 07 09 00 7f c285 c2a0 e280ae e281a6 e2808f d89c e280a8 e280a9 ff"
hex=$good
for b in $bads; do hex="${hex}5b${b}5d"; done
want_text='ok é 中 😀[\xc0\xaf][\xe0\x80\xaf][\xed\xa0\x80][\xf4\x90\x80\x80][\xe2(\xa1][\x80][\x07]['$'\t''][\x00][\x7f]'
want_text+='[\u{85}][\u{a0}][\u{202e}][\u{2066}][\u{200f}][\u{61c}][\u{2028}][\u{2029}][\xff]'
want_json='ok é 中 😀[\ufffd\ufffd][\ufffd\ufffd\ufffd][\ufffd\ufffd\ufffd][\ufffd\ufffd\ufffd\ufffd][\ufffd(\ufffd]'
want_json+='[\ufffd][\u0007]['$'\t''][\u0000][\u007f][\u0085][\u00a0][\u202e][\u2066][\u200f][\u061c][\u2028][\u2029][\ufffd]'
for mode in text json; do
	fake "${hex}0a"
	timeout 10 "$RPAL" ps "$name" $([ $mode = json ] && echo --json) >"$tmp/ps.out" 2>&1
	wait "$fpid" 2>/dev/null
	got=$(cat "$tmp/ps.out")
	want=want_$mode
	[ "$got" = "${!want}" ] && ok "a crafted answer prints as ($mode): $got" ||
		bad "a crafted answer printed as ($mode): $got (want ${!want})"
done
# The same listener's refusal of a join: rpal join prints its sentence as rpal ps would.
fake "$(printf 'ERROR bad \x1b]0;t\x07 \xe2\x80\xae x\xff\nline 2' | od -An -tx1 | tr -d ' \n')"
timeout 10 "$RPAL" join "$name" /bin/true >/dev/null 2>"$tmp/join.err" </dev/null
rc=$?
wait "$fpid" 2>/dev/null
got=$(cat "$tmp/join.err")
want=$(printf '%s\n%s' 'rpal join: bad \x1b]0;t\x07 \u{202e} x\xff' 'line 2')
[ $rc -eq 2 ] && [ "$got" = "$want" ] && ok "a crafted refusal of a join prints as: $got" ||
	bad "a crafted refusal of a join: exit $rc, printed as: $got (want $want)"
fake big:70000
timeout 10 "$RPAL" ps "$name" >"$tmp/ps.out" 2>"$tmp/ps.err"
rc=$?
wait "$fpid" 2>/dev/null
[ $rc -eq 2 ] && [ ! -s "$tmp/ps.out" ] && grep -q "longer than" "$tmp/ps.err" &&
	ok "an answer of 70,000 bytes: exit 2, nothing printed: $(cat "$tmp/ps.err")" ||
	bad "an answer of 70,000 bytes: exit $rc, $(wc -c <"$tmp/ps.out") bytes printed: $(cat "$tmp/ps.err")"
rm -f "$sock"

# ---- 4. crafted arguments, shown by a host
start_host "$name"
row="x$(printf '%100s')    9999 running             0            0         0        0.000  fake"
args=($'\xc0\xaf' $'\xed\xa0\x80' $'\xf4\x90\x80\x80' $'\xe2(\xa1' $'\x80' $'\a' $'\e[31m' $'a\tb' $'a\nb' $'a\rb' $'\x7f'
	$'\xc2\x85' $'\xe2\x80\xae' $'\xe2\x81\xa6' $'\xe2\x80\xa8' $'\xe2\x80\xa9' $'\xc2\xa0' $'\xe2\x80\x8b' 'a\b' 'x   y'
	' lead' 'trail ' '' $'\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80' "$row")
timeout 20 "$RPAL" join "$name" "$PD/hosted_prog_exit" main 0 "${args[@]}" >/dev/null 2>&1
timeout 10 "$RPAL" ps "$name" >"$tmp/ps.out" 2>&1
# The command column: after the 69 bytes of the other columns and a space.
lines=$(wc -l <"$tmp/ps.out")
col=$(sed -n 3p "$tmp/ps.out" | cut -c71-)
got=${col#"$PD/hosted_prog_exit main 0 "}
want='\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2(\xa1 \x80 \x07 \x1b[31m a\x09b a\x0ab a\x0db \x7f'
want+=' \u{85} \u{202e} \u{2066} \u{2028} \u{2029} \u{a0} \u{200b} a\\b x\x20\x20\x20y \x20lead trail\x20 '"''"
want+=" é中😀 x$(for _ in $(seq 104); do printf '\\x20'; done)9999 running"
for n in 13 12 9 8; do want+=$(for _ in $(seq $n); do printf '\\x20'; done); want+=0; done
want+='.000\x20\x20fake'
[ "$lines" = 3 ] && [ "$got" = "$want" ] && ! echo "$col" | grep -q '  ' &&
	ok "crafted arguments in the table, one line, no two spaces together: $got" ||
	bad "crafted arguments in the table ($lines lines): $got (want $want)"
timeout 10 "$RPAL" ps "$name" --json >"$tmp/ps.json" 2>&1
printf '%s\0' "${args[@]}" >"$tmp/args"
out=$(python3 - "$tmp/ps.json" "$tmp/args" <<'PY'
import json, sys
argv = json.load(open(sys.argv[1]))["programs"][0]["argv"][3:]
want = open(sys.argv[2], "rb").read().split(b"\0")[:-1]
want = [w.decode("utf-8", "replace") for w in want]
print("exact" if argv == want else "got %r, want %r" % (argv, want))
PY
)
[ "$out" = exact ] && ok "rpal ps --json: each crafted argument exact (U+FFFD for each byte not UTF-8)" ||
	bad "rpal ps --json: $out"
grep -q "$(printf '\xe2\x80\xae')" "$tmp/ps.json" && bad "rpal ps --json printed U+202E itself" ||
	ok "rpal ps --json printed no character that does not show as itself"
exit $fail
