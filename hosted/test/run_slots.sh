#!/usr/bin/env bash
# run_slots.sh RPAL PROG_SLOTS ECHO_SERVER RAW_SLOT - in a host, every program maps the one address space:
# an arena stays in place for as long as a program reads it, whoever else comes or goes.
#  1. Two slots.  A program sends another a zero-copy buffer and two messages, then is killed
#     (kill -9); a newcomer's claim of a slot is refused (the dead program's slot is still read),
#     the survivor's buffer and queued messages arrive whole; once it is done, a newcomer gets
#     the slot.
#  2. An echo server outside the host and three programs of the host talking to it: one closes
#     its connection, one exits; the third's next echo (a buffer in the server's arena, read
#     through the one mapping of it) arrives whole.
#  3. A client outside the host whose hello names that echo server's slot, sent to a program of
#     the host, is refused (EADDRINUSE): its arena is not mapped over the one a program reads,
#     whose next echo arrives whole.
#  4. Such a hello naming the slot of a running program of the host that nobody reads is refused
#     too: that program's own arena is not mapped over; it then serves a new reader whole.
#  5. A client outside the host that one program maps, which then writes twice its size into its
#     arena's header and sends another program a hello of that size (a memfd that long): refused
#     (its arena there is another file), and both programs serve on.
#  6. Three slots, and two programs of one host with runtime directories of their own (so two
#     slot lock files): each takes a slot the other programs do not hold, and all serve.
#  7. Two programs of a host that map at one slot at once: one connects to an echo server outside
#     the host while a client outside sends the other a hello naming that server's slot.  Both
#     wait while the slot's map guard is held; once it is let go, the hostile hello is refused and
#     the first program's echoes arrive whole.
#  8. Two programs of a host that read an outside echo server's arena and close their connections
#     at once: while the slot's map guard is held the arena stays mapped; once it is let go, the
#     last of them puts the reservation back there.
#  9. A program that reads an outside echo server's arena, killed (kill -9) after that server was:
#     the arena stays mapped while the program lives, and the host puts the reservation back once
#     the program has ended.
# 10. The same under `rpal run`.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PROG=$2 ECHO=$3 RAW=$4
. "$(dirname "$0")/hostlib.sh"
. "$(dirname "$0")/calls_here.sh"

