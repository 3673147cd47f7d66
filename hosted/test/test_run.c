/* test_run.c: `rpal run` as a launcher, with programs that do not use librpal: every program's
 * output and exit handlers, a status line per program, and the exit code (0 all exited 0, 1 one
 * did not, 2 a program that cannot be hosted).  RPAL calls are hosted_call's (run_call.sh). */
#include "check.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

static int run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    static char out[65536];
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s run %s X1 1000 0 ::: %s X2 2000 0 ::: %s main 0 2>&1", RPAL_BIN, PROG_COUNTER,
             PROG_COUNTER, PROG_EXIT);
    int rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 0, "all programs exited 0: rpal run exits 0 (got %d)", rc);
    CHECK(strstr(out, "X1: argv ok") && strstr(out, "X2: argv ok") &&
              strstr(out, "X1: atexit handler ran, counter=1000") &&
              strstr(out, "X2: atexit handler ran, counter=2000") &&
              strstr(out, "prog_exit: handler ran before exit(0)"),
          "each program's output and exit handlers appear");
    CHECK(strstr(out, "[0]") && strstr(out, "exited with status 0") && strstr(out, "[2]"),
          "a status line per program");

    snprintf(cmd, sizeof cmd, "%s run %s X1 10 0 ::: %s main 5 2>&1", RPAL_BIN, PROG_COUNTER,
             PROG_EXIT);
    rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 1, "one program exited 5: rpal run exits 1 (got %d)", rc);
    CHECK(strstr(out, "exited with status 5") != NULL, "status 5 reported");

    snprintf(cmd, sizeof cmd, "%s run /bin/sh -c true 2>&1", RPAL_BIN);
    rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 2 && strstr(out, "rpal run:"), "a program that cannot be hosted: exit 2 and a message");

    snprintf(cmd, sizeof cmd, "%s run -q %s main 0 2>&1", RPAL_BIN, PROG_EXIT);
    rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 0 && !strstr(out, "exited with status"), "-q: no status line");

    /* A PROGRAM without a slash is looked up in PATH, as execvp(3) and rpal join do. */
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", PROG_EXIT);
    char *base = strrchr(dir, '/');
    *base++ = 0;
    snprintf(cmd, sizeof cmd, "cd / && PATH=/nonexistent:%s:/usr/bin:/bin %s run %s main 7 2>&1", dir,
             RPAL_BIN, base);
    rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 1 && strstr(out, "prog_exit: handler ran before exit(7)") &&
              strstr(out, "exited with status 7"),
          "a program named without a slash is found in PATH (exit 7 reported, got %d)", rc);
    snprintf(cmd, sizeof cmd, "cd / && PATH=/nonexistent %s run %s main 7 2>&1", RPAL_BIN, base);
    rc = run(cmd, out, sizeof out);
    printf("---- %s\n%s----\n", cmd, out);
    CHECK(rc == 2 && strstr(out, "not found in PATH"), "one that is not in PATH: exit 2 and a message");

    snprintf(cmd, sizeof cmd, "%s run 2>&1", RPAL_BIN);
    rc = run(cmd, out, sizeof out);
    CHECK(rc == 2 && strstr(out, "usage: rpal run"), "no program: usage, exit 2");
    CHECK_DONE();
}
