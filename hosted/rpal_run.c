/* rpal-run: start several ordinary PIE programs in one address space (rpal hosted mode).
 *
 *   rpal-run [-q] ./app --flag ::: ./sidecar arg ::: ...
 *
 * Each program runs in its own glibc linker namespace on its own thread; when all have finished,
 * rpal-run prints each one's exit status (unless -q) and exits 0 if all exited 0, else 1 (2 for a
 * usage or load error).  Programs must be PIE and export main (link with -rdynamic). */
#include "hosted.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void) {
    fprintf(stderr,
            "usage: rpal-run [-q] PROGRAM [ARGS...] [::: PROGRAM [ARGS...]]...\n"
            "  Runs every PROGRAM (a PIE executable linked with -rdynamic) in this one process,\n"
            "  each in its own linker namespace; at most %d programs.\n",
            HOSTED_NNS - 1);
}

int main(int argc, char **argv) {
    hosted_reexec_with_tunables(argc, argv);
    int quiet = 0, i = 1;
    if (i < argc && !strcmp(argv[i], "-q")) quiet = 1, i++;
    if (i < argc && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
        usage();
        return 0;
    }
    if (i >= argc) {
        usage();
        return 2;
    }

    int nprog = 0;
    static hosted_prog *progs[HOSTED_NNS];
    char err[1024];
    while (i < argc) {
        int start = i;
        while (i < argc && strcmp(argv[i], ":::") != 0) i++;
        int n = i - start;
        if (i < argc) i++; /* skip ::: */
        if (n == 0) {
            fprintf(stderr, "rpal-run: empty program between ::: separators\n");
            return 2;
        }
        if (nprog == HOSTED_NNS - 1) {
            fprintf(stderr, "rpal-run: at most %d programs per process (glibc's namespace limit)\n",
                    HOSTED_NNS - 1);
            return 2;
        }
        hosted_prog *p = hosted_load(argv[start], n, argv + start, NULL, err, sizeof err);
        if (!p) {
            fprintf(stderr, "rpal-run: %s\n", err);
            return 2;
        }
        progs[nprog++] = p;
    }
    for (int k = 0; k < nprog; k++)
        if (hosted_start(progs[k], err, sizeof err) < 0) {
            fprintf(stderr, "rpal-run: %s\n", err);
            return 2;
        }
    int failed = 0;
    for (int k = 0; k < nprog; k++) {
        int st = hosted_wait(progs[k]);
        if (st != 0) failed = 1;
        if (!quiet) fprintf(stderr, "rpal-run: [%d] %s exited with status %d\n", k,
                            hosted_path(progs[k]), st);
    }
    /* Every program has run its exit handlers; end without running the namespaces' destructors a
     * second time (the host's exit would run them through _dl_fini). */
    fflush(NULL);
    _exit(failed);
}
