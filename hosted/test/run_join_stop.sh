#!/usr/bin/env bash
# run_join_stop.sh RPAL CC - the signals a terminal sends to its foreground job reach a joined
# program and its children through rpal join, as they reach an exec'd job: Ctrl-Z (SIGTSTP) stops
# them and then the joiner, SIGCONT (fg, bg) goes on to them, Ctrl-C (SIGINT) ends them.
#  1. A program that counts in a file every 20 ms: after SIGTSTP to its joiner, the joiner and
#     the program are stopped (state T) and the count stays put for 0.5 s; after SIGCONT it counts
#     on, ends, and the joiner exits 0.
#  2. A program that catches SIGTSTP gets it (and stops itself, as a shell or an editor does);
#     one that catches it and goes on, ignores it or blocks it is not stopped (it counts on while the joiner is stopped),
#     as Ctrl-Z would not stop it exec'd.  Again under a host with 800 supplementary groups
#     (as root), whose /proc/PID/status holds the signal masks several KiB in.
#  3. The same under a host started in a session of its own (setsid).
#  4. A program that waits for a child (sh -c '...; exec sleep 30'): Ctrl-C on the joiner's
#     terminal ends the child too, as it ends an exec'd job's children; the joiner exits 130.
#  5. A host in the background of the joiner's terminal (bash -m: a job of its own, same session):
#     a joined program that reads the terminal is stopped by SIGTTIN, it alone: the host is not
#     stopped and takes another join meanwhile; Ctrl-C then ends the stopped program, and its
#     joiner by SIGINT, which stops the script as an exec'd program's end would.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/count.c" <<'C'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile sig_atomic_t tstp;
static void on_tstp(int sig) { (void)sig; tstp = 1; }
static void go_on(int sig) { (void)sig; }
int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[2], "catch")) signal(SIGTSTP, on_tstp);
    if (argc > 2 && !strcmp(argv[2], "catchgo")) signal(SIGTSTP, go_on);
    if (argc > 2 && !strcmp(argv[2], "ignore")) signal(SIGTSTP, SIG_IGN);
    if (argc > 2 && !strcmp(argv[2], "block")) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGTSTP);
        sigprocmask(SIG_BLOCK, &s, NULL);
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
    for (int i = 1; i <= 100; i++) {
        /* One look at the flag for both the file and the stop: a SIGTSTP caught between two
         * looks would stop us with the file saying it was not. */
        int caught = tstp;
        /* Renamed into place: a reader never finds the file empty. */
        FILE *f = fopen(tmp, "w");
        fprintf(f, "%d %s\n", i, caught ? "caught" : "-");
        fclose(f);
        rename(tmp, argv[1]);
        if (caught == 1) {
            tstp = 2;
            raise(SIGSTOP);
        }
        usleep(20000);
    }
    return 0;
}
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/count" "$tmp/count.c" || { bad "cannot build"; exit 1; }
pstate() { sed 's/^[0-9]* (.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1; }
# The program's signal masks, for a failure's message: what it caught, ignored, blocked, had pending.
psigs() { grep -E '^(SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt)' "/proc/$1/status" 2>/dev/null | tr -s '\t\n' '  '; }

# join_and_stop HOST FILE [ARG]: joins the counting program (writing FILE), sends SIGTSTP to its
# joiner and reads the count twice, 0.5 s apart; sets the caller's j, pid, st, n1 and n2.
join_and_stop() {
	"$RPAL" join "$1" "$tmp/count" "$2" ${3:-} >"$tmp/j.out" 2>&1 &
	j=$!
	# This program's pid: the running one that writes FILE (an earlier one may still be listed).
	pid=
	for _ in $(seq 1000); do
		[ -s "$2" ] && pid=$("$RPAL" ps "$1" --json | grep -o "\"pid\": [0-9]*, \"argv\": \\[\"[^\"]*count\", \"$2\"[^]]*\], \"state\": \"running\"" |
			grep -o '^"pid": [0-9]*' | grep -o '[0-9]*')
		[ -n "$pid" ] && break
		sleep 0.01
	done
	sleep 0.1
	kill -TSTP $j
	sleep 0.2
	n1=$(cut -d' ' -f1 "$2")
	sleep 0.5
	n2=$(cut -d' ' -f1 "$2")
	st="joiner $(pstate $j), program $(pstate "$pid")"
	sigs=$(psigs "$pid")
}

# stop_cont HOST WHAT [catch]
stop_cont() {
	local c=$tmp/c.$1${3:-} j pid st n1 n2 rc sigs
	join_and_stop "$1" "$c" ${3:-}
	if [ "$st" = "joiner T, program T" ] && [ "$n1" = "$n2" ]; then
		ok "$2: after SIGTSTP the $st, the count stays at $n1 ($(cut -d' ' -f2 "$c"))"
	else
		bad "$2: after SIGTSTP the $st, the count went from $n1 to $n2 (program pid $pid: $sigs)"
	fi
	if [ -n "${3:-}" ]; then
		grep -q caught "$c" && ok "$2: the program caught SIGTSTP" ||
			bad "$2: the program did not catch SIGTSTP (pid $pid: $sigs)"
	fi
	kill -CONT $j
	wait $j
	rc=$?
	n2=$(cut -d' ' -f1 "$c")
	[ $rc = 0 ] && [ "$n2" = 100 ] && ok "$2: after SIGCONT it counts to $n2 and the joiner exits 0" ||
		bad "$2: after SIGCONT: count $n2, joiner rc $rc, $(cat "$tmp/j.out")"
}

# keep_counting HOST WHAT catchgo|ignore|block: a program that catches SIGTSTP and goes on, ignores
# it or blocks it, which Ctrl-Z would not stop exec'd: after SIGTSTP to its joiner the joiner stops, the program counts on.
keep_counting() {
	local c=$tmp/c.$1$3 j pid st n1 n2 rc sigs
	join_and_stop "$1" "$c" "$3"
	if [ "$st" = "joiner T, program S" ] || [ "$st" = "joiner T, program R" ] && [ "$n2" -gt "$n1" ]; then
		ok "$2: after SIGTSTP the $st, the count went on from $n1 to $n2"
	else
		bad "$2: after SIGTSTP the $st, the count went from $n1 to $n2 (program pid $pid: $sigs)"
	fi
	kill -CONT $j
	wait $j
	rc=$?
	n2=$(cut -d' ' -f1 "$c")
	[ $rc = 0 ] && [ "$n2" = 100 ] && ok "$2: it counts to $n2 and the joiner exits 0" ||
		bad "$2: after SIGCONT: count $n2, joiner rc $rc, $(cat "$tmp/j.out")"
}

start_host js1
stop_cont js1 "host in our process group"
stop_cont js1 "host in our process group, a program that catches SIGTSTP" catch
keep_counting js1 "a program that catches SIGTSTP and goes on" catchgo
keep_counting js1 "a program that ignores SIGTSTP" ignore
keep_counting js1 "a program that blocks SIGTSTP" block
kill -TERM $hpid
wait $hpid 2>/dev/null

# The same under a host with 800 supplementary groups: /proc/PID/status lists them before the
# signal masks, several KiB in.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	setpriv --groups "$(seq -s, 10000 10800)" "$RPAL" host jsg 2>"$tmp/jsg.err" &
	gpid=$!
	for _ in $(seq 500); do grep -q listening "$tmp/jsg.err" 2>/dev/null && break; sleep 0.01; done
	stop_cont jsg "800 groups, a program that catches SIGTSTP" catch
	keep_counting jsg "800 groups, a program that catches SIGTSTP and goes on" catchgo
	keep_counting jsg "800 groups, a program that ignores SIGTSTP" ignore
	kill -TERM $gpid
	wait $gpid 2>/dev/null
else
	echo "skip: 800 supplementary groups need root and setpriv(1)"
fi

setsid "$RPAL" host js2 2>"$tmp/js2.err" &
for _ in $(seq 500); do grep -q listening "$tmp/js2.err" 2>/dev/null && break; sleep 0.01; done
stop_cont js2 "host in a session of its own"
stop_cont js2 "host in a session of its own, a program that catches SIGTSTP" catch
pkill_pid=$(grep -o 'pid [0-9]*' "$tmp/js2.err" | head -1 | cut -d' ' -f2)
[ -n "$pkill_pid" ] && kill -TERM "$pkill_pid"

# 4. a child of the program
start_host js3
cat >"$tmp/kid.c" <<'C'
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc;
    int st;
    pid_t c = fork();
    if (c == 0) {
        execl("/bin/sh", "sh", "-c", argv[1], (char *)0);
        _exit(127);
    }
    waitpid(c, &st, 0);
    return 0;
}
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/kid" "$tmp/kid.c" || { bad "cannot build"; exit 1; }
if ! command -v script >/dev/null; then
	echo "skip: no script(1) to give rpal join a terminal"
