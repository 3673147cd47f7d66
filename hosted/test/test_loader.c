/* test_loader.c: four ordinary PIE programs (two instances of prog_counter, two of prog_exit) run
 * at once in one process, each in its own namespace; checks separation, exit statuses, flushed
 * stdio, exit handlers, exit() without ending the host. */
#include "../hosted.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define GET(p, T, name) (*(T *)hosted_sym(p, name))

static hosted_prog *load(const char *path, int argc, char **argv) {
    char err[512];
    hosted_prog *p = hosted_load(path, argc, argv, NULL, err, sizeof err);
    CHECK(p != NULL, "load %s %s (%s)", argv[0], argv[1], p ? "" : err);
    if (!p) exit(1);
    return p;
}

int main(int argc, char **argv) {
    hosted_reexec_with_tunables(argc, argv);
    setenv("HOSTED_TEST_ENV", "1", 1);

    /* The hosted programs write to fd 1: send it to a file, keep our own output on a copy. */
    int keep = dup(1);
    check_out = fdopen(keep, "w");
    char outpath[] = "/tmp/hosted_loader_out_XXXXXX";
    int ofd = mkstemp(outpath);
    dup2(ofd, 1);
    close(ofd);

    char *a1[] = {"prog_counter", "A1", "30000", "0"};
    char *a2[] = {"prog_counter", "A2", "50000", "3"};
    char *e1[] = {"prog_exit", "main", "7"};
    char *e2[] = {"prog_exit", "thread", "9"};
    hosted_prog *pa1 = load(PROG_COUNTER, 4, a1);
    hosted_prog *pa2 = load(PROG_COUNTER, 4, a2);
    hosted_prog *pe1 = load(PROG_EXIT, 3, e1);
    hosted_prog *pe2 = load(PROG_EXIT, 3, e2);
    CHECK(hosted_lmid(pa1) != hosted_lmid(pa2) && hosted_lmid(pa1) != 0 &&
              hosted_lmid(pe1) != hosted_lmid(pe2),
          "four namespaces: %ld %ld %ld %ld", hosted_lmid(pa1), hosted_lmid(pa2),
          hosted_lmid(pe1), hosted_lmid(pe2));
    CHECK(&GET(pa1, long, "counter") != &GET(pa2, long, "counter"),
          "the two instances of prog_counter have separate globals (%p, %p)",
          (void *)&GET(pa1, long, "counter"), (void *)&GET(pa2, long, "counter"));
    CHECK(hosted_sym(pa1, "malloc") != hosted_sym(pa2, "malloc") &&
              hosted_sym(pa1, "malloc") != (void *)malloc,
          "each namespace has its own libc (malloc at %p, %p; host %p)", hosted_sym(pa1, "malloc"),
          hosted_sym(pa2, "malloc"), (void *)malloc);

    char err[512];
    hosted_prog *all[] = {pa1, pa2, pe1, pe2};
    for (int i = 0; i < 4; i++)
        CHECK(hosted_start(all[i], err, sizeof err) == 0, "start program %d", i);

    int s1 = hosted_wait(pa1), s2 = hosted_wait(pa2), s3 = hosted_wait(pe1), s4 = hosted_wait(pe2);
    CHECK(s1 == 0 && s2 == 3, "prog_counter exit statuses from main's return: %d, %d", s1, s2);
    CHECK(s3 == 7, "exit(7) deep in main's call chain reported as %d, host alive", s3);
    CHECK(s4 == 9, "exit(9) from a second thread reported as %d, host alive", s4);

    CHECK(GET(pa1, long, "counter") == 30000 && GET(pa2, long, "counter") == 50000,
          "globals independent: %ld, %ld", GET(pa1, long, "counter"), GET(pa2, long, "counter"));
    CHECK(GET(pa1, int, "errno_ok") && GET(pa2, int, "errno_ok"),
          "errno and a thread-local kept their per-program values through the loop");
    uintptr_t fs1 = hosted_main_fsbase(pa1), fs2 = hosted_main_fsbase(pa2);
    uintptr_t ea1 = GET(pa1, uintptr_t, "errno_addr"), ea2 = GET(pa2, uintptr_t, "errno_addr");
    CHECK(GET(pa1, uintptr_t, "main_self") == fs1 && GET(pa2, uintptr_t, "main_self") == fs2,
          "main runs on a thread of its own libc: pthread_self() == that thread's fs base");
    CHECK((intptr_t)(ea1 - fs1) != (intptr_t)(ea2 - fs2) &&
              (intptr_t)(ea1 - fs1) != (intptr_t)((uintptr_t)&errno - hosted_get_fs()),
          "errno lives at a different TLS offset in each libc copy (%ld, %ld; host %ld)",
          (long)(ea1 - fs1), (long)(ea2 - fs2), (long)((uintptr_t)&errno - hosted_get_fs()));
    CHECK(GET(pa1, int, "tls_thread_ok") && GET(pa2, int, "tls_thread_ok"),
          "a thread created by the program gets fresh thread-locals, main's are untouched");
    CHECK(GET(pa1, int, "sbrk_refused") && GET(pa2, int, "sbrk_refused"),
          "sbrk in a secondary namespace fails with ENOMEM: its malloc uses mmap, never the brk");
    CHECK(GET(pa1, uintptr_t, "environ_ok"), "the program sees the environment");
    CHECK(GET(pa1, int, "atexit_ran") && GET(pa2, int, "atexit_ran"), "atexit handlers ran");
    CHECK(GET(pa1, int, "destructor_ran") && GET(pa2, int, "destructor_ran"),
          "the executables' ELF destructors ran");
    CHECK(GET(pe1, int, "handler_ran") && GET(pe2, int, "handler_ran"),
          "exit() ran the handlers of the exiting program");
    /* main ending with pthread_exit(): the process ends when its last thread does. */
    char *e3[] = {"prog_exit", "pthread_exit", "0"};
    hosted_prog *pe3 = load(PROG_EXIT, 3, e3);
    CHECK(hosted_start(pe3, err, sizeof err) == 0, "start prog_exit pthread_exit");
    int done = 0;
    for (int i = 0; i < 1000 && !(done = hosted_done(pe3)); i++) usleep(10 * 1000);
    if (!done) kill(hosted_pid(pe3), SIGKILL);
    int s5 = hosted_wait(pe3);
    CHECK(done && s5 == 0 && GET(pe3, int, "handler_ran"),
          "main ending with pthread_exit(): the process ends with status %d%s after its last thread, "
          "exit handlers run", s5, done ? "" : " (killed after 10 s)");

    CHECK(strcmp(getenv("GLIBC_TUNABLES") ? getenv("GLIBC_TUNABLES") : "", "") != 0,
          "the test re-executed itself with GLIBC_TUNABLES=%s", getenv("GLIBC_TUNABLES"));

    fflush(stdout);
    char buf[8192] = {0};
    int rfd = open(outpath, O_RDONLY);
    ssize_t n = read(rfd, buf, sizeof buf - 1);
    close(rfd);
    unlink(outpath);
    if (n < 0) n = 0;
    buf[n] = 0;
    fprintf(check_out, "---- output of the hosted programs ----\n%s---- end ----\n", buf);
    const char *want[] = {
        "A1: argv ok (prog_counter), counter=30000 tls=30000 errno_ok=1 thread_tls_ok=1 sbrk_refused=1",
        "A2: argv ok (prog_counter), counter=50000 tls=50000 errno_ok=1 thread_tls_ok=1 sbrk_refused=1",
        "A1: atexit handler ran, counter=30000", "A2: atexit handler ran, counter=50000",
        "prog_exit: mode main", "prog_exit: handler ran before exit(7)", "prog_exit: mode thread",
        "prog_exit: handler ran before exit(9)", "prog_exit: the last thread returns",
        "prog_exit: handler ran before exit(0)"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(buf, want[i]) != NULL, "buffered stdout was flushed: \"%s\"", want[i]);
    CHECK_DONE();
}
