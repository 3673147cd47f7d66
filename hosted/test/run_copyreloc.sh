#!/usr/bin/env bash
# run_copyreloc.sh RPAL CC - a program that reads a library's read-only data directly runs hosted
# as it runs exec'd.  Its copy relocation (R_X86_64_COPY) of a const object lands in .data.rel.ro,
# inside PT_GNU_RELRO, which the dynamic linker has made read-only by the time the loader fills
# the copy (C++ programs have such copies of typeinfo and vtables; e2fsck of et_ext2_error_table).
#  1. Linked with -z relro, with -z relro -z now, and with -z norelro (the control): exec'd and
#     under rpal run, the program prints the library's table, a page-crossing array included.
#  2. The copy is read-only afterwards, as under exec: a write to it ends the program by SIGSEGV,
#     and only the program.
#  3. Under rpal host: the join runs, and the host is still up after it.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip (the toolchain put the copy outside
# PT_GNU_RELRO).
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/lib.c" <<'C'
struct tab { int answer; const char *name; };
const struct tab ro_table = { 42, "ro-table" };
const int ro_big[3000] = { [0] = 1, [1500] = 2, [2999] = 3 };
C
cat >"$tmp/prog.c" <<'C'
#include <stdio.h>
#include <string.h>
struct tab { int answer; const char *name; };
extern const struct tab ro_table;
extern const int ro_big[3000];
int main(int argc, char **argv) {
    printf("%d %s %d %d %d\n", ro_table.answer, ro_table.name, ro_big[0], ro_big[1500], ro_big[2999]);
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "write")) *(volatile int *)&ro_table.answer = 7;
    return 0;
}
C
want="42 ro-table 1 2 3"
"$CC" -shared -fPIC -o "$tmp/libro.so" "$tmp/lib.c" || { bad "cannot build the library"; exit 1; }

n=0
for flags in "-Wl,-z,relro" "-Wl,-z,relro,-z,now" "-Wl,-z,norelro"; do
	n=$((n + 1))
	exe=$tmp/prog$n
	# shellcheck disable=SC2086
	"$CC" -fPIE -pie -rdynamic -o "$exe" "$tmp/prog.c" -L"$tmp" -lro -Wl,-rpath,"$tmp" $flags ||
		{ bad "cannot build with $flags"; continue; }
	copy=$(readelf -rW "$exe" | awk '/R_X86_64_COPY/ && /ro_table/ { print $1; exit }')
	[ -n "$copy" ] || { bad "$flags: no copy relocation of ro_table"; continue; }
	# The point of the relro builds: the copy lies inside PT_GNU_RELRO.  A toolchain that puts it
	# elsewhere cannot show what this test is about.
	relro=$(readelf -lW "$exe" | awk '$1 == "GNU_RELRO" { print $3, $6; exit }')
	if [ $n -le 2 ]; then
		set -- $relro
		if [ $# != 2 ] || ! [ $((0x$copy)) -ge $(($1)) ] || ! [ $((0x$copy)) -lt $(($1 + $2)) ]; then
			echo "skip: $flags: the copy of ro_table (0x$copy) is not inside PT_GNU_RELRO (${relro:-none})"
			exit 77
		fi
		ok "$flags: the copy of ro_table (0x$copy) lies inside PT_GNU_RELRO (start, size: $relro)"
	fi
	out=$("$exe" 2>&1)
	[ "$out" = "$want" ] || { bad "$flags: exec'd: $out"; continue; }
	out=$(timeout 30 "$RPAL" run -q "$exe" 2>&1)
	rc=$?
	[ $rc = 0 ] && [ "$out" = "$want" ] && ok "$flags: runs hosted: $out" || bad "$flags: hosted: rc $rc, $out"
done

# 2. The copy stays read-only (relro builds): the program dies of SIGSEGV, its sibling runs on.
{ "$tmp/prog1" write; } >/dev/null 2>&1
rc=$?
[ $rc = 139 ] || bad "negative control: a write to the copy exec'd: rc $rc, not SIGSEGV"
out=$(timeout 30 "$RPAL" run "$tmp/prog1" write ::: "$tmp/prog2" 2>&1)
rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q '\[0\].*signal 11' && echo "$out" | grep -q '\[1\].*status 0'; then
	ok "a write to the copy ends that program by SIGSEGV, the other exits 0"
else
	bad "a write to the copy: rc $rc, $out"
fi

# 3. rpal host: the join runs and the host stays up.
start_host cr
out=$(timeout 30 "$RPAL" join cr "$tmp/prog2" 2>&1)
rc=$?
[ $rc = 0 ] && [ "$out" = "$want" ] && ok "rpal join runs it: $out" || bad "rpal join: rc $rc, $out"
kill -0 $hpid 2>/dev/null && ok "the host is still up" || bad "the host died: $(cat "$tmp/cr.err")"
kill -TERM $hpid 2>/dev/null
wait $hpid 2>/dev/null

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
