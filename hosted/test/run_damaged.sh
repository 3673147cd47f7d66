#!/usr/bin/env bash
# run_damaged.sh RPAL CC - a program file damaged where only the dynamic linker looks (its
# relocations) is refused, saying so, and ends neither `rpal run` nor `rpal host`: the host
# rehearses each load in a child first, where the linker's crash or assertion ends that child only.
#  1. The first dynamic relocation's type changed where the linker asserts it is relative, and its
#     offset moved out of the address space: `rpal run` of each exits 2, "damaged" in its message.
#  2. Under `rpal host`: a join of each is refused the same way; the host is alive, answers
#     `rpal ps`, and a good join starts and exits 0.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip (no relocations to damage).
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

"$CC" -fPIE -pie -rdynamic -o "$tmp/exit0" "$tmp/exit0.c" || { bad "cannot build"; exit 1; }
# damage FILE MODE: rewrites the first entry of .rela.dyn in place (type: R_X86_64_NONE, so the
# linker's count of relative relocations is wrong; offset: far outside any mapping).
cat >"$tmp/damage.c" <<'C'
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
	FILE *f = fopen(argv[1], "r+b");
	Elf64_Ehdr eh;
	if (!f || fread(&eh, sizeof eh, 1, f) != 1 || eh.e_shentsize != sizeof(Elf64_Shdr)) return 2;
	Elf64_Shdr *sh = calloc(eh.e_shnum, sizeof *sh);
	if (!sh || fseek(f, (long)eh.e_shoff, SEEK_SET) || fread(sh, sizeof *sh, eh.e_shnum, f) != eh.e_shnum) return 2;
	char names[4096] = "";
	if (fseek(f, (long)sh[eh.e_shstrndx].sh_offset, SEEK_SET) || !fread(names, 1, sizeof names - 1, f)) return 2;
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		if (sh[i].sh_type != SHT_RELA || sh[i].sh_name >= sizeof names ||
		    strcmp(names + sh[i].sh_name, ".rela.dyn") || sh[i].sh_size < sizeof(Elf64_Rela))
			continue;
		Elf64_Rela r;
		if (fseek(f, (long)sh[i].sh_offset, SEEK_SET) || fread(&r, sizeof r, 1, f) != 1) return 2;
		if (ELF64_R_TYPE(r.r_info) != R_X86_64_RELATIVE) return 3;
		if (!strcmp(argv[2], "type"))
			r.r_info = ELF64_R_INFO(ELF64_R_SYM(r.r_info), R_X86_64_NONE);
		else
			r.r_offset = 0x7ff000000000ull;
		if (fseek(f, (long)sh[i].sh_offset, SEEK_SET) || fwrite(&r, sizeof r, 1, f) != 1) return 2;
		return fclose(f) ? 2 : 0;
	}
	return 3;
}
C
"$CC" -o "$tmp/damage" "$tmp/damage.c" || { bad "cannot build the damaging tool"; exit 1; }
for mode in type offset; do
	cp "$tmp/exit0" "$tmp/bad_$mode"
	"$tmp/damage" "$tmp/bad_$mode" $mode
	rc=$?
	[ $rc -eq 3 ] && { echo "SKIP: $CC's program has no relative relocation first in .rela.dyn"; exit 77; }
	[ $rc -eq 0 ] || { bad "cannot damage a copy ($mode): $rc"; exit 1; }
done

# ---- 1. rpal run
for mode in type offset; do
	out=$(timeout 30 "$RPAL" run "$tmp/bad_$mode" 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "damaged" && ok "rpal run, relocation $mode damaged: exit 2, $out" ||
		bad "rpal run, relocation $mode damaged: rc $rc, $out"
done

# ---- 2. rpal host
start_host dmg
for mode in type offset; do
	out=$(timeout 30 "$RPAL" join dmg "$tmp/bad_$mode" 2>&1)
	rc=$?
	[ $rc -eq 2 ] && echo "$out" | grep -q "damaged" && ok "join, relocation $mode damaged: refused, $out" ||
		bad "join, relocation $mode damaged: rc $rc, $out"
	kill -0 $hpid 2>/dev/null && ok "the host is up" || bad "the host ended: $(cat "$tmp/dmg.err")"
done
timeout 20 "$RPAL" ps dmg >/dev/null 2>&1 && ok "rpal ps answers" || bad "rpal ps does not answer"
out=$(timeout 20 "$RPAL" join dmg "$tmp/exit0" 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "a good join then starts and exits 0" || bad "a good join: rc $rc, $out"
exit $fail
