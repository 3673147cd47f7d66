/* test_ctor.c: the executable's constructors run like an exec's: in the program's own process,
 * just before main, after the copy relocations and environ are set.  A constructor that writes
 * through stderr works; one that calls exit(3) or faults ends that program only, with status 3 or
 * signal 11, and the launcher runs on.  The constructor of the program's library sees the
 * program's environment. */
#include "../hosted.h"
#include "check.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static char outpath[] = "/tmp/hosted_ctor_out_XXXXXX";
static int ofd;

/* Load and run prog_ctor with CTOR_MODE=mode; its exit status, or -1 when it could not start. */
static int run(const char *mode, hosted_prog **pp) {
    char err[512], envs[64];
    char *av[] = {"prog_ctor", "x", NULL};
    snprintf(envs, sizeof envs, "CTOR_MODE=%s", mode);
    char *envp[] = {envs, NULL};
    hosted_prog *p = hosted_load(PROG_CTOR, 2, av, envp, err, sizeof err);
    CHECK(p != NULL, "load prog_ctor with CTOR_MODE=%s (%s)", mode, p ? "" : err);
    if (!p) return -1;
    *pp = p;
    CHECK(*(int *)hosted_sym(p, "ctor_pid") == 0, "CTOR_MODE=%s: its constructor did not run at load",
          mode);
    hosted_spawn sp = {.fds = {-1, ofd, ofd}, .umask = -1};
    if (hosted_start_spawn(p, &sp, err, sizeof err) < 0) {
        CHECK(0, "start (%s)", err);
        return -1;
    }
    return hosted_wait(p);
}

int main(int argc, char **argv) {
    hosted_reexec_with_tunables(argc, argv);
    unsetenv("CTOR_MODE");
    ofd = mkstemp(outpath);
    if (ofd < 0) SKIP("mkstemp");
    unlink(outpath);

    hosted_prog *p = NULL;
    int st = run("stderr", &p);
    char out[4096] = {0};
    ssize_t n = pread(ofd, out, sizeof out - 1, 0);
    if (n > 0) out[n] = 0;
    fprintf(CHECK_OUT, "  | %s", out);
    CHECK(st == 0 && strstr(out, "prog_ctor: constructor writes through stderr") &&
              strstr(out, "prog_ctor: main"),
          "a constructor writing through stderr works, then main runs (status %d)", st);
    if (p) {
        CHECK(*(int *)hosted_sym(p, "ctor_pid") == hosted_pid(p) && hosted_pid(p) != getpid(),
              "the constructor ran in the program's process (pid %d; launcher %d)",
              *(int *)hosted_sym(p, "ctor_pid"), (int)getpid());
        CHECK(*(int *)hosted_sym(p, "ctor_argc") == 2, "the constructor got argc %d",
              *(int *)hosted_sym(p, "ctor_argc"));
    }
    CHECK(strstr(out, "the library's constructor saw CTOR_MODE=stderr") != NULL,
          "the library's constructor saw the program's environment, not the launcher's");

    st = run("exit", &p);
    CHECK(st == 3 && p && !*(int *)hosted_sym(p, "main_ran"),
          "exit(3) in a constructor ends that program with status 3 (%d), main never runs, the "
          "launcher runs on", st);
    st = run("segv", &p);
    CHECK(st == 128 + 11 && p && !*(int *)hosted_sym(p, "main_ran"),
          "a fault in a constructor kills that program (status %d), the launcher runs on", st);
    CHECK_DONE();
}
