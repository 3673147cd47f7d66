/* test_limits.c: how many programs fit in one process after the launcher's GLIBC_TUNABLES re-exec,
 * that they all run at once, each creating threads one after another (the dynamic linker's TLS
 * lock, shared by all of them, under contention), and that one more gives a clear error naming
 * the limit. */
#include "../hosted.h"
#include "check.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    hosted_reexec_with_tunables(argc, argv);
    int keep = dup(1);
    check_out = fdopen(keep, "w");
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1); /* the programs' chatter */
    close(devnull);

    int limit = hosted_ns_limit();
    CHECK(limit == HOSTED_NNS - 1, "programs that can still be loaded (GLIBC_TUNABLES=%s): %d",
          getenv("GLIBC_TUNABLES"), limit);
    hosted_prog *p[64];
    char err[1024] = "";
    int n = 0;
    for (; n < 64; n++) {
        char tag[16];
        snprintf(tag, sizeof tag, "P%d", n);
        char *av[] = {"prog_counter", tag, "1000", "0", "200"};
        p[n] = hosted_load(PROG_COUNTER, 5, av, NULL, err, sizeof err);
        if (!p[n]) break;
    }
    fprintf(check_out, "loaded %d programs; the next one failed with:\n  %s\n", n, err);
    CHECK(n == HOSTED_NNS - 1, "all %d namespaces glibc allows are usable (got %d)",
          HOSTED_NNS - 1, n);
    CHECK(strstr(err, "namespace limit") && strstr(err, "at most 15 hosted programs"),
          "the error names the limit");
    int started = 0, ok = 0;
    for (int i = 0; i < n; i++) started += hosted_start(p[i], err, sizeof err) == 0;
    for (int i = 0; i < n; i++) ok += hosted_wait(p[i]) == 0;
    CHECK(started == n && ok == n, "%d of %d programs ran to exit status 0 at once", ok, n);
    int threads_ok = 0;
    for (int i = 0; i < n; i++) {
        int *t = hosted_sym(p[i], "tls_thread_ok");
        threads_ok += t && *t == 1;
    }
    CHECK(threads_ok == n, "in %d of %d programs, 200 threads each saw their own thread-local",
          threads_ok, n);
    CHECK_DONE();
}