else
	# script(1) runs the joiner as the foreground job of a new terminal; a ^C typed 1 s later
	# is the terminal's SIGINT (si_code SI_KERNEL) to that job.
	(sleep 1; printf '\003'; sleep 2) | timeout 20 script -qfec \
		"$RPAL join js3 $tmp/kid 'echo \$\$ >$tmp/kid.pid; exec sleep 30'" /dev/null >"$tmp/k.out" 2>&1
	rc=$?
	kid=$(cat "$tmp/kid.pid")
	sleep 0.2
	if [ $rc = 130 ] && [ -n "$kid" ] && ! kill -0 "$kid" 2>/dev/null; then
		ok "Ctrl-C on the joiner's terminal ended the program and its child (pid $kid); the joiner exits 130"
	else
		bad "Ctrl-C on the joiner's terminal: rc $rc, child ${kid:-?} $(kill -0 "$kid" 2>/dev/null && echo 'still runs'), $(cat "$tmp/k.out")"
		kill -9 "$kid" 2>/dev/null
	fi
fi
kill -TERM $hpid

# 5. a host in the background of the joiner's terminal
if command -v script >/dev/null; then
	cat >"$tmp/reader.c" <<'C'
#include <unistd.h>
int main(void) { char c; return read(0, &c, 1) == 1 ? 0 : 3; }
C
	"$CC" -fPIE -pie -rdynamic -o "$tmp/reader" "$tmp/reader.c" || { bad "cannot build"; exit 1; }
	cat >"$tmp/bg.sh" <<SH
