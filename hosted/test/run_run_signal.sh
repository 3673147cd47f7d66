#!/usr/bin/env bash
# run_run_signal.sh RPAL PROGDIR - how often a signal sent with kill() reaches the programs of
# `rpal run`, which share its process group and to which it passes such signals on (docs/HOSTED.md,
# "Limits and open problems"):
#  1. kill -INT of rpal run's pid: each program gets SIGINT once (passed on).
#  2. kill -INT of rpal run's process group: each program gets it directly as a member of the
#     group and again passed on (the kernel does not tell a group's signal from a process's):
#     twice, or once where the second comes while the first is pending (a standard signal does
#     not queue); this checks the documented behaviour.
#  3. rpal run ends by a signal that reached it and ended a program (below).
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
. "$(dirname "$0")/hostlib.sh"

# counted TARGET WHAT N: rpal run of two counting programs in a process group of its own (setsid),
# sent SIGINT by `kill -INT TARGET` (pid, or -pgid); each program must count a number in N (a
# regular expression).
counted() {
	setsid "$RPAL" run "$PD/hosted_prog_proc" count ::: "$PD/hosted_prog_proc" count >"$tmp/out" 2>&1 &
	local r=$! rc
	for _ in $(seq 500); do [ "$(grep -c counting "$tmp/out")" = 2 ] && break; sleep 0.01; done
	# A background job of a script is no group leader: setsid execs rather than forks, and $r is
	# rpal run (its re-exec with GLIBC_TUNABLES keeps the pid).
	local target=$r
	[ "$1" = group ] && target=-$(ps -o pgid= -p $r | tr -d ' ')
	[ "$target" != -$r ] && [ "$1" = group ] && bad "rpal run is not its group's leader"
	kill -INT -- "$target"
	for _ in $(seq 1000); do kill -0 $r 2>/dev/null || break; sleep 0.01; done
	kill -9 $r 2>/dev/null
	wait $r
	rc=$?
	sed 's/^/  | /' "$tmp/out"
	[ $rc -eq 0 ] && [ "$(grep -c -E "got SIGINT $3 time\(s\)" "$tmp/out")" = 2 ] &&
		ok "$2: each program got SIGINT $3 time(s)" || bad "$2: rc $rc, not $3 each"
}
counted pid "kill -INT of rpal run's pid" 1
counted group "kill -INT of rpal run's process group (documented)" "[12]"

# 3. A program that SIGINT ends (it catches only SIGTERM): rpal run ends by SIGINT itself, as a
#    shell expects of a job that Ctrl-C ended (a loop stops); one that catches SIGTERM and exits 0
#    leaves rpal run's status 0.  perl reports how its child ended (bash's $? reads 130 either way),
#    and gives it SIGINT at its default action (a script's background job starts with it ignored).
ended() {
	perl -e '$SIG{INT} = "DEFAULT"; system(@ARGV); print(($? & 127) ? "signal " . ($? & 127) . "\n" : "exit " . ($? >> 8) . "\n")' \
		"$RPAL" run "$PD/hosted_prog_proc" hold /dev/null >"$tmp/how" 2>"$tmp/out" &
	local p=$! r=
	for _ in $(seq 500); do r=$(pgrep -P $p); [ -n "$r" ] && grep -q holding "$tmp/how" && break; sleep 0.01; done
	kill -"$1" "$r"
	wait $p
	sed 's/^/  | /' "$tmp/out"
	grep -q "^$2$" "$tmp/how" && ok "kill -$1 of rpal run, whose program $3: rpal run's $2" ||
		bad "kill -$1 of rpal run, whose program $3: rpal run's $(grep -v holding "$tmp/how"), want $2"
}
ended INT "signal 2" "SIGINT ends"
ended TERM "exit 0" "catches SIGTERM and exits 0"
exit $fail
