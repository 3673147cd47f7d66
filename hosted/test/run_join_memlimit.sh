#!/usr/bin/env bash
# run_join_memlimit.sh RPAL CC - the joiner's RLIMIT_AS (ulimit -v) and RLIMIT_DATA (ulimit -d),
# which the kernel checks against the whole address space a joined program shares with its host
# (the rpal region reserved, every program's memory), not against the program's own mappings:
#  1. a limit below what the host already has mapped (the program could map nothing: its main
#     thread's stack, malloc, pthread_create would all fail) is refused by rpal join, exit 2,
#     with a message naming the limit, before anything is loaded (programs_loaded unchanged);
#  2. the same program under the same limits runs exec'd (the limits are not absurd);
#  3. a limit above what the host has mapped is applied, and the program runs;
#  4. rpal run, which cannot reserve the rpal region under such an RLIMIT_AS, names the limit.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/mem.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *nothing(void *arg) { return arg; }
int main(void)
{
	pthread_t t;
	char *p = malloc(1 << 20);
	int rc = pthread_create(&t, NULL, nothing, NULL);

	if (!p || rc) {
		printf("malloc %s, pthread_create %s\n", p ? "ok" : "failed", rc ? strerror(rc) : "ok");
		return 1;
	}
	memset(p, 1, 1 << 20);
	pthread_join(t, NULL);
	puts("mapped");
	return 0;
}
C
"$CC" -fPIE -pie -rdynamic -pthread -o "$tmp/mem" "$tmp/mem.c" || { bad "cannot build"; exit 1; }
RPAL=$(realpath "$RPAL") TIMEOUT=$(command -v timeout)
start_host mlim
loaded() { "$RPAL" ps mlim --json | sed -n 's/.*"programs_loaded": \([0-9]*\).*/\1/p'; }

# KiB the host has mapped, from its /proc status line NAME.
vm() { sed -n "s/^$1:[[:space:]]*\([0-9]*\) kB/\1/p" /proc/$hpid/status; }

# check WHAT ULIMIT_FLAG KIB WANT_RC WANT_PATTERN
check() {
	local out rc before=$(loaded)
	out=$(ulimit -S "$2" "$3" && "$TIMEOUT" 30 "$RPAL" join mlim "$tmp/mem" 2>&1)
	rc=$?
	if [ $rc = "$4" ] && echo "$out" | grep -q -- "$5"; then
		ok "$1: exit $rc, $(echo $out)"
	else
		bad "$1: exit $rc (want $4, output matching '$5'), $(echo $out)"
	fi
	if [ "$4" = 2 ] && [ "$(loaded)" != "$before" ]; then
		bad "$1: the refused join took a namespace ($before, then $(loaded) loaded)"
	fi
}

as=$(vm VmSize) data=$(vm VmData)
# Exec'd, 1 GiB of address space and 32 MiB of data are plenty.
out=$(ulimit -S -v 1048576 -d 32768 && "$tmp/mem" 2>&1)
[ "$out" = mapped ] && ok "exec'd under ulimit -v 1048576 -d 32768: $out" ||
	bad "exec'd under ulimit -v 1048576 -d 32768: $out"
[ "$as" -gt 1048576 ] || { bad "the host maps only $as KiB (the rpal region is larger)"; exit 1; }
check "ulimit -v 1048576 (the host maps $as KiB)" -v 1048576 2 "RLIMIT_AS"
if [ "$data" -gt 2048 ]; then
	check "ulimit -d $((data / 2)) (the host has $data KiB of data)" -d $((data / 2)) 2 "RLIMIT_DATA"
else
	echo "note: the host has only $data KiB of data; no RLIMIT_DATA refusal to check"
fi
check "ulimit -d $((data + 262144)), above the host's $data KiB" -d $((data + 262144)) 0 '^mapped$'
check "ulimit -v unlimited" -v unlimited 0 '^mapped$'

out=$(ulimit -S -v 1048576 && "$TIMEOUT" 30 "$RPAL" run "$tmp/mem" 2>&1)
rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "RLIMIT_AS (ulimit -v) is 1048576 KiB" &&
	ok "rpal run under ulimit -v 1048576: exit $rc, $out" ||
	bad "rpal run under ulimit -v 1048576: exit $rc (want 2, naming RLIMIT_AS), $out"

kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null
[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
