#!/usr/bin/env bash
# run_path.sh RPAL CC - rpal run and rpal join find a program named without a slash in PATH as
# execvp(3) does, and both alike:
#  1. a directory of that name earlier in PATH is skipped;
#  2. an empty element at the end of PATH is the current directory;
#  3. a file found without execute permission is refused with EACCES (exit 2), not "not found";
#     in a directory whose name is hundreds of characters long, the whole sentence comes back
#     from the host, its reason included.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/hi.c" <<'C'
#include <stdio.h>
int main(void) { puts("hi"); return 0; }
C
mkdir -p "$tmp/d1/rpalhi" "$tmp/d2" "$tmp/d3" "$tmp/cwd"
"$CC" -fPIE -pie -rdynamic -o "$tmp/d2/rpalhi" "$tmp/hi.c" || { bad "cannot build"; exit 1; }
cp "$tmp/d2/rpalhi" "$tmp/cwd/rpalhi"
cp "$tmp/d2/rpalhi" "$tmp/d3/rpalhi"
chmod 644 "$tmp/d3/rpalhi"
long=$tmp/$(printf '%0150d' 0)/$(printf '%0150d' 1)
mkdir -p "$long"
cp -p "$tmp/d3/rpalhi" "$long/rpalhi"
RPAL=$(realpath "$RPAL") TIMEOUT=$(command -v timeout)
start_host path

# check WHAT PATH WANT_RC WANT_OUT_PATTERN
check() {
	local out rc how
	for how in run join; do
		if [ $how = run ]; then
			out=$(cd "$tmp/cwd" && PATH=$2 "$TIMEOUT" 30 "$RPAL" run -q rpalhi 2>&1)
		else
			out=$(cd "$tmp/cwd" && PATH=$2 "$TIMEOUT" 30 "$RPAL" join path rpalhi 2>&1)
		fi
		rc=$?
		if [ $rc = "$3" ] && echo "$out" | grep -q "$4"; then
			ok "rpal $how, $1: exit $rc, $(echo $out)"
		else
			bad "rpal $how, $1: exit $rc (want $3), $(echo $out)"
		fi
	done
}
check "a directory of the name earlier in PATH is skipped" "$tmp/d1:$tmp/d2" 0 '^hi$'
check "a trailing empty PATH element is the current directory" "$tmp/d1:" 0 '^hi$'
check "a file without execute permission" "$tmp/d3" 2 'EACCES'
check "the same in a directory of 300 characters" "$long" 2 'exec would refuse it (EACCES)$'
check "no such program" "$tmp/d1" 2 'not found in PATH'

kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
