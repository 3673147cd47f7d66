/* launch.c: the loop behind `rpal run` (cli/cmd_run.c).
 *
 *   PROGRAM [ARGS...] [::: PROGRAM [ARGS...]]...
 *
 * Loads every program (each in its own linker namespace), starts them all, waits for all, and
 * reports each one's exit status on stderr as it ends.  Each program's environment carries
 * RPAL_HOST (rpal_host.h), so that its copy of librpal joins the others for RPAL calls. */
#include "hosted.h"
#include "rpal_host.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int hosted_launch(const char *me, int argc, char **argv, struct rpal_host *host, int quiet) {
    static hosted_prog *progs[HOSTED_NNS];
    int nprog = 0, i = 0;
    char err[1024];

    if (argc <= 0) {
        fprintf(stderr, "%s: no program given\n", me);
        return 2;
    }
    while (i < argc) {
        int start = i;
        while (i < argc && strcmp(argv[i], ":::") != 0) i++;
        int n = i - start;
        if (i < argc) i++; /* skip ::: */
        if (n == 0) {
            fprintf(stderr, "%s: empty program between ::: separators\n", me);
            return 2;
        }
        if (nprog == HOSTED_NNS - 1) {
            fprintf(stderr, "%s: at most %d programs per process (glibc's namespace limit)\n", me,
                    HOSTED_NNS - 1);
            return 2;
        }
        int idx = hosted_host_add(host, argv[start]);
        char **envp = idx < 0 ? NULL : hosted_host_environ(host, idx);
        if (!envp) {
            fprintf(stderr, "%s: out of memory\n", me);
            return 2;
        }
        hosted_prog *p = hosted_load(argv[start], n, argv + start, envp, err, sizeof err);
        if (!p) {
            fprintf(stderr, "%s: %s\n", me, err);
            return 2;
        }
        progs[nprog++] = p;
    }
    for (int k = 0; k < nprog; k++)
        if (hosted_start(progs[k], err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", me, err);
            return 2;
        }
    /* Report each program as it finishes, in whatever order (a server may outlive its clients). */
    int failed = 0, left = nprog;
    char reported[HOSTED_NNS] = { 0 };
    while (left > 0) {
        int k;
        for (k = 0; k < nprog && (reported[k] || !hosted_done(progs[k])); k++)
            ;
        if (k == nprog) {
            struct timespec ts = { 0, 5 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            continue;
        }
        reported[k] = 1;
        left--;
        int st = hosted_wait(progs[k]);
        int sig = atomic_load(&host->progs[k].failed);
        if (st != 0) failed = 1;
        if (sig)
            fprintf(stderr, "%s: [%d] %s failed: signal %d (%s) inside an RPAL call, at address %#llx\n",
                    me, k, hosted_path(progs[k]), sig, strsignal(sig),
                    (unsigned long long)atomic_load(&host->progs[k].fault_addr));
        else if (!quiet)
            fprintf(stderr, "%s: [%d] %s exited with status %d\n", me, k, hosted_path(progs[k]), st);
    }
    return failed;
}
