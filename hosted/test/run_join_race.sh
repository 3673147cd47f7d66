#!/usr/bin/env bash
# run_join_race.sh RPAL CC - what a joiner may do to its program's files while `rpal host` loads
# it costs the host nothing:
#  1. For 2 s the program is cut to 64 bytes and written again, over and over, while it is joined
#     (a PIE without an exported main: read whole, then refused before dlmopen, so that no join
#     takes a namespace): every join is refused with a message, the host stays up (a host that
#     parsed the file through a mapping of it would die of SIGBUS), and a good join then starts.
#  2. The host's copy of the program, a memfd, which the dynamic linker maps, is open in the host
#     (/proc/HOST/fd/N) while the program loads: cut short there, stopped meanwhile by a
#     constructor of the program's library, it is refused (sealed), and the program runs.
#  3. The joiner's working directory renamed while its program loads (by a constructor of the
#     program's library): the program runs there, under its new name, as a process whose
#     directory is renamed stays in it; no namespace is taken by a program that never started.
# Prints what it checks; exits 0 pass, 1 fail.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

# cutter FILE MS: FILE cut to 64 bytes and written whole again, for MS milliseconds.
cat >"$tmp/cutter.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = argc == 3 ? open(argv[1], O_RDWR) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return 1;
    char *img = malloc((size_t)st.st_size);
    if (!img || pread(fd, img, (size_t)st.st_size, 0) != st.st_size) return 1;
    long ms = atol(argv[2]), cuts = 0, el;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if (ftruncate(fd, 64) < 0) return 1;
        usleep(20);
        if (pwrite(fd, img, (size_t)st.st_size, 0) != st.st_size) return 1;
        usleep(20);
        cuts++;
        clock_gettime(CLOCK_MONOTONIC, &now);
        el = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
    } while (el < ms);
    printf("%ld\n", cuts);
    return 0;
}
C
"$CC" -O2 -o "$tmp/cutter" "$tmp/cutter.c" && "$CC" -fPIE -pie -o "$tmp/noexport" "$tmp/exit0.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/exit0" "$tmp/exit0.c" || { bad "cannot build"; exit 1; }

start_host jr

# ---- 1. the program cut short and written again while it is joined
"$tmp/cutter" "$tmp/noexport" 2000 >"$tmp/cuts" &
cpid=$!
joins=0 noexport=0 shorter=0 other=0 gone=0
while kill -0 $cpid 2>/dev/null; do
	out=$(timeout 20 "$RPAL" join jr "$tmp/noexport" 2>&1)
	rc=$?
	joins=$((joins + 1))
	if ! kill -0 $hpid 2>/dev/null; then
		gone=1
		break
	fi
	if [ $rc -ne 2 ] || ! echo "$out" | grep -q "^rpal join: "; then
		bad "join $joins: rc $rc, $out"
	elif echo "$out" | grep -q "main is not exported"; then
		noexport=$((noexport + 1))
	elif echo "$out" | grep -q "became shorter"; then
		shorter=$((shorter + 1))
	else
		other=$((other + 1))
	fi
done
wait $cpid
if [ $gone = 1 ]; then
	wait $hpid
	bad "the host ended (status $?) at join $joins, while the program was cut short: $out"
	exit 1
fi
ok "$joins joins while the program was cut short $(cat "$tmp/cuts") times: $noexport read whole and" \
	"refused (main not exported), $shorter refused as it became shorter, $other refused otherwise"
