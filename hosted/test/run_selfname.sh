#!/usr/bin/env bash
# run_selfname.sh RPAL CC - a hosted program's executable is known by its own file's name to
# dladdr(3), dl_iterate_phdr(3) and backtrace_symbols(3), which symbolizers open to read it, not by
# /proc/self/fd/N, the memfd copy's descriptor in the launcher (in the program's process that
# number is another file, or none).
#  1. exec'd (the control) and hosted: the file dladdr names for main is the program (same inode
#     as argv[0]), and backtrace_symbols names that file.
#  2. The same through rpal join from another directory.
#  3. A symlink to the program pointed elsewhere while it loads (by a library constructor): the
#     name is still that of the file loaded.
#  4. The launcher itself (rpal host, after its re-exec for the loader's tunables) is named after
#     its own file, as ps, pgrep and top show it: "rpal", not "exe".
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/self.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
static int first(struct dl_phdr_info *i, size_t n, void *d) {
    (void)n;
    *(const char **)d = i->dlpi_name;
    return 1;
}
static int is_prog(const char *argv0, const char *f) {
    struct stat a, b;
    return stat(argv0, &a) == 0 && stat(f, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}
int main(int argc, char **argv) {
    (void)argc;
    Dl_info di;
    const char *pn = NULL;
    void *bt[1];
    dladdr((void *)main, &di);
    dl_iterate_phdr(first, &pn);
    backtrace(bt, 1);
    char **s = backtrace_symbols(bt, 1), *paren = s ? strchr(s[0], '(') : NULL;
    if (paren) *paren = 0;
    int a = is_prog(argv[0], di.dli_fname), b = !*pn || is_prog(argv[0], pn), c = paren && is_prog(argv[0], s[0]);
    printf("dladdr %s: %s; dl_iterate_phdr '%s': %s; backtrace_symbols %s: %s\n", di.dli_fname,
           a ? "ok" : "not the program", pn, b ? "ok" : "not the program", s ? s[0] : "?",
           c ? "ok" : "not the program");
    return !(a && b && c);
}
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/self" "$tmp/self.c" || { bad "cannot build"; exit 1; }
out=$(cd "$tmp" && ./self 2>&1)
[ $? = 0 ] && ok "exec'd: $out" || bad "negative control: exec'd: $out"
out=$(cd "$tmp" && timeout 30 "$RPAL" run -q ./self 2>&1)
[ $? = 0 ] && ok "rpal run: $out" || bad "rpal run: $out"

"$RPAL" host sn 2>"$tmp/host.err" &
hpid=$!
for _ in $(seq 500); do grep -q listening "$tmp/host.err" 2>/dev/null && break; sleep 0.01; done
mkdir "$tmp/elsewhere"
out=$(cd "$tmp/elsewhere" && timeout 30 "$RPAL" join sn ../self 2>&1)
[ $? = 0 ] && ok "rpal join: $out" || bad "rpal join: $out"
want=$(basename "$(realpath "$RPAL")" | cut -c1-15)
comm=$(cat /proc/$hpid/comm 2>/dev/null)
[ "$comm" = "$want" ] && ok "the launcher's process name: $comm" ||
	bad "the launcher's process name: '${comm:-?}', not '$want'"
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null

# 3. The program's path changes while it loads (a library constructor points the symlink it was
#    started by at another file): the name is the file that was loaded.
cat >"$tmp/relink.c" <<'C'
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void relink(void) {
    const char *l = getenv("RELINK"), *to = getenv("RELINK_TO");
    if (l && to && unlink(l) == 0) symlink(to, l);
}
C
mkdir "$tmp/sw"
"$CC" -shared -fPIC -o "$tmp/sw/librelink.so" "$tmp/relink.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/sw/self2" "$tmp/self.c" -L"$tmp/sw" -Wl,--no-as-needed -lrelink -Wl,-rpath,"$tmp/sw" ||
	{ bad "cannot build"; exit 1; }
ln -s "$tmp/sw/self2" "$tmp/sw/prog"
want=$(realpath "$tmp/sw/self2")
out=$(RELINK=$tmp/sw/prog RELINK_TO=$tmp/self timeout 30 "$RPAL" run -q "$tmp/sw/prog" 2>&1)
name=$(echo "$out" | sed -n 's/^dladdr \([^:]*\):.*/\1/p')
[ "$(readlink "$tmp/sw/prog")" = "$tmp/self" ] || bad "the constructor did not move the symlink"
[ "$name" = "$want" ] && ok "the symlink moved while loading: dladdr names the file loaded, $name" ||
	bad "the symlink moved while loading: dladdr names ${name:-?}, not $want: $out"

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