# wait_line FILE TEXT: wait (up to 10 s) for TEXT in FILE.
wait_line() { for _ in $(seq 1000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; return 1; }
# slot_of PID: the slot of process PID (rpal stat).
slot_of() { "$RPAL" stat --json | grep "\"pid\": $1," | grep -o '"slot": [0-9]*' | sed 's/.*: //'; }
# hello_names SLOT WHERE WHOSE: raw_slot's hello naming SLOT to echo-in must be refused (EADDRINUSE)
# with "names slot SLOT, where WHERE".
hello_names() {
	local out
	out=$("$RAW" echo-in "${1:-0}" 2>&1)
	echo "$out" | grep -q "^refused: 98 .*names slot $1, where $2" &&
		ok "a hello naming the slot of $3 ($1) is refused: $out" || bad "a hello naming slot ${1:-none} of $3: $out"
}

# outside_echo N: an echo server outside any host serving echo-outN, its pid in $echo_pid.
outside_echo() {
	"$ECHO" echo-out$1 >"$tmp/echo$1.out" 2>&1 &
	echo_pid=$!
	wait_line "$tmp/echo$1.out" "serving" || bad "the echo server echo-out$1: $(cat "$tmp/echo$1.out")"
}

# ---- 1. a killed program's arena while another still reads it
(
	export RPAL_NR_SLOTS=2 RPAL_RUNTIME_DIR=$tmp/rt1
	mkdir -p "$RPAL_RUNTIME_DIR"
	start_host s1
	"$RPAL" join s1 "$PROG" source src >"$tmp/src.out" 2>&1 &
	wait_line "$tmp/src.out" "source: listening" || { bad "source: $(cat "$tmp/src.out")"; exit 1; }
	"$RPAL" join s1 "$PROG" hold src "$tmp/go1" >"$tmp/hold.out" 2>&1 &
	hj=$!
	wait_line "$tmp/hold.out" "hold: holding" && wait_line "$tmp/src.out" "source: sent" ||
		{ bad "setup: $(cat "$tmp/src.out" "$tmp/hold.out")"; exit 1; }
	kill -9 "$(sed -n 's/^source: listening, pid //p' "$tmp/src.out")"
	out=$("$RPAL" join s1 "$PROG" claim new 2>&1)
	rc=$?
	[ $rc -eq 1 ] && echo "$out" | grep -q "slots .* are taken (1 of them still mapped" &&
		ok "a newcomer is refused the killed program's slot while it is read: $out" ||
		bad "the newcomer: rc $rc, $out"
	touch "$tmp/go1"
	wait $hj
	rc=$?
	sed 's/^/  | /' "$tmp/hold.out"
	[ $rc -eq 0 ] && ok "the survivor's held buffer and queued messages arrived whole" ||
		bad "the survivor: rc $rc"
	out=$("$RPAL" join s1 "$PROG" claim new 2>&1)
	[ $? -eq 0 ] && ok "once the survivor is done, a newcomer gets a slot: $out" || bad "the late newcomer: $out"
	kill -TERM $hpid
	wait $hpid
	exit $fail
) || fail=1

# ---- 2. one mapping of an outside peer's arena, for three programs
"$ECHO" echo-out >"$tmp/echo.out" 2>&1 &
epid=$!
start_host s2
"$RPAL" join s2 "$PROG" echo echo-out "$tmp/go2" >"$tmp/d.out" 2>&1 &
dj=$!
"$RPAL" join s2 "$PROG" echo echo-out "$tmp/go2" close >"$tmp/c.out" 2>&1 &
cj=$!
wait_line "$tmp/d.out" "echo: ready" && wait_line "$tmp/c.out" "echo: closed" ||
	bad "setup: $(cat "$tmp/d.out" "$tmp/c.out" "$tmp/echo.out")"
out=$("$RPAL" join s2 "$(dirname "$ECHO")/echo_client" echo-out 2>&1) ||
	bad "a third program that exits: $out"
touch "$tmp/go2"
wait $cj
wait $dj
rc=$?
sed 's/^/  | /' "$tmp/d.out"
[ $rc -eq 0 ] && grep -q "second echo whole" "$tmp/d.out" &&
	ok "after another program closed and a third exited, the echo through the shared mapping is whole" ||
	bad "the program that stayed: rc $rc"

# ---- 3. a hello that names the slot of an outside peer that a program reads
"$RPAL" join s2 "$PROG" echo echo-out "$tmp/go3" >"$tmp/d3.out" 2>&1 &
dj=$!
"$RPAL" join s2 "$ECHO" echo-in >"$tmp/in.out" 2>&1 &
wait_line "$tmp/d3.out" "echo: ready" && wait_line "$tmp/in.out" "serving" ||
	bad "setup: $(cat "$tmp/d3.out" "$tmp/in.out")"
hello_names "$(slot_of $epid)" "programs of this host read another arena" "the outside server"
touch "$tmp/go3"
wait $dj
rc=$?
[ $rc -eq 0 ] && grep -q "second echo whole" "$tmp/d3.out" &&
	ok "the program reading that server's arena goes on: its next echo is whole" ||
	bad "the program reading the server's arena: rc $rc, $(cat "$tmp/d3.out")"

# ---- 4. a hello that names the slot of a running program of the host
"$RPAL" join s2 "$PROG" source src4 >"$tmp/src4.out" 2>&1 &
wait_line "$tmp/src4.out" "source: listening" || bad "source: $(cat "$tmp/src4.out")"
spid=$(sed -n 's/^source: listening, pid //p' "$tmp/src4.out")
hello_names "$(slot_of $spid)" "a program of this host has its arena" "a running program"
touch "$tmp/go4"
out=$("$RPAL" join s2 "$PROG" hold src4 "$tmp/go4" 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "that program then serves a new reader whole" || bad "after the hello: rc $rc, $out"

# ---- 5. an outside arena mapped by one program, its header grown, in a hello to another
"$RPAL" join s2 "$ECHO" echo-in5 >"$tmp/in5.out" 2>&1 &
wait_line "$tmp/in5.out" "serving" || bad "setup: $(cat "$tmp/in5.out")"
out=$("$RAW" echo-in5 grow echo-in 2>&1)
echo "$out" | grep -q "^refused: 98 " && ok "a hello whose arena grew after another program mapped it is refused: $out" ||
	bad "a hello with a grown arena: $out"
for s in echo-in5 echo-in; do
	out=$(timeout 30 "$RPAL" join s2 "$(dirname "$ECHO")/echo_client" $s 2>&1) &&
		ok "$s serves on: $out" || bad "$s after the grown hello: $out"
done
kill -TERM $hpid
wait $hpid

# ---- 6. one host, two runtime directories
(
	export RPAL_NR_SLOTS=3 RPAL_RUNTIME_DIR=$tmp/rt6a
	mkdir -p "$RPAL_RUNTIME_DIR" "$tmp/rt6b"
	start_host s6
	ln -s "$RPAL_RUNTIME_DIR/host-s6.sock" "$tmp/rt6b/host-s6.sock"
	"$RPAL" join s6 "$ECHO" in-a >"$tmp/a6.out" 2>&1 &
	wait_line "$tmp/a6.out" "serving" || { bad "setup: $(cat "$tmp/a6.out")"; exit 1; }
	RPAL_RUNTIME_DIR=$tmp/rt6b "$RPAL" join s6 "$ECHO" in-b >"$tmp/b6.out" 2>&1 &
	wait_line "$tmp/b6.out" "serving" || { bad "setup: $(cat "$tmp/b6.out")"; exit 1; }
	stats=$( (RPAL_RUNTIME_DIR=$tmp/rt6a "$RPAL" stat --json; RPAL_RUNTIME_DIR=$tmp/rt6b "$RPAL" stat --json) |
		grep -oE '"(pid|slot|name)": ("[^"]*"|[0-9]*)' | tr '\n' ' ')
	slots=$(echo "$stats" | grep -oE '"slot": [0-9]+' | sort -u | wc -l)
	a=$(timeout 30 "$RPAL" join s6 "$(dirname "$ECHO")/echo_client" in-a 2>&1) &&
		b=$(RPAL_RUNTIME_DIR=$tmp/rt6b timeout 30 "$RPAL" join s6 "$(dirname "$ECHO")/echo_client" in-b 2>&1) &&
		[ "$slots" = 2 ] && ok "programs with runtime directories of their own hold two slots, and both serve" ||
		bad "two runtime directories: $slots slot(s) ($stats); $a; ${b:-}"
	kill -TERM $hpid
	wait $hpid
	exit $fail
) || fail=1

# ---- 7. two programs of a host mapping at one slot at once
outside_echo 7
xslot=$(slot_of $echo_pid)
start_host s7
"$RPAL" join s7 "$ECHO" echo-in7 >"$tmp/in7.out" 2>&1 &
wait_line "$tmp/in7.out" "serving" || bad "setup: $(cat "$tmp/in7.out")"
"$RAW" guard "$xslot" "$tmp/go7" >"$tmp/guard7.out" 2>&1 &
wait_line "$tmp/guard7.out" "guard: held" || bad "the guard: $(cat "$tmp/guard7.out")"
"$RPAL" join s7 "$PROG" echo echo-out7 "$tmp/go7b" >"$tmp/a7.out" 2>&1 &
aj=$!
"$RAW" echo-in7 "$xslot" >"$tmp/r7.out" 2>&1 &
rj=$!
sleep 0.3       # each waits for the guard for about a second
grep -q "echo: ready" "$tmp/a7.out" || [ -s "$tmp/r7.out" ] &&
	bad "a program mapped slot $xslot while its map guard was held: $(cat "$tmp/a7.out" "$tmp/r7.out")" ||
	ok "both programs wait while the map guard of slot $xslot is held"
touch "$tmp/go7"
wait $rj
out=$(cat "$tmp/r7.out")
echo "$out" | grep -Eq "^refused: (98 .*read another arena|71 .*does not match)" && ok "the hostile hello naming that slot is refused: $out" ||
	bad "the hostile hello: $out"
wait_line "$tmp/a7.out" "echo: ready" || bad "the program connecting to the server: $(cat "$tmp/a7.out")"
touch "$tmp/go7b"
wait $aj
rc=$?
[ $rc -eq 0 ] && grep -q "second echo whole" "$tmp/a7.out" &&
	ok "the program that mapped the server's arena echoes whole" || bad "that program: rc $rc, $(cat "$tmp/a7.out")"

# ---- 8. two programs of a host that stop reading an outside arena at once
# at_slot PID BASE: what process PID (the host, so its programs too) has at address BASE (hex).
at_slot() {
	local range perms path b=$((16#$2))
	while read -r range perms _ _ _ path; do
		((b >= 16#${range%-*} && b < 16#${range#*-})) && { echo "$perms $path"; return; }
	done <"/proc/$1/maps"
}
outside_echo 8
e8pid=$echo_pid
# arena_of PID: where process PID has its arena.
arena_of() { awk '/memfd:rpal-arena/ && $2 ~ /^rw/ { sub(/-.*/, "", $1); print $1; exit }' "/proc/$1/maps"; }
base8=$(arena_of $e8pid)
for k in 1 2; do
	"$RPAL" join s7 "$PROG" echo echo-out8 "$tmp/go8" closeat >"$tmp/c8$k.out" 2>&1 &
	eval "c8$k=\$!"
	wait_line "$tmp/c8$k.out" "echo: ready" || bad "reader $k: $(cat "$tmp/c8$k.out")"
done
"$RAW" guard "$(slot_of $e8pid)" "$tmp/go8g" >"$tmp/guard8.out" 2>&1 &
wait_line "$tmp/guard8.out" "guard: held" || bad "the guard: $(cat "$tmp/guard8.out")"
touch "$tmp/go8"
sleep 0.15      # they look for go8 every 10 ms, and wait for the guard for about a second
out=$(at_slot $hpid $base8)
case $out in "r--s /memfd:rpal-arena"*) ok "while the map guard is held, the closed readers leave the arena mapped";;
	*) bad "while the map guard was held, the host had at $base8: ${out:-nothing}";; esac
touch "$tmp/go8g"
wait $c81 && wait $c82 && grep -q "echo: closed" "$tmp/c81.out" && grep -q "echo: closed" "$tmp/c82.out" ||
	bad "the readers: $(cat "$tmp/c81.out" "$tmp/c82.out")"
out=$(at_slot $hpid $base8)
[ "$out" = "---p " ] && ok "the last reader to stop put the reservation back at $base8" ||
	bad "after both readers stopped, the host had at $base8: ${out:-nothing}"

# ---- 9. a killed program was the last to read an outside arena, whose owner had gone
# last_reader_killed N WHAT SPACE CMD...: an outside echo server echo-outN, read by the program that
# CMD starts (its output in $tmp/readerN.out); the server is killed, then that program; WHAT (the
# host, rpal run) with address space SPACE (a pid) must then put the reservation back there.
last_reader_killed() {
	local n=$1 what=$2 space=$3 epid base out
	shift 3
	outside_echo $n
	epid=$echo_pid
	base=$(arena_of $epid)
	"$@" "$PROG" echo echo-out$n "$tmp/go$n" >"$tmp/reader$n.out" 2>&1 &
	wait_line "$tmp/reader$n.out" "echo: ready" || bad "the reader: $(cat "$tmp/reader$n.out")"
	[ -n "$space" ] || space=$!
	reader_space=$space
	kill -9 $epid
	wait $epid 2>/dev/null
	out=$(at_slot $space $base)
	case $out in "r--s /memfd:rpal-arena"*) ok "$what: while a program reads it, the killed server's arena stays mapped";;
		*) bad "$what: while a program read it, its address space had at $base: ${out:-nothing}";; esac
	kill -9 "$(sed -n 's/^echo: ready, pid //p' "$tmp/reader$n.out")"
	for _ in $(seq 500); do out=$(at_slot $space $base); [ "$out" = "---p " ] && break; sleep 0.01; done
	[ "$out" = "---p " ] && ok "$what: once the killed reader has ended, the reservation is back at $base" ||
		bad "$what: after its last reader was killed, its address space had at $base: ${out:-nothing}"
}
last_reader_killed 9 "rpal host" $hpid "$RPAL" join s7
kill -TERM $hpid
wait $hpid

# ---- 10. the same under rpal run (its other program keeps it running)
last_reader_killed 10 "rpal run" "" "$RPAL" run -q "$ECHO" in10 :::
kill -TERM $reader_space
wait $reader_space
exit $fail