out=$(timeout 20 "$RPAL" join jr "$tmp/exit0" 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "the host is up: a good join then starts and exits 0" || bad "good join: rc $rc, $out"
started=$((rc == 0))

# ---- 2. the host's copy cut short by way of /proc/HOST/fd, while a library constructor (which
# runs in the host, inside dlmopen) waits for the word to go on
cat >"$tmp/sync.c" <<'C'
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void at_load(void) {
    const char *loading = getenv("JR_LOADING"), *go = getenv("JR_GO");
    char c;
    int fd;
    if (!loading || !go) return;
    if ((fd = open(loading, O_WRONLY)) >= 0 && write(fd, "L", 1)) close(fd);
    if ((fd = open(go, O_RDONLY)) >= 0 && read(fd, &c, 1)) close(fd);
}
C
"$CC" -shared -fPIC -o "$tmp/libsync.so" "$tmp/sync.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/synced" "$tmp/exit0.c" -Wl,--no-as-needed "$tmp/libsync.so" \
		-Wl,-rpath,"$tmp" || { bad "cannot build"; exit 1; }
mkfifo "$tmp/loading" "$tmp/go"
JR_LOADING=$tmp/loading JR_GO=$tmp/go timeout 20 "$RPAL" join jr "$tmp/synced" >"$tmp/synced.out" 2>&1 &
jpid=$!
timeout 20 cat "$tmp/loading" >/dev/null
cut="no memfd named synced open in the host"
for l in /proc/$hpid/fd/*; do
	case $(readlink "$l") in
	/memfd:synced*)
		truncate -s 0 "$l" 2>"$tmp/trunc.err" && cut="cut to 0 bytes" ||
			cut="not cut: $(sed 's/.*: //' "$tmp/trunc.err")" ;;
	esac
done
timeout 20 sh -c 'echo go >"$1"' _ "$tmp/go"
wait $jpid
rc=$?
[ $rc -eq 0 ] && started=$((started + 1))
if ! kill -0 $hpid 2>/dev/null; then
	wait $hpid
	bad "the host ended (status $?) after its copy of the program was $cut"
	exit 1
fi
case $cut in
"not cut: "*) ok "the host's copy of the program, open while it loads: $cut" ;;
*) bad "the host's copy of the program, open while it loads: $cut" ;;
esac
[ $rc -eq 0 ] && ok "the program then runs, the host is up" || bad "join: rc $rc, $(cat "$tmp/synced.out")"

# ---- 3. the working directory renamed while the program loads
cat >"$tmp/move.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void at_load(void) {
    const char *from = getenv("JR_MOVE_FROM"), *to = getenv("JR_MOVE_TO");
    if (from && to && rename(from, to) < 0) perror("rename");
}
C
cat >"$tmp/pwd.c" <<'C'
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    char d[PATH_MAX];
    if (!getcwd(d, sizeof d)) return perror("getcwd"), 1;
    return puts(d) < 0;
}
C
"$CC" -shared -fPIC -o "$tmp/libmove.so" "$tmp/move.c" &&
	"$CC" -fPIE -pie -rdynamic -o "$tmp/pwd" "$tmp/pwd.c" -Wl,--no-as-needed "$tmp/libmove.so" \
		-Wl,-rpath,"$tmp" || { bad "cannot build"; exit 1; }
loaded() { "$RPAL" ps jr --json | grep -o '"programs_loaded": [0-9]*' | sed 's/.*: //'; }
mkdir "$tmp/here"
out=$(cd "$tmp/here" && JR_MOVE_FROM=$tmp/here JR_MOVE_TO=$tmp/moved timeout 20 "$RPAL" join jr "$tmp/pwd" 2>&1)
rc=$?
[ $rc -eq 0 ] && started=$((started + 1))
[ $rc -eq 0 ] && [ "$out" = "$tmp/moved" ] &&
	ok "a working directory renamed while the program loads: the program runs in it, now $out" ||
	bad "a working directory renamed while the program loads: rc $rc, $out"
n=$(loaded)
[ "$n" = $started ] && ok "rpal ps: $n programs loaded, as many as started" ||
	bad "rpal ps: $n programs loaded, $started started"

kill -TERM $hpid
wait $hpid
rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: the host exits 0" || bad "host stop: rc $rc, $(cat "$tmp/jr.err")"
exit $fail
