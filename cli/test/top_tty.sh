#!/usr/bin/env bash
# top_tty.sh PATH/TO/rpal PATH/TO/cli_test_stat - `rpal top` on a real
# terminal (a tmux pane): it draws the busy pair of `cli_test_stat pair`,
# re-sorts on w and p, and quits on q with status 0, leaving the terminal
# as it found it (the main screen back).  On a pane too short for every
# connection its header stays on the first line and the rows left out are
# counted on the last.  Suspended with Ctrl-Z, it gives the shell back its
# screen and cursor; after fg its keys work again without Enter.  Started
# with SIGTSTP ignored, it leaves it so.  Ended by SIGTERM it exits 0, by
# Ctrl-\ (SIGQUIT) it ends by SIGQUIT; either way the main screen and the
# terminal's modes (stty -g) are back.  Skipped (77) without tmux.
set -u
RPAL=$1
HELPER=$2
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 77; }
sock="rpal-top-test-$$"
sess=top
fail=0
t() { tmux -L "$sock" "$@"; }
cleanup() {
	t kill-server 2>/dev/null
	[ -n "${pair:-}" ] && kill "$pair" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$work"
}
# Its files (pids, stty states) in a directory of its own: a file left by an earlier run
# would be read before the new writer's redirection empties it.
work=$(mktemp -d)
cd "$work" || exit 1
trap cleanup EXIT
# Wait until the pane shows $1 (an extended regex), at most ~5 s, or $2 tenths of a second.
await() {
	for _ in $(seq "${2:-50}"); do
		t capture-pane -p -t "$sess" | grep -Eq "$1" && return 0
		sleep 0.1
	done
	echo "FAIL: the pane never showed /$1/:"
	t capture-pane -p -t "$sess"
	fail=1
	return 1
}

"$HELPER" pair 30 > pair.pid &
pair=$!
for _ in $(seq 50); do [ -s pair.pid ] && break; sleep 0.1; done
child=$(head -n 1 pair.pid)
[ -n "$child" ] || { echo "FAIL: the busy pair did not start"; exit 1; }

t new-session -d -s "$sess" -x 160 -y 30 "env RPAL_RUNTIME_DIR='$RPAL_RUNTIME_DIR' '$RPAL' top -d 0.3; echo top-exited-\$?; sleep 30"
await "sorted by messages/s" || exit 1
await "^ +$child +[^ ]+ +[0-9]+ +$child +stat-pair" || exit 1
echo "PASS: the screen shows the header and pid $child's connections"
t send-keys -t "$sess" w
await "sorted by wake-ups/s" && echo "PASS: w sorts by wake-ups/s"
t send-keys -t "$sess" p
await "sorted by pid" && echo "PASS: p sorts by pid"
t send-keys -t "$sess" q
await "top-exited-0" && echo "PASS: q quits with status 0"
t capture-pane -p -t "$sess" | grep -q "rpal top -" &&
	{ echo "FAIL: the frame is still on the screen: the alternate screen was not left"; fail=1; }

# A signal that ends it puts the terminal back: SIGTERM (kill), SIGQUIT (Ctrl-\, by
# SIGQUIT itself: status 131; no core file, ulimit -c 0).
for how in TERM QUIT; do
	sess=sig$how
	rm -f "$sess.pid" "$sess.before" "$sess.after"
	t new-session -d -s "$sess" -x 160 -y 30 "ulimit -c 0; stty -g > '$PWD/$sess.before'; sh -c 'echo \$\$ > \"$PWD/$sess.pid\"; exec env RPAL_RUNTIME_DIR=\"$RPAL_RUNTIME_DIR\" \"$RPAL\" top -d 0.3'; echo top-exited-\$?; stty -g > '$PWD/$sess.after'; sleep 30"
	await "sorted by messages/s" || continue
	if [ $how = TERM ]; then
		kill -TERM "$(cat "$sess.pid")"
		want=0
	else
		t send-keys -t "$sess" 'C-\'
		want=131
	fi
	await "top-exited-$want" && echo "PASS: SIG$how: rpal top ends with status $want" || continue
	state=$(t display -p -t "$sess" '#{alternate_on} #{cursor_flag}')
	[ "$state" = "0 1" ] && echo "PASS: SIG$how: the alternate screen is left, the cursor shown" ||
		{ echo "FAIL: SIG$how: the pane reads alternate screen, cursor shown: $state (want 0 1)"; fail=1; }
	for _ in $(seq 50); do [ -s "$sess.after" ] && break; sleep 0.1; done
	if [ -s "$sess.before" ] && cmp -s "$sess.before" "$sess.after"; then
		echo "PASS: SIG$how: the terminal's modes are back (echo, canonical input)"
	else
		echo "FAIL: SIG$how: stty -g before: $(cat "$sess.before" 2>/dev/null), after: $(cat "$sess.after" 2>/dev/null)"
		fail=1
	fi
	rm -f "$sess.pid" "$sess.before" "$sess.after"
