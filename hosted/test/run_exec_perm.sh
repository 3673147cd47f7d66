#!/usr/bin/env bash
# run_exec_perm.sh RPAL PROGDIR - `rpal run` and `rpal join` refuse what execve(2) refuses, and
# what it would run with a privilege that hosting cannot give:
#  1. a copy of prog_exit without execute permission: plain exec fails (126 from the shell); rpal
#     run and rpal join exit 2 and say why; with the permission back, both run it (exit 7).
#  2. set-user-ID and set-group-ID to ids we do not have (needs root to make): refused with a
#     message; set-user-ID to ourselves runs, as exec would change nothing.
#  3. a copy on a tmpfs mounted noexec (needs root and unshare -m): refused with a message.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 PD=$2
export RPAL_RUNTIME_DIR=${RPAL_RUNTIME_DIR:-$(mktemp -d)}
mkdir -p "$RPAL_RUNTIME_DIR"
tmp=$(mktemp -d)
chmod 0755 "$tmp"
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
skip() { echo "skip: $*"; }

"$RPAL" host perm 2>"$tmp/host.err" &
hpid=$!
for _ in $(seq 500); do grep -q listening "$tmp/host.err" 2>/dev/null && break; sleep 0.01; done
grep -q listening "$tmp/host.err" || { bad "the host did not start: $(cat "$tmp/host.err")"; exit 1; }

# refused FILE WHAT WORDS: rpal run and rpal join of FILE exit 2 with a message holding WORDS.
refused() {
	local out rc
	out=$(timeout 20 "$RPAL" run "$1" main 7 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "$3" && ok "rpal run refuses $2: $out" ||
		bad "rpal run of $2: rc $rc, $out"
	out=$(timeout 20 "$RPAL" join perm "$1" main 7 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "$3" && ok "rpal join refuses $2: $out" ||
		bad "rpal join of $2: rc $rc, $out"
}
# runs FILE WHAT: rpal run and rpal join of FILE run it (exit 7).
runs() {
	local out rc
	out=$(timeout 20 "$RPAL" run -q "$1" main 7 2>&1)
	rc=$?
	[ $rc -eq 1 ] && ! echo "$out" | grep -q "rpal run: /" && ok "rpal run runs $2 (it exits 7)" ||
		bad "rpal run of $2: rc $rc, $out"
	out=$(timeout 20 "$RPAL" join perm "$1" main 7 2>&1)
	rc=$?
	[ $rc -eq 7 ] && ok "rpal join runs $2 (exit 7)" || bad "rpal join of $2: rc $rc, $out"
}

# ---- 1. execute permission
exe=$tmp/prog
cp "$PD/hosted_prog_exit" "$exe"
chmod 0644 "$exe"
sh -c "\"$exe\" main 7" 2>/dev/null
rc=$?
[ $rc -eq 126 ] && ok "negative control: the shell cannot exec it (126)" || bad "plain exec of a 0644 file: rc $rc"
refused "$exe" "a file of mode 0644" "no permission to execute"
chmod 0755 "$exe"
runs "$exe" "it with mode 0755"

# ---- 2. set-user-ID, set-group-ID
nosuid=$(findmnt -n -o OPTIONS --target "$tmp" 2>/dev/null | grep -c nosuid)
if [ "$(id -u)" != 0 ]; then
	skip "set-ID programs of another user: not root"
elif [ "$nosuid" != 0 ]; then
	skip "set-ID programs: $tmp is on a nosuid file system"
else
	cp "$PD/hosted_prog_exit" "$tmp/suid"
	chown 65534 "$tmp/suid" && chmod 04755 "$tmp/suid"
	refused "$tmp/suid" "a set-user-ID program of uid 65534" "set-user-ID program (owner uid 65534)"
	cp "$PD/hosted_prog_exit" "$tmp/sgid"
	chgrp 65534 "$tmp/sgid" && chmod 02755 "$tmp/sgid"
	refused "$tmp/sgid" "a set-group-ID program of gid 65534" "set-group-ID program (group 65534)"
	cp "$PD/hosted_prog_exit" "$tmp/suid-self"
	chmod 04755 "$tmp/suid-self"
	runs "$tmp/suid-self" "a set-user-ID program of our own uid"
fi

# ---- 3. a noexec mount
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
	mkdir "$tmp/nx"
	out=$(unshare -m sh -c 'mount -t tmpfs -o noexec none "$1" && cp "$2" "$1/prog" && chmod 0755 "$1/prog" &&
		timeout 20 "$3" run "$1/prog" main 7' sh "$tmp/nx" "$PD/hosted_prog_exit" "$RPAL" 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "mounted noexec" && ok "rpal run refuses a program on a noexec mount: $out" ||
		bad "rpal run on a noexec mount: rc $rc, $out"
else
	skip "a noexec mount: needs root and unshare -m"
fi

kill -TERM $hpid
wait $hpid
exit $fail