set -m
"$RPAL" host js5 2>"$tmp/js5.err" &
h=\$!
echo \$h >"$tmp/h5"
for _ in \$(seq 500); do grep -q listening "$tmp/js5.err" && break; sleep 0.01; done
( sleep 1; sed 's/^[0-9]* (.*) //' /proc/\$h/stat | cut -c1 >"$tmp/hstate"
  timeout 5 "$RPAL" join js5 "$tmp/kid" true >/dev/null 2>&1; echo \$? >"$tmp/second" ) &
"$RPAL" join js5 "$tmp/reader"
echo "the script went on" >"$tmp/after"
kill -TERM \$h
SH
	# The reader's joiner ends by SIGINT, as the reader would exec'd: the script's shell then ends
	# by it too (it does not run its next line), and script(1) exits 130.
	(sleep 2.5; printf '\003'; sleep 1) | timeout 20 script -qfec "bash $tmp/bg.sh" /dev/null >"$tmp/bg.out" 2>&1
	rrc=$?
	kill -TERM "$(cat "$tmp/h5" 2>/dev/null)" 2>/dev/null
	st=$(cat "$tmp/hstate" 2>/dev/null) second=$(cat "$tmp/second" 2>/dev/null)
	if [ -n "$st" ] && [ "$st" != T ] && [ "$second" = 0 ] && [ "$rrc" = 130 ] && [ ! -e "$tmp/after" ]; then
		ok "a program reading the terminal of a background host stops alone: host state $st, another join exits $second, Ctrl-C ends the reader and its joiner by SIGINT (the script stops, $rrc)"
	else
		bad "a program reading the terminal of a background host: host state ${st:-?}, another join ${second:-?}, script ${rrc:-?}$([ -e "$tmp/after" ] && echo ', the script went on'): $(cat "$tmp/bg.out")"
	fi
fi

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
