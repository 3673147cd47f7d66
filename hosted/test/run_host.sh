#!/usr/bin/env bash
# run_host.sh RPAL PROGDIR PROG_RPC EXAMPLES_DIR - `rpal host`, `rpal join`, `rpal ps`: programs
# joined from a shell are processes of their own in the host's address space.
#  1. echo_server and echo_client joined: the client prints its summary and its joiner exits 0;
#     `rpal ps --json` shows the server with its own pid (Tgid in /proc), the host as parent, the
#     host's memory map, and calls_in > 0 (the messages were RPAL calls), which `rpal stat` reads
#     from the server's statistics page too; kill -9 of the server
#     leaves the host up, its joiner exits 137, and a new server and client take its name and work,
#     also where they land on the slots of the ended pair (RPAL_NR_SLOTS=2).
#  2. A joined program gets the joiner's cwd, environment, umask, rlimits and ignored signals, and
#     descriptors 0, 1, 2 only: not the host's, not another program's; its own SIGTERM handler runs
#     when its joiner is sent SIGTERM, and when `rpal run` is; exit statuses (exit() deep in main,
#     exit() from a second thread) reach the joiner.
#  3. A joiner of another uid is refused with a message (when run as root); the 16th program of a
#     host is refused with a message naming glibc's namespace limit.
#  4. ROUNDS (default 200) rounds of kill -9, mid-call, of a joined server or client of prog_rpc:
#     the survivor ends or fails with a message instead of hanging, the host stays up and stops
#     cleanly on SIGTERM; every tenth round a new server takes the killed one's name and serves.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 PD=$2 PROG_RPC=$3 EX=$4
ROUNDS=${ROUNDS:-200}
export RPAL_RUNTIME_DIR=${RPAL_RUNTIME_DIR:-$(mktemp -d)}
mkdir -p "$RPAL_RUNTIME_DIR"
. "$(dirname "$0")/calls_here.sh"
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# start_host NAME: a host in the background; its pid in $hpid once it listens.
start_host() {
	"$RPAL" host "$1" 2>"$tmp/host-$1.err" &
	hpid=$!
	for _ in $(seq 200); do
		grep -q listening "$tmp/host-$1.err" 2>/dev/null && return 0
		sleep 0.01
	done
	bad "host $1 did not start: $(cat "$tmp/host-$1.err")"
	return 1
}
# pid_of NAME INDEX: the pid of program INDEX of host NAME.
pid_of() { "$RPAL" ps "$1" --json | grep -o '"pid": [0-9]*' | sed -n "$(($2 + 2))s/.*: //p"; }
# calls_in NAME INDEX
calls_in() { "$RPAL" ps "$1" --json | grep -o '"calls_in": [0-9]*' | sed -n "$(($2 + 1))s/.*: //p"; }
# wait_gone PID SECONDS: 0 when PID ended within SECONDS.
wait_gone() {
	for _ in $(seq $(($2 * 100))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.01; done
	return 1
}

# ---- 1. the echo example, kill -9, and a new pair
start_host h || exit 1
"$RPAL" join h "$EX/echo_server" h >"$tmp/srv.out" 2>&1 &
sj=$!
sleep 0.3
out=$(timeout 30 "$RPAL" join h "$EX/echo_client" h 2>&1)
rc=$?
echo "$out" | sed 's/^/  | /'
[ $rc -eq 0 ] && echo "$out" | grep -q "messages echoed" && ok "echo_client joined, printed its summary, exit 0" ||
	bad "echo_client: rc $rc"
"$RPAL" ps h | sed 's/^/  | /'
json=$("$RPAL" ps h --json)
spid=$(pid_of h 0)
[ -n "$spid" ] && [ "$spid" != "$hpid" ] && [ "$(awk '/^Tgid/ {print $2}' /proc/$spid/status)" = "$spid" ] &&
	[ "$(awk '/^PPid/ {print $2}' /proc/$spid/status)" = "$hpid" ] &&
	ok "the server is its own process: pid $spid, Tgid $spid, parent the host ($hpid)" ||
	bad "server pid ${spid:-none} (host $hpid)"
[ "$(cat /proc/$spid/comm)" = echo_server ] && pgrep -x echo_server | grep -qx "$spid" &&
	ok "ps and pgrep know it by its program's name" || bad "its name is $(cat /proc/$spid/comm)"
cmp -s <(cat /proc/$hpid/maps) <(cat /proc/$spid/maps) && ok "the server's memory map is the host's" ||
	bad "the server's memory map differs from the host's"
[ "${calls_in:=$(calls_in h 0)}" -gt 0 ] 2>/dev/null && ok "calls_in $calls_in: the messages were RPAL calls" ||
	bad "calls_in ${calls_in:-none}: $json"
echo "$json" | grep -q '"calls_out": [1-9]' && ok "the client's calls_out counted" || bad "calls_out: $json"
sin=$("$RPAL" stat --json "$spid" | grep -o '"calls_in": [0-9]*' | head -1 | sed 's/.*: //')
[ "${sin:-0}" -ge 64 ] && [ "$sin" -le "$calls_in" ] &&
	ok "rpal stat reads the server's calls_in from its statistics page ($sin of $calls_in)" ||
	bad "rpal stat: calls_in ${sin:-none} (rpal ps: $calls_in)"
kill -9 "$spid"
wait $sj
rc=$?
[ $rc -eq 137 ] && ok "kill -9 of the server: its joiner exits 137" || bad "the server's joiner exited $rc"
kill -0 $hpid 2>/dev/null && "$RPAL" ps h | grep -q "killed" && ok "the host runs on and lists the server as killed" ||
	bad "host after kill -9 of a program"
# Its statistics page stays mapped in the host, locked: rpal stat must not take it for a live process.
"$RPAL" stat "$spid" >"$tmp/stat.out" 2>&1
rc=$?
[ $rc -eq 1 ] && ok "rpal stat no longer lists the killed server" ||
	bad "rpal stat $spid after its kill -9: rc $rc, $(head -3 "$tmp/stat.out")"
"$RPAL" join h "$EX/echo_server" h >/dev/null 2>&1 &
sleep 0.3
out=$(timeout 30 "$RPAL" join h "$EX/echo_client" h 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(calls_in h 2)" -gt 0 ] && ok "a new server took the name; a new client's messages were RPAL calls" ||
	bad "new pair after kill: rc $rc, $out"

# The same with two slots only: the new pair lands on the slots of the ended pair, whose
# entries the host keeps (a killed server, an exited client); each side must take its peer
# for the live program, not for the ended one at its slot.
(
	export RPAL_NR_SLOTS=2 RPAL_RUNTIME_DIR=$tmp/two-slots
	mkdir -p "$RPAL_RUNTIME_DIR"
	start_host h2 || exit 1
	"$RPAL" join h2 "$EX/echo_server" h2 >/dev/null 2>&1 &
	sleep 0.3
	timeout 30 "$RPAL" join h2 "$EX/echo_client" h2 >/dev/null 2>&1 || { bad "two slots: first client"; exit 1; }
	kill -9 "$(pid_of h2 0)"
	"$RPAL" join h2 "$EX/echo_server" h2 >/dev/null 2>&1 &
	sleep 0.3
	out=$(timeout 30 "$RPAL" join h2 "$EX/echo_client" h2 2>&1)
	rc=$?
	[ $rc -eq 0 ] && [ "$(calls_in h2 2)" -gt 0 ] &&
		ok "two slots: a new pair on the slots of a killed server and an exited client talks by RPAL calls" ||
		bad "two slots: new pair after kill: rc $rc, $out"
	kill -TERM $hpid
	wait $hpid
	exit $fail
) || fail=1

# ---- 2. what a joined program gets
odd="$tmp/$(printf 'a\nb\tc')"
cp /etc/hostname "$odd"
"$RPAL" join h "$PD/hosted_prog_proc" hold "$odd" >"$tmp/hold.out" 2>&1 &
hj=$!
sleep 0.3
"$RPAL" ps h | grep -qF " hold $tmp/a\x0ab\x09c" && ok "rpal ps keeps a program with a newline and a tab in its arguments on one line" ||
	bad "rpal ps: $("$RPAL" ps h)"
mkdir -p "$tmp/wd"
info=$(cd "$tmp/wd" && umask 027 && ulimit -n 777 && RPAL_TEST_VAR=joined "$RPAL" join h "$PD/hosted_prog_proc" info 2>&1)
echo "$info" | sed 's/^/  | /'
ipid=$(echo "$info" | sed -n 's/^pid \([0-9]*\) ppid \([0-9]*\)/\1/p')
echo "$info" | grep -q "^pid [0-9]* ppid $hpid\$" && [ "$ipid" != "$hpid" ] &&
	ok "its own pid ($ipid), the host as parent" || bad "pid line"
echo "$info" | grep -qx "cwd $tmp/wd" && ok "the joiner's working directory" || bad "cwd"
echo "$info" | grep -qx "var joined" && ok "the joiner's environment" || bad "environment"
echo "$info" | grep -qx "umask 027" && ok "the joiner's umask" || bad "umask"
echo "$info" | grep -qx "nofile 777" && ok "the joiner's rlimits" || bad "rlimits"
echo "$info" | grep -qx "sigpipe default sighup default" &&
	ok "SIGPIPE takes its default action (the host ignores it)" || bad "dispositions: $(echo "$info" | grep sigpipe)"
info=$(trap '' HUP && "$RPAL" join h "$PD/hosted_prog_proc" info 2>&1)
echo "$info" | grep -qx "sigpipe default sighup ignored" && ok "a joiner that ignores SIGHUP (nohup) passes that on" ||
	bad "nohup: $(echo "$info" | grep sigpipe)"
echo "$info" | grep -qx "fds 0 1 2" && grep -q "holding fd 3" "$tmp/hold.out" &&
	ok "descriptors 0, 1, 2 only: not the host's socket, not the other program's fd 3" ||
	bad "descriptors: $(echo "$info" | grep fds), $(cat "$tmp/hold.out")"
kill -TERM $hj
wait $hj
rc=$?
[ $rc -eq 0 ] && grep -q "clean shutdown on signal 15" "$tmp/hold.out" &&
	ok "SIGTERM to the joiner ran the program's own handler; it exited 0" || bad "SIGTERM: rc $rc, $(cat "$tmp/hold.out")"
"$RPAL" join h "$PD/hosted_prog_exit" main 7 >/dev/null 2>&1
rc=$?
[ $rc -eq 7 ] && ok "exit(7) deep in main: the joiner exits 7" || bad "exit status $rc, not 7"
"$RPAL" join h "$PD/hosted_prog_exit" thread 9 >/dev/null 2>&1
rc=$?
[ $rc -eq 9 ] && ok "exit(9) from a second thread ends the program's process: the joiner exits 9" ||
	bad "exit status $rc, not 9"

# rpal run passes SIGTERM on: a server that shuts down cleanly on it does so hosted.
"$RPAL" run "$PD/hosted_prog_proc" hold /etc/hostname ::: "$PD/hosted_prog_proc" hold /etc/hostname \
	>"$tmp/run.out" 2>&1 &
rj=$!
for _ in $(seq 200); do [ "$(grep -c holding "$tmp/run.out")" = 2 ] && break; sleep 0.01; done
kill -TERM $rj
wait $rj
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "clean shutdown on signal 15" "$tmp/run.out")" = 2 ] &&
	ok "SIGTERM to rpal run reached both programs' handlers; they and rpal run exited 0" ||
	bad "rpal run and SIGTERM: rc $rc, $(cat "$tmp/run.out")"

# ---- 3. refusals
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	chmod 0711 "$RPAL_RUNTIME_DIR"
	chmod 0666 "$RPAL_RUNTIME_DIR/host-h.sock" # let the connection reach the uid check
	out=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$RPAL" join h "$PD/hosted_prog_proc" info 2>&1)
	rc=$?
	chmod 0600 "$RPAL_RUNTIME_DIR/host-h.sock"
	[ $rc -eq 2 ] && echo "$out" | grep -q "takes programs of that uid only" &&
		ok "a joiner of uid 65534 is refused: $out" || bad "another uid: rc $rc, $out"
else
	echo "skip: another uid's join (needs root and setpriv)"
fi
n=$("$RPAL" ps h --json | grep -o '"programs_loaded": [0-9]*' | sed 's/.*: //')
for _ in $(seq $((15 - n))); do "$RPAL" join h "$PD/hosted_prog_exit" main 0 >/dev/null 2>&1; done
out=$("$RPAL" join h "$PD/hosted_prog_proc" info 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "DL_NNS" && ok "the 16th program is refused: $out" || bad "16th: rc $rc, $out"
kill -TERM $hpid
wait $hpid
rc=$?
[ $rc -eq 0 ] && [ ! -e "$RPAL_RUNTIME_DIR/host-h.sock" ] && ok "SIGTERM: the host stops its programs and exits 0" ||
	bad "host stop: rc $rc"

# ---- 4. kill -9 mid-call
hangs=0 hostdown=0 renamed=0 failed_recv=0
for r in $(seq "$ROUNDS"); do
	name=k$r
	start_host $name || break
	"$RPAL" join $name "$PROG_RPC" server s$r >/dev/null 2>&1 &
	sj=$!
	sleep 0.05
	"$RPAL" join $name "$PROG_RPC" client s$r 1 1000000000 >/dev/null 2>&1 &
	cj=$!
	for _ in $(seq 200); do [ "$(calls_in $name 0)" -gt 0 ] 2>/dev/null && break; sleep 0.01; done
	sleep "0.0$((RANDOM % 10))"
	victim=$((r % 2)) # 0: the server, 1: the client
	kill -9 "$(pid_of $name $victim)"
	if [ $victim = 0 ]; then
		wait_gone $cj 10 || { hangs=$((hangs + 1)); echo "  round $r: the client hangs after its server was killed"; }
		if [ $((r % 10)) = 0 ]; then
			"$RPAL" join $name "$EX/echo_server" s$r >/dev/null 2>&1 &
			# Until the new server listens (a loaded machine takes its
			# time), a client finds the killed one's socket: refused.
			for _ in $(seq 20); do
				sleep 0.1
				timeout 20 "$RPAL" join $name "$EX/echo_client" s$r 2>&1 | grep -q "messages echoed" &&
					{ renamed=$((renamed + 1)); break; }
			done
		fi
	else
		# The server runs on, or failed if the client's thread was running its receiver.
		wait_gone $cj 10 || hangs=$((hangs + 1))
		grep -q "is lost" "$tmp/host-$name.err" && failed_recv=$((failed_recv + 1))
	fi
	"$RPAL" ps $name >/dev/null 2>&1 || hostdown=$((hostdown + 1))
	kill -TERM $hpid
	wait_gone $hpid 10 || { hangs=$((hangs + 1)); echo "  round $r: the host does not stop"; kill -9 $hpid; }
	wait $hpid 2>/dev/null
	wait 2>/dev/null
done
[ $hangs -eq 0 ] && ok "$ROUNDS rounds of kill -9 mid-call: no survivor or host hung" || bad "$hangs hangs in $ROUNDS rounds"
[ $hostdown -eq 0 ] && ok "the host answered after every kill" || bad "the host went down $hostdown times"
[ $renamed -eq $((ROUNDS / 10)) ] && ok "$renamed new servers took a killed server's name and served" ||
	bad "only $renamed of $((ROUNDS / 10)) new servers served"
echo "  ($failed_recv of $((ROUNDS / 2)) killed clients were running the server's receiver: that server failed)"
exit $fail