done

# Three pairs, six connections, on 8 lines: the header, a blank line, the
# column names, three rows and "(3 more)", the cursor's line left free.
for i in 2 3; do
	"$HELPER" pair 30 > "pair$i.pid" &
	eval "pair$i=\$!"
	for _ in $(seq 300); do [ -s "pair$i.pid" ] && break; sleep 0.1; done
done
t new-session -d -s short -x 160 -y 8 "env RPAL_RUNTIME_DIR='$RPAL_RUNTIME_DIR' '$RPAL' top -d 0.3 stat-pair; sleep 30"
sess=short
# Two busy pairs run already: on a loaded machine the third's connections may take a while.
if await "more\)" 300; then
	screen=$(t capture-pane -p -t short)
	echo "$screen"
	echo "$screen" | head -n 1 | grep -q "^rpal top - .* 6 connections" ||
		{ echo "FAIL: on 8 lines the header is not the first line"; fail=1; }
	echo "$screen" | grep -q "^(3 more)" || { echo "FAIL: on 8 lines, not \"(3 more)\""; fail=1; }
fi
kill "$pair2" "$pair3" 2>/dev/null

# Ctrl-Z and fg in an interactive shell.
t new-session -d -s job -x 160 -y 30 "env -i PATH='$PATH' TERM=screen PS1='$ ' bash --norc --noprofile -i"
sess=job
t send-keys -t job "RPAL_RUNTIME_DIR='$RPAL_RUNTIME_DIR' '$RPAL' top -d 0.3 stat-pair" Enter
await "sorted by messages/s" || exit 1
t send-keys -t job C-z
if await "Stopped"; then
	state=$(t display -p -t job '#{alternate_on} #{cursor_flag}')
	[ "$state" = "0 1" ] && echo "PASS: Ctrl-Z leaves the alternate screen and shows the cursor" ||
		{ echo "FAIL: stopped, the pane reads alternate screen, cursor shown: $state (want 0 1)"; fail=1; }
	t send-keys -t job "fg" Enter
	await "sorted by messages/s"
	t send-keys -t job w
	await "sorted by wake-ups/s" && echo "PASS: after fg, w sorts at once"
	t send-keys -t job q
	await "^\\$ *$" && echo "PASS: after fg, q quits"
fi
# Started with SIGTSTP ignored (a job whose shell ignores it): a SIGTSTP
# does not stop it, and it draws on.
t new-session -d -s nojc -x 160 -y 30 "env -i PATH='$PATH' TERM=screen PS1='$ ' bash --norc --noprofile -i"
sess=nojc
t send-keys -t nojc "(trap '' TSTP; echo \$BASHPID > top.pid; exec env RPAL_RUNTIME_DIR='$RPAL_RUNTIME_DIR' '$RPAL' top -d 0.3 stat-pair)" Enter
if await "sorted by messages/s"; then
	tpid=$(cat top.pid)
	kill -TSTP "$tpid"
	sleep 0.5
	st=$(awk '{print $3}' "/proc/$tpid/stat" 2>/dev/null)
	t send-keys -t nojc w
	[ "$st" != T ] && await "sorted by wake-ups/s" &&
		echo "PASS: with SIGTSTP ignored before it, a SIGTSTP leaves it running (state $st)" ||
		{ echo "FAIL: with SIGTSTP ignored before it, a SIGTSTP stopped it (state $st)"; fail=1; }
	kill -CONT "$tpid" 2>/dev/null
	t send-keys -t nojc q
fi
[ $fail -eq 0 ] && echo "PASS: rpal top on a terminal"
exit $fail
