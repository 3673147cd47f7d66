#!/usr/bin/env bash
# run_join_libcut.sh RPAL PROGDIR - a program's shared library cut short or rewritten in place
# while `rpal host` loads the program (prog_cut: its library's constructor reads 4 MiB of its
# file half a second into the load) neither ends the host nor reaches the load:
#  1. truncate(1) of the library during the load fails, the program starts with its library
#     whole, and the host and its other program live on;
#  2. a cp over the library during the load waits for the load to end, then completes;
#  3. a library that stays open for writing is not loaded: the join is refused, saying why;
#  4. a truncate(1) 0 to 80 ms into the join, before the library is leased or after, either
#     fails or gets the join refused as cut short or damaged; the host lives on.
# Without the loader's leases the first kills the host with SIGBUS; without its look at the
# leased file, a truncate between the rehearsed load and the lease does.  Prints what it
# checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"
LIB=libhosted_prog_cutlib.so
now() { date +%s%N; }
loading() {
	for _ in $(seq 500); do "$RPAL" ps cut 2>/dev/null | grep -q ' loading ' && return 0; sleep 0.01; done
	return 1
}
# The library under a lease: /proc/locks names its inode.
leased() {
	local ino
	ino=$(stat -c %i "$tmp/$LIB")
	for _ in $(seq 500); do grep -q "LEASE.*:$ino " /proc/locks && return 0; sleep 0.01; done
	return 1
}
# Copies of the program and its library, found first through the host's LD_LIBRARY_PATH.
cp "$PD/hosted_prog_cut" "$PD/$LIB" "$tmp/"
# Leases need a file system that has them, and a file we own (or CAP_LEASE).
exec 9<"$tmp/$LIB"
python3 -c 'import fcntl, sys; fcntl.fcntl(9, 1024, 0)' 2>/dev/null ||
	{ echo "SKIP: no file leases in $tmp"; exit 77; }
exec 9<&-
export LD_LIBRARY_PATH=$tmp
start_host cut
"$RPAL" join cut "$PD/hosted_prog_proc" hold /dev/null </dev/null >"$tmp/peer.out" 2>&1 &
peer=$!

# ---- 1
"$RPAL" join cut "$tmp/hosted_prog_cut" </dev/null >"$tmp/one.out" 2>&1 &
one=$!
loading || bad "rpal ps never listed prog_cut as loading"
leased || bad "the library was never leased during the load"
truncate -s 4096 "$tmp/$LIB" 2>"$tmp/truncate.err" && bad "truncate cut the library short during the load" ||
	ok "truncate of the library during the load fails: $(cat "$tmp/truncate.err")"
wait $one
rc=$?
[ $rc -eq 0 ] && grep -q "sum 2" "$tmp/one.out" && ok "the program started with its library whole: $(cat "$tmp/one.out")" ||
	bad "the program: exit $rc: $(cat "$tmp/one.out")"
kill -0 $hpid 2>/dev/null && kill -0 $peer 2>/dev/null && ok "the host and its other program live on" ||
	bad "the host or its other program ended: $(cat "$tmp/cut.err")"

# ---- 2
"$RPAL" join cut "$tmp/hosted_prog_cut" </dev/null >"$tmp/two.out" 2>&1 &
two=$!
loading || bad "rpal ps never listed the second prog_cut as loading"
t0=$(now)
cp "$PD/$LIB" "$tmp/$LIB" && ms=$((($(now) - t0) / 1000000)) || ms=-1
wait $two
rc=$?
[ $rc -eq 0 ] && grep -q "sum 2" "$tmp/two.out" && [ $ms -ge 100 ] &&
	ok "a cp over the library during the load waited $ms ms, for the load to end; the program started whole" ||
	bad "cp during the load: $ms ms; the program: exit $rc: $(cat "$tmp/two.out")"
kill -0 $hpid 2>/dev/null && ok "the host lives on" || bad "the host ended: $(cat "$tmp/cut.err")"

# ---- 3
exec 8>>"$tmp/$LIB"
"$RPAL" join cut "$tmp/hosted_prog_cut" </dev/null >"$tmp/three.out" 2>&1
rc=$?
exec 8>&-
[ $rc -eq 2 ] && grep -q "stayed open for writing" "$tmp/three.out" && kill -0 $hpid 2>/dev/null &&
	ok "a library open for writing is not loaded: $(cat "$tmp/three.out")" ||
	bad "a library open for writing: exit $rc: $(cat "$tmp/three.out")"

# ---- 4
for i in 1 2 3 4 5; do
	cp "$PD/$LIB" "$tmp/$LIB"
	"$RPAL" join cut "$tmp/hosted_prog_cut" </dev/null >"$tmp/four.out" 2>&1 &
	four=$!
	sleep "0.0$((i * 2 - 2))"
	if truncate -s 4096 "$tmp/$LIB" 2>"$tmp/four.err"; then cut=yes; else cut=no; fi
	wait $four
	rc=$?
	if [ $cut = no ] && [ $rc -eq 0 ] && grep -q "sum 2" "$tmp/four.out"; then
		ok "$i: truncate failed ($(cat "$tmp/four.err")), the program started whole"
	elif [ $cut = yes ] && [ $rc -eq 2 ] && grep -qE "cut short|damaged" "$tmp/four.out"; then
		ok "$i: truncate came first, the join was refused: $(cat "$tmp/four.out")"
	else
		bad "$i: truncate succeeded: $cut; the program: exit $rc: $(cat "$tmp/four.out")"
	fi
	kill -0 $hpid 2>/dev/null || { bad "the host ended: $(cat "$tmp/cut.err")"; break; }
done
kill -TERM $hpid
wait $hpid
[ $fail -eq 0 ] && echo "PASS: a library cut short or rewritten during its load does not reach it"
exit $fail
