#!/usr/bin/env bash
# run_tls.sh RPAL CC - an executable's own thread-local variables, hosted.  The linker resolves
# them to fixed offsets below the thread pointer (local-exec: no relocation, nothing the dynamic
# linker places), where an exec'd program has its own TLS block; hosted, that range must be memory
# nothing else of the thread uses, and zero when a thread starts.
#  1. 4 KiB and 12 KiB of zero-initialized __thread data, filled by main and by a second thread:
#     errno and stdio of the program's libc still work, and each thread sees its own zeros first;
#     two copies at once under rpal run, with different fill bytes.
#  2. Thread-locals with initial values (.tdata): exec'd, 5 and "hello"; hosted, each thread would
#     see zero, so rpal run and rpal join refuse the program with a message saying so.  The same
#     variables in a shared library (the remedy that message gives) run hosted with their values.
#  3. 1 MiB of thread-locals: refused by rpal run and rpal join with a message naming the sizes.
#  4. A thread-local the executable defines and a library uses (extern __thread): exec'd one
#     variable, hosted it would be two, so rpal run and rpal join refuse it with its name; one the
#     executable exports that no library uses runs.  The host stays up.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

# refused_by_both PROG PATTERN WHAT: rpal run and rpal join (host tls) both refuse PROG with
# status 2 and a message matching PATTERN.
refused_by_both() {
	local how out rc
	for how in run "join tls"; do
		out=$(timeout 30 "$RPAL" $how "$1" 2>&1)
		rc=$?
		[ $rc = 2 ] && echo "$out" | grep -q "$2" && ok "rpal $how refuses $3: $out" ||
			bad "rpal $how of $3: rc $rc, $out"
	done
}

cat >"$tmp/zero.c" <<'C'
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static __thread unsigned char mine[SZ];
static int fill;
static const char *check(void) {
    for (size_t i = 0; i < SZ; i++)
        if (mine[i]) return "thread-locals not zero at start";
    memset(mine, fill, SZ);
    errno = 0;
    if (fopen("/nonexistent/x", "r") || errno != ENOENT) return "errno lost";
    for (size_t i = 0; i < SZ; i++)
        if (mine[i] != fill) return "thread-locals overwritten";
    return NULL;
}
static void *thr(void *a) { (void)a; return (void *)check(); }
int main(int argc, char **argv) {
    fill = argc > 1 ? atoi(argv[1]) : 0x55;
    const char *e = check();
    pthread_t t;
    void *te = NULL;
    if (!e && pthread_create(&t, NULL, thr, NULL) == 0) pthread_join(t, &te);
    if (!e) e = te;
    printf("%s\n", e ? e : "ok");
    return e != NULL;
}
C
cat >"$tmp/init.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#ifdef IN_LIB
extern __thread int x;
extern __thread char s[16];
#else
__thread int x = 5;
__thread char s[16] = "hello";
#endif
static void *thr(void *a) { (void)a; printf("thread %d %s\n", x, s); return NULL; }
int main(void) {
    printf("main %d %s\n", x, s);
    pthread_t t;
    pthread_create(&t, NULL, thr, NULL);
    pthread_join(t, NULL);
    return x != 5;
}
C
cat >"$tmp/initlib.c" <<'C'
__thread int x = 5;
__thread char s[16] = "hello";
C

start_host tls
grep -q listening "$tmp/tls.err" || { bad "the host did not start: $(cat "$tmp/tls.err")"; exit 1; }

# 1. zero-initialized thread-locals
for sz in 4096 12288; do
	"$CC" -DSZ=$sz -fPIE -pie -rdynamic -pthread -o "$tmp/zero$sz" "$tmp/zero.c" || { bad "cannot build"; exit 1; }
	out=$("$tmp/zero$sz" 2>&1)
	[ "$out" = ok ] || { bad "negative control: $sz bytes exec'd: $out"; continue; }
	out=$(timeout 30 "$RPAL" run -q "$tmp/zero$sz" 85 ::: "$tmp/zero$sz" 170 2>&1)
	rc=$?
	[ $rc = 0 ] && [ "$out" = "$(printf 'ok\nok')" ] && ok "$sz bytes of zeroed thread-locals, two programs: $(echo $out)" ||
		bad "$sz bytes of zeroed thread-locals hosted: rc $rc, $out"
