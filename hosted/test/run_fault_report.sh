#!/usr/bin/env bash
# run_fault_report.sh RPAL CC - the line printed for a fault outside any RPAL call says whose it is.
#  1. rpal run of a program that dereferences address 16: the line names the program and its pid,
#     the signal and the address; from a directory with a name of 120 characters, the line gives
#     the path's end ("...") with the program's file name.
#  2. rpal join of it: the joiner's stderr gets the same line, and nothing in it says rpal run.
#  3. rpal run of a program whose library's constructor faults (it runs in the launcher, while the
#     program loads): the line says that the launcher itself faulted, not that a program's process
#     ends, and rpal run ends by the signal.
#  4. rpal run's line for the program killed by the signal says "core dumped" under ulimit -c
#     unlimited, where the same program exec'd dumps core, and not under ulimit -c 0.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/segv.c" <<'C'
int main(void) { *(volatile int *)16 = 1; return 0; }
C
cat >"$tmp/badlib.c" <<'C'
__attribute__((constructor)) static void boom(void) { *(volatile int *)16 = 1; }
int badlib_fn(void) { return 1; }
C
cat >"$tmp/ctor.c" <<'C'
int badlib_fn(void);
int main(void) { return badlib_fn() - 1; }
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/segv" "$tmp/segv.c" &&
	"$CC" -shared -fPIC -o "$tmp/libbad.so" "$tmp/badlib.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/ctor" "$tmp/ctor.c" -L"$tmp" -lbad -Wl,-rpath,"$tmp" ||
	{ bad "cannot build"; exit 1; }

# 1. rpal run
out=$(timeout 30 "$RPAL" run "$tmp/segv" 2>&1)
line=$(echo "$out" | grep 'signal 11 at pc')
if echo "$line" | grep -q "segv (pid [0-9]*): signal 11 at pc 0x[0-9a-f]* (address 0x10), outside any RPAL call"; then
	ok "rpal run: $line"
else
	bad "rpal run: the fault line does not name the program: $out"
fi

# 1b. from a directory whose name is longer than the host block keeps: the line still ends the
# path with the program's file name.
long=$tmp/$(printf 'd%.0s' $(seq 120))
mkdir -p "$long" && cp "$tmp/segv" "$long/segv"
out=$(timeout 30 "$RPAL" run "$long/segv" 2>&1)
line=$(echo "$out" | grep 'signal 11 at pc')
if echo "$line" | grep -q "rpal: \.\.\.d*/segv (pid [0-9]*): signal 11"; then
	ok "rpal run from a directory of 120 characters: $line"
else
	bad "rpal run from a directory of 120 characters: the fault line lost the program's name: $out"
fi

# 2. rpal join
start_host fr
out=$(timeout 30 "$RPAL" join fr "$tmp/segv" 2>&1)
rc=$?
if [ $rc = 139 ] && echo "$out" | grep -q "segv (pid [0-9]*): signal 11 at pc" && ! echo "$out" | grep -q 'rpal run'; then
	ok "rpal join (exit 139): $out"
else
	bad "rpal join: rc $rc, $out"
fi
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null

# 3. a library constructor, in the launcher
out=$(timeout 30 "$RPAL" run "$tmp/ctor" 2>&1)
rc=$?
if [ $rc = 139 ] && echo "$out" | grep -q 'signal 11 at pc .* in the launcher' && ! echo "$out" | grep -q "program's process ends"; then
	ok "a library constructor's fault is the launcher's (rpal run ends by SIGSEGV): $out"
else
	bad "a library constructor's fault: rc $rc, $out"
fi

# 4. "core dumped" where, and only where, the kernel wrote a core, as a shell says of an exec'd
#    program: the same program run by a plain fork and exec under the same limit tells which.
cat >"$tmp/coreprobe.c" <<'C'
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc;
    int st;
    pid_t c = fork();
    if (c == 0) {
        execv(argv[1], argv + 1);
        _exit(127);
    }
    waitpid(c, &st, 0);
    puts(WIFSIGNALED(st) && WCOREDUMP(st) ? "core" : "nocore");
    return 0;
}
C
"$CC" -o "$tmp/coreprobe" "$tmp/coreprobe.c" || { bad "cannot build"; exit 1; }
mkdir -p "$tmp/cores"
for limit in 0 unlimited; do
	exec_says=$(cd "$tmp/cores" && ulimit -c $limit && "$tmp/coreprobe" "$tmp/segv")
	out=$(cd "$tmp/cores" && ulimit -c $limit && timeout 30 "$RPAL" run "$tmp/segv" 2>&1)
	rm -f "$tmp/cores"/core*
	line=$(echo "$out" | grep 'was killed by signal 11')
	if [ "$exec_says" = nocore ] && [ $limit != 0 ]; then
		echo "skip: no core dump under ulimit -c unlimited here, exec'd either (core_pattern $(cat /proc/sys/kernel/core_pattern 2>/dev/null))"
	elif [ "$exec_says" = core ] && echo "$line" | grep -q "signal 11 (.*, core dumped)$"; then
		ok "ulimit -c $limit, a core exec'd too: $line"
	elif [ "$exec_says" = nocore ] && [ -n "$line" ] && ! echo "$line" | grep -q "core dumped"; then
		ok "ulimit -c $limit, no core exec'd either: $line"
	else
		bad "ulimit -c $limit: exec'd, $exec_says; rpal run says: $out"
	fi
done

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
