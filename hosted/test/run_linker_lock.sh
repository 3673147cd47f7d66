#!/usr/bin/env bash
# run_linker_lock.sh RPAL CC - a program killed while its thread holds a lock of the dynamic
# linker (one for the whole address space) no longer holds every later load: the launcher sees the
# lock's owner gone and releases it, saying so.
#  1. rpal host: a program killed (kill -9) inside dlopen, in a library constructor that sleeps
#     (the load lock held), then one killed inside a dl_iterate_phdr callback that sleeps (the list
#     lock, which C++ unwinding takes): after each, a join starts and exits 0 within 20 s, and the
#     host names the lock it released.
#  2. rpal run: a program that kills itself inside dlopen, and another that dlopens a library
#     1.5 s later: it loads, and rpal run ends (its own thread, starting the second program, had
#     waited for the lock too).
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/slowlib.c" <<'C'
#include <unistd.h>
__attribute__((constructor)) static void slow(void) { sleep(3); }
C
cat >"$tmp/fastlib.c" <<'C'
int fastlib_answer(void) { return 42; }
C
cat >"$tmp/dlprog.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int slow_callback(struct dl_phdr_info *i, size_t s, void *d) {
	(void)i; (void)s; (void)d;
	printf("iterating\n");
	fflush(stdout);
	sleep(3);
	return 1;
}
static void *killer(void *arg) {
	(void)arg;
	usleep(500000);
	kill(getpid(), SIGKILL);
	return NULL;
}
int main(int argc, char **argv) {
	if (argc == 3 && !strcmp(argv[1], "load")) {
		printf("loading\n");
		fflush(stdout);
		return !dlopen(argv[2], RTLD_NOW);
	}
	if (argc == 2 && !strcmp(argv[1], "iterate"))
		return dl_iterate_phdr(slow_callback, NULL) != 1;
	if (argc == 3 && !strcmp(argv[1], "selfkill")) {
		pthread_t t;
		pthread_create(&t, NULL, killer, NULL);
		dlopen(argv[2], RTLD_NOW);
		return 1;
	}
	if (argc == 3 && !strcmp(argv[1], "later")) {
		usleep(1500000);
		void *h = dlopen(argv[2], RTLD_NOW);
		printf("later: %s\n", h ? "loaded" : dlerror());
		return !h;
	}
	return 2;
}
C
"$CC" -shared -fPIC -o "$tmp/slowlib.so" "$tmp/slowlib.c" &&
	"$CC" -shared -fPIC -o "$tmp/fastlib.so" "$tmp/fastlib.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/dlprog" "$tmp/dlprog.c" -ldl -lpthread &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/exit0" "$tmp/exit0.c" || { bad "cannot build"; exit 1; }

# ---- 1. rpal host
start_host lk
for mode in load iterate; do
	marker=$([ $mode = load ] && echo loading || echo iterating)
	arg=$([ $mode = load ] && echo "$tmp/slowlib.so" || echo)
	timeout -k 2 10 "$RPAL" join lk "$tmp/dlprog" $mode $arg >"$tmp/$mode.out" 2>&1 &
	j=$!
	for _ in $(seq 500); do grep -q "$marker" "$tmp/$mode.out" && break; sleep 0.01; done
	sleep 0.3
	pid=$(timeout 10 "$RPAL" ps lk --json | grep -o '"pid": [0-9]*, "argv": \["[^"]*dlprog", "'$mode'"' |
		sed 's/"pid": \([0-9]*\),.*/\1/')
	[ -n "$pid" ] && kill -9 "$pid"
	wait $j 2>/dev/null
	start=$(date +%s%N)
	# To a file: a wedged host would keep a pipe's write end, passed on as the program's stdout.
	timeout -k 2 15 "$RPAL" join lk "$tmp/exit0" >"$tmp/next.out" 2>&1
	rc=$?
	out=$(cat "$tmp/next.out")
	ms=$((($(date +%s%N) - start) / 1000000))
	[ -n "$pid" ] && [ $rc -eq 0 ] && ok "$mode: after a kill -9 holding the lock, a join exits 0 in $ms ms" ||
		bad "$mode: pid '${pid}', the next join: rc $rc after $ms ms: $out"
done
for lock in "load lock" "list lock"; do
	grep -q "the dynamic linker's $lock was held by thread [0-9]*, which no longer exists" "$tmp/lk.err" &&
		ok "the host released its $lock, saying so" || bad "no release of the $lock: $(cat "$tmp/lk.err")"
done

# ---- 2. rpal run
timeout -k 2 15 "$RPAL" run "$tmp/dlprog" selfkill "$tmp/slowlib.so" ::: "$tmp/dlprog" later "$tmp/fastlib.so" \
	>"$tmp/run.out" 2>&1
rc=$?
out=$(cat "$tmp/run.out")
echo "$out" | sed 's/^/  | /'
[ $rc -ne 124 ] && [ $rc -ne 137 ] && echo "$out" | grep -q "later: loaded" && echo "$out" | grep -q "load lock was held by thread" &&
	ok "rpal run: a dlopen after a program killed inside one loads, and rpal run ends" ||
	bad "rpal run: rc $rc"
exit $fail
