#!/usr/bin/env bash
# bench_killed.sh PATH/TO/rpal - a bench killed on its own (SIGKILL of its
# pid, as a supervisor or `kill` from another shell does, not a terminal's
# Ctrl-C to the whole group) takes its server and client with it, for a C
# transport (forked pair) and a Go one (an exec'd rpal-bench-go pair).
set -u
RPAL=$1
fail=0
check() { # transport
	local t=$1 bench kids k
	setsid "$RPAL" bench -t "$t" -S rpc --rates 1000 -T 600 -p split -R 1 --no-progress >/dev/null 2>&1 &
	bench=$!
	kids=""
	for _ in $(seq 100); do
		kids=$(pgrep -P "$bench" | tr '\n' ' ')
		[ -n "$kids" ] && break
		sleep 0.1
	done
	[ -n "$kids" ] || { echo "FAIL: rpal bench -t $t started no children"; kill -9 "$bench"; fail=1; return; }
	# Let the pair get to its loops (a Go child has exec'd by then).
	sleep 1
	kids="$kids $(for k in $kids; do pgrep -P "$k"; done | tr '\n' ' ')"
	kill -9 "$bench"
	wait "$bench" 2>/dev/null
	for _ in $(seq 50); do
		left=""
		for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
		[ -z "$left" ] && break
		sleep 0.1
	done
	echo "rpal bench -t $t, its pid killed: children ($kids) left running: ${left:-none}"
	if [ -n "$left" ]; then
		echo "FAIL: the children of a killed rpal bench -t $t run on"
		kill -9 $left 2>/dev/null
		fail=1
	fi
}
check futex
if "$RPAL" bench --list 2>/dev/null | grep -A1 "^rpal-go " | grep -q "not available"; then
	echo "rpal-go: not available in this build, only the C pair checked"
else
	check rpal-go
fi
[ $fail -eq 0 ] && echo "PASS: a killed bench takes its children with it"
exit $fail