done

# 2. initial values
"$CC" -fPIE -pie -rdynamic -pthread -o "$tmp/init" "$tmp/init.c" || { bad "cannot build"; exit 1; }
want=$(printf 'main 5 hello\nthread 5 hello')
out=$("$tmp/init" 2>&1)
[ "$out" = "$want" ] || bad "negative control: initialized thread-locals exec'd: $out"
refused_by_both "$tmp/init" 'initial values' "initialized thread-locals"
"$CC" -shared -fPIC -o "$tmp/libinit.so" "$tmp/initlib.c" &&
	"$CC" -DIN_LIB -fPIE -pie -rdynamic -pthread -o "$tmp/initlib" "$tmp/init.c" -L"$tmp" -linit -Wl,-rpath,"$tmp" ||
	{ bad "cannot build"; exit 1; }
out=$(timeout 30 "$RPAL" run -q "$tmp/initlib" 2>&1)
rc=$?
[ $rc = 0 ] && [ "$out" = "$want" ] && ok "the same thread-locals in a shared library run hosted: $(echo $out)" ||
	bad "thread-locals in a library hosted: rc $rc, $out"

# 3. too large
"$CC" -DSZ=1048576 -fPIE -pie -rdynamic -pthread -o "$tmp/huge" "$tmp/zero.c" || { bad "cannot build"; exit 1; }
out=$("$tmp/huge" 2>&1)
[ "$out" = ok ] || bad "negative control: 1 MiB exec'd: $out"
refused_by_both "$tmp/huge" '1048576 bytes' "1 MiB of thread-locals"
# 4. A thread-local the executable defines and a library uses (extern __thread): exec'd both see
#    one variable; hosted the library would see another, so rpal run and rpal join refuse it,
#    naming the variable.  One the executable exports but no library uses runs.
cat >"$tmp/shlib.c" <<'C'
extern __thread int shared_tls;
int lib_get(void) { return shared_tls; }
C
cat >"$tmp/sh.c" <<'C'
#include <stdio.h>
__thread int shared_tls;
__thread int exported_only;
#ifdef USE_LIB
int lib_get(void);
#else
static int lib_get(void) { return shared_tls; }
#endif
int main(void) {
    shared_tls = 7;
    exported_only = 1;
    printf("exe %d lib %d\n", shared_tls, lib_get());
    return lib_get() != 7;
}
C
"$CC" -shared -fPIC -o "$tmp/libsh.so" "$tmp/shlib.c" &&
	"$CC" -DUSE_LIB -fPIE -pie -rdynamic -o "$tmp/sh" "$tmp/sh.c" -L"$tmp" -lsh -Wl,-rpath,"$tmp" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/shalone" "$tmp/sh.c" || { bad "cannot build"; exit 1; }
out=$("$tmp/sh" 2>&1)
[ "$out" = "exe 7 lib 7" ] || bad "negative control: a thread-local shared with a library exec'd: $out"
refused_by_both "$tmp/sh" 'shared_tls is used by the library .*libsh.so' "a thread-local of the executable used by a library"
out=$(timeout 30 "$RPAL" run -q "$tmp/shalone" 2>&1)
rc=$?
[ $rc = 0 ] && [ "$out" = "exe 7 lib 7" ] && ok "exported thread-locals no library uses run hosted: $out" ||
	bad "exported thread-locals no library uses: rc $rc, $out"

kill -0 $hpid 2>/dev/null && ok "the host is still up" || bad "the host died: $(cat "$tmp/tls.err")"
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
