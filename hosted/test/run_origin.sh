#!/usr/bin/env bash
# run_origin.sh RPAL CC - a program that finds its libraries through $ORIGIN runs hosted as it runs
# exec'd: $ORIGIN is the program's own directory, not that of the launcher's copy.
#  1. RUNPATH $ORIGIN/../lib, RPATH ${ORIGIN}/../lib, and a DT_NEEDED of $ORIGIN/../lib/libb.so:
#     each runs under exec (the control) and under rpal run, with the library's answer.
#  2. Run through a symlink from another directory: $ORIGIN is the real file's, as under exec.
#  3. In a directory so deep that its name fits nowhere in the file: it runs, or it is refused
#     with the LD_LIBRARY_PATH advice, and that advice works.
#  4. In a directory whose name has a ':' or a '$' (which the dynamic linker would split at or
#     expand, in a search path): refused with the advice, which works; a DT_NEEDED of
#     $ORIGIN/... in a directory with a ':' runs.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

cat >"$tmp/liba.c" <<'C'
int lib_answer(void) { return 42; }
C
cat >"$tmp/prog.c" <<'C'
#include <stdio.h>
int lib_answer(void);
int main(void) { printf("answer %d\n", lib_answer()); return lib_answer() == 42 ? 0 : 1; }
C

# build DIR SONAME RPATH-FLAGS...: DIR/bin/prog linked against DIR/lib/liba.so.
build() {
	local d=$1 soname=$2
	shift 2
	mkdir -p "$d/bin" "$d/lib"
	"$CC" -shared -fPIC -o "$d/lib/liba.so" -Wl,-soname,"$soname" "$tmp/liba.c" &&
		"$CC" -fPIE -pie -rdynamic -o "$d/bin/prog" "$tmp/prog.c" "$d/lib/liba.so" "$@"
}

# check WHAT PROG: exec'd and hosted, PROG prints the library's answer and exits 0.
check() {
	local out
	out=$("$2" 2>&1)
	[ "$out" = "answer 42" ] || { bad "$1: exec'd: $out"; return; }
	out=$(timeout 30 "$RPAL" run -q "$2" 2>&1)
	[ $? = 0 ] && [ "$out" = "answer 42" ] && ok "$1: runs hosted" || bad "$1: hosted: $out"
}

build "$tmp/runpath" liba.so -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib' || { bad "cannot build"; exit 1; }
check 'RUNPATH $ORIGIN/../lib' "$tmp/runpath/bin/prog"
build "$tmp/rpath" liba.so -Wl,--disable-new-dtags,-rpath,'${ORIGIN}/../lib' || { bad "cannot build"; exit 1; }
check 'RPATH ${ORIGIN}/../lib' "$tmp/rpath/bin/prog"
build "$tmp/needed" '$ORIGIN/../lib/liba.so' || { bad "cannot build"; exit 1; }
check 'DT_NEEDED $ORIGIN/../lib/liba.so' "$tmp/needed/bin/prog"

mkdir -p "$tmp/elsewhere"
ln -s "$tmp/runpath/bin/prog" "$tmp/elsewhere/prog"
check 'through a symlink in another directory' "$tmp/elsewhere/prog"

# A directory name of about 3,900 bytes (PATH_MAX is 4,096): only a segment that ends in the first
# 200 bytes of a page leaves room for it.
# advised WHAT DIR LIBDIR [may-run]: DIR/bin/prog is refused hosted with the LD_LIBRARY_PATH
# advice, and runs with LD_LIBRARY_PATH=LIBDIR; with may-run, running at once passes too.
advised() {
	local out rc
	out=$(cd "$2/bin" && timeout 30 "$RPAL" run -q ./prog 2>&1)
	rc=$?
	if [ -n "${4:-}" ] && [ $rc = 0 ] && [ "$out" = "answer 42" ]; then
		ok "$1: runs hosted (the file had room)"
	elif echo "$out" | grep -q 'LD_LIBRARY_PATH'; then
		ok "$1: refused with the advice: $(echo "$out" | head -c 200)..."
		out=$(cd "$2/bin" && LD_LIBRARY_PATH="$3" timeout 30 "$RPAL" run -q ./prog 2>&1)
		[ $? = 0 ] && [ "$out" = "answer 42" ] && ok "$1: with LD_LIBRARY_PATH it runs" ||
			bad "$1: with LD_LIBRARY_PATH: $out"
	else
		bad "$1: exit $rc, no advice: $out"
	fi
}
deep=$tmp
while [ ${#deep} -lt 3880 ]; do deep=$deep/$(printf 'd%.0s' $(seq 60)); done
build "$deep" liba.so -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib' || { bad "cannot build deep"; exit 1; }
advised "a ${#deep}-byte directory" "$deep" "$deep/lib" may-run

build "$tmp/a:b" liba.so -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib' || { bad "cannot build a:b"; exit 1; }
ln -s "$tmp/a:b/lib" "$tmp/ab-lib"
advised "RUNPATH in a directory named a:b" "$tmp/a:b" "$tmp/ab-lib"
build "$tmp/x\$LIB" liba.so -Wl,--enable-new-dtags,-rpath,'$ORIGIN/../lib' || { bad "cannot build x\$LIB"; exit 1; }
ln -s "$tmp/x\$LIB/lib" "$tmp/xlib-lib"
advised 'RUNPATH in a directory named x$LIB' "$tmp/x\$LIB" "$tmp/xlib-lib"
build "$tmp/n:c" '$ORIGIN/../lib/liba.so' || { bad "cannot build n:c"; exit 1; }
check 'DT_NEEDED $ORIGIN/../lib/liba.so in a directory named n:c' "$tmp/n:c/bin/prog"

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
