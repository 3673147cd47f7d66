#!/usr/bin/env bash
# run_join_killed_start.sh RPAL CC - a program's process killed in its first microseconds, before
# it has created its main thread (while it still runs on the host thread's TCB), fails that join
# only: the host keeps answering rpal ps, takes the next join, and stops on SIGTERM.
#  A watcher sends SIGKILL to every new child of the host named "quick" the moment /proc shows it;
#  up to 10 joins of quick, each followed by an rpal ps that must answer.  The check needs one join
#  that the kill reached before the start ("killed by signal 9 before it started"); where none did
#  (the kill always came too late), the test is skipped.
# Prints what it checks; exits 0 pass, 1 fail, 77 skip.
set -u
RPAL=$1 CC=$2
. "$(dirname "$0")/hostlib.sh"

cat >"$tmp/killer.c" <<'C'
/* killer HOSTPID NAME: SIGKILL every child of HOSTPID named NAME as soon as /proc shows it. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int read_line(const char *path, char *buf, int len) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(buf, len, f) != NULL;
    fclose(f);
    return ok;
}
int main(int argc, char **argv) {
    char path[128], kids[4096], comm[64];
    (void)argc;
    for (;;) {
        snprintf(path, sizeof path, "/proc/%s/task", argv[1]);
        DIR *d = opendir(path);
        if (!d) return 0;   /* the host is gone */
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "/proc/%s/task/%s/children", argv[1], e->d_name);
            if (!read_line(path, kids, sizeof kids)) continue;
            for (char *t = strtok(kids, " \n"); t; t = strtok(NULL, " \n")) {
                snprintf(path, sizeof path, "/proc/%s/comm", t);
                if (read_line(path, comm, sizeof comm) && !strncmp(comm, argv[2], strlen(argv[2])) &&
                    comm[strlen(argv[2])] == '\n')
                    kill(atoi(t), SIGKILL);
            }
        }
        closedir(d);
    }
}
C
"$CC" -fPIE -pie -rdynamic -o "$tmp/quick" "$tmp/exit0.c" && "$CC" -O2 -o "$tmp/killer" "$tmp/killer.c" ||
	{ bad "cannot build"; exit 1; }
[ -r /proc/self/task/$$/children ] || { echo "SKIP: no /proc/PID/task/TID/children here"; exit 77; }

start_host kq
"$tmp/killer" $hpid quick &
kpid=$!
hit=0
for i in $(seq 10); do
	out=$(RPAL_JOIN_TIMEOUT=10 timeout 20 "$RPAL" join kq "$tmp/quick" 2>&1)
	rc=$?
	echo "$out" | grep -q "killed by signal 9 before it started" && hit=$((hit + 1))
	if ! timeout 5 "$RPAL" ps kq >/dev/null 2>&1; then
		bad "after join $i (rc $rc: $out) the host does not answer rpal ps"
		break
	fi
	[ $hit -gt 0 ] && break
done
kill $kpid 2>/dev/null
wait $kpid 2>/dev/null
if [ $fail = 0 ] && [ $hit = 0 ]; then
	echo "SKIP: the kill never reached a program before it started in 10 joins"
	exit 77
fi
[ $fail = 0 ] && ok "join $i: $out; rpal ps still answers"
out=$(RPAL_JOIN_TIMEOUT=10 timeout 20 "$RPAL" join kq "$tmp/quick" 2>&1)
rc=$?
[ $rc = 0 ] && ok "the next join runs (rc 0)" || bad "the next join: rc $rc: $out"
kill -TERM $hpid
for _ in $(seq 500); do kill -0 $hpid 2>/dev/null || break; sleep 0.01; done
kill -0 $hpid 2>/dev/null && bad "the host is still up 5 s after SIGTERM" || ok "the host stops on SIGTERM"

[ $fail = 0 ] && echo "PASS" || echo "FAILED"
exit $fail
