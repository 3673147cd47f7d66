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

    int failed = hosted_launch("rpal-run", argc - i, argv + i, NULL, quiet);
    /* Every program has run its exit handlers; end without running the namespaces' destructors a
     * second time (the host's exit would run them through _dl_fini). */
    fflush(NULL);
    _exit(failed);
}
