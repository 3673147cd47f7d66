#!/usr/bin/env bash
# run_join_exit.sh RPAL CC - the host keeps an ended program's pid until its joiner hangs up: the
# joiner passes signals on to that pid (and its process group) until it exits, and a pid reaped
# before then could name another process by the time a signal comes.
#  1. A program that exits 3 after 0.3 s, its joiner stopped (SIGSTOP) meanwhile: 1 s later the
#     program's process is a zombie of the host (state Z), rpal ps says "exited" (its table
#     "exited 3", the exit status); after SIGCONT
#     the joiner exits 3 and the host reaps the process (its pid is gone).
#  2. The same with the joiner killed (SIGKILL) while stopped: the host reaps at once.
#  3. A host stopped (SIGTERM) while a joiner of an ended program is stopped: it waits for it at
#     most its 5 s, reaps and exits 0.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/quit.c" <<'C'
#include <unistd.h>
int main(void) { usleep(300000); return 3; }
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/quit" "$tmp/quit.c" || { bad "cannot build"; exit 1; }
pstate() { sed 's/^[0-9]* (.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1; }

# join_stopped HOST: starts a joiner of quit, stops it once the program runs; sets j and pid.
join_stopped() {
	"$RPAL" join "$1" "$tmp/quit" >"$tmp/j.out" 2>&1 &
	j=$!
	pid=
	for _ in $(seq 200); do
		pid=$("$RPAL" ps "$1" --json | grep -o '"pid": [0-9]*, "argv": \["[^"]*quit"\], "state": "running"' |
			tail -1 | grep -o '[0-9]*' | head -1)
		[ -n "$pid" ] && break
		sleep 0.01
	done
	kill -STOP $j
}

start_host jx
join_stopped jx
sleep 1
st=$(pstate "$pid") ps=$("$RPAL" ps jx --json | grep -o "\"pid\": $pid, [^}]*\"state\": \"[a-z]*\"" | grep -o '"state": "[a-z]*"')
row=$("$RPAL" ps jx | awk -v p="$pid" '$1 == p { print $2, $3 }')
if [ -n "$pid" ] && [ "$st" = Z ] && [ "$ps" = '"state": "exited"' ] && [ "$row" = "exited 3" ]; then
	ok "with its joiner stopped, the ended program (pid $pid) is held: state $st, rpal ps $ps, table '$row'"
else
	bad "with its joiner stopped, the ended program (pid ${pid:-?}): state ${st:-gone}, rpal ps ${ps:-?}, table '$row'"
fi
kill -CONT $j
wait $j
rc=$?
sleep 0.3
[ $rc = 3 ] && [ ! -e "/proc/$pid" ] && ok "after SIGCONT the joiner exits $rc and the host reaps pid $pid" ||
	bad "after SIGCONT: joiner rc $rc, pid $pid state $(pstate "$pid"), $(cat "$tmp/j.out")"

join_stopped jx
sleep 1
kill -9 $j
wait $j 2>/dev/null
sleep 0.3
[ -n "$pid" ] && [ ! -e "/proc/$pid" ] && ok "a joiner killed: the host reaps pid $pid at once" ||
	bad "a joiner killed: pid ${pid:-?} state $(pstate "$pid")"

join_stopped jx
sleep 1
t0=$(date +%s%N)
kill -TERM $hpid
wait $hpid
hrc=$?
t=$((($(date +%s%N) - t0) / 1000000))
sleep 0.2
[ $hrc = 0 ] && [ ! -e "/proc/$pid" ] && [ $t -lt 8000 ] &&
	ok "a host stopped with a joiner stopped exits $hrc after $t ms, pid $pid reaped" ||
	bad "a host stopped with a joiner stopped: rc $hrc after $t ms, pid ${pid:-?} state $(pstate "$pid")"
kill -9 $j 2>/dev/null

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
