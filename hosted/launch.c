/* launch.c: the loop behind `rpal run` (cli/cmd_run.c).
 *
 *   PROGRAM [ARGS...] [::: PROGRAM [ARGS...]]...
 *
 * Loads every program (each in its own linker namespace), starts each as its own process in this
 * address space, waits for all, and reports each one's exit status on stderr as it ends.  Each program's environment carries
 * RPAL_HOST (rpal_host.h), so that its copy of librpal joins the others for RPAL calls. */
#include "hosted.h"
#include "rpal_host.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* See hosted.h.  rpal run and rpal join both find a program here: one PATH search, one behaviour. */
const char *hosted_find_in_path(const char *prog, char *buf, size_t len) {
    if (strchr(prog, '/')) return prog;
    const char *path = getenv("PATH"), *found = NULL;
    char cand[PATH_MAX];
    for (path = path ? path : "/usr/local/bin:/usr/bin:/bin"; ; path++) {
        size_t n = strcspn(path, ":");
        struct stat st;
        if (*prog && snprintf(cand, sizeof cand, "%.*s/%s", n ? (int)n : 1, n ? path : ".", prog) < (int)sizeof cand &&
            stat(cand, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                snprintf(buf, len, "%s", cand);
                return buf;
            }
            if (!found) {
                snprintf(buf, len, "%s", cand);
                found = buf;
            }
        }
        path += n;
        if (!*path) break;
    }
    return found;
}

/* What `kill` of rpal run means: each program is its own process, so the launcher passes the
 * signals that ask a process to end on to every program still running, and reports as they end. */
static const int forwarded[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
static _Atomic int running_pids[HOSTED_NNS];
static _Atomic uint64_t received; /* the forwarded signals that reached us, one bit each */

static void forward_all(int sig) {
    for (int k = 0; k < HOSTED_NNS; k++) {
        int pid = atomic_load(&running_pids[k]);
        if (pid > 0) kill(pid, sig);
    }
}

/* The programs share our process group: a signal from the terminal (Ctrl-C) reaches them
 * already; one sent with kill() is passed on.  kill() to the whole group looks the same to us
 * (SI_USER, whoever sent it), so that one can reach each program twice: docs/HOSTED.md's limits
 * say so and why the programs keep our group (the terminal and job control). */
static void forward(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    atomic_fetch_or(&received, 1ull << (sig - 1));
    if (si->si_code == SI_USER || si->si_code == SI_QUEUE) forward_all(sig);
}

int hosted_print_call_end(FILE *f, const char *prefix, const char *path, int pid, int lost, int failed,
                          uint64_t fault_addr) {
    int n = 0;
    if (lost > 0)
        n += fprintf(f, "%s%s (pid %d) ended inside an RPAL call: the receiver it was running is lost\n",
                     prefix, path, pid) > 0;
    /* SIGKILL is never a fault: hosted_host_ended's mark of a receiver lost with its caller. */
    if (failed == SIGKILL)
        n += fprintf(f, "%s%s (pid %d) failed: a caller's thread ended (killed, or by an execve) while "
                     "it ran this program's receiver, which is lost with it\n", prefix, path, pid) > 0;
    else if (failed)
        n += fprintf(f, "%s%s (pid %d) failed: signal %d (%s) inside an RPAL call, at address %#llx\n",
                     prefix, path, pid, failed, strsignal(failed), (unsigned long long)fault_addr) > 0;
    return n;
}

int hosted_print_exec_lost(FILE *f, const char *prefix, const char *path, int pid, int lost) {
    if (lost <= 0) return 0;
    return fprintf(f, "%s%s (pid %d) called execve inside an RPAL call: the receiver it was running is "
                   "lost\n", prefix, path, pid) > 0;
}

int hosted_launch(const char *me, int argc, char **argv, struct rpal_host *host, const char *rundir, int quiet) {
    static hosted_prog *progs[HOSTED_NNS];
    int nprog = 0, i = 0;
    char err[HOSTED_ERR_MAX];

    if (argc <= 0) {
        fprintf(stderr, "%s: no program given\n", me);
        return 2;
    }
    while (i < argc) {
        int start = i;
        while (i < argc && strcmp(argv[i], ":::") != 0) i++;
        int n = i - start;
        /* Skip :::, which must have a program after it as well as before. */
        if (i < argc && ++i == argc) n = 0;
        if (n == 0) {
            fprintf(stderr, "%s: empty program between ::: separators\n", me);
            return 2;
        }
        if (nprog == HOSTED_NNS - 1) {
            fprintf(stderr, "%s: at most %d programs per process (glibc's namespace limit)\n", me,
                    HOSTED_NNS - 1);
            return 2;
        }
        char found[PATH_MAX];
        const char *path = hosted_find_in_path(argv[start], found, sizeof found);
        if (!path) {
            fprintf(stderr, "%s: %s: not found in PATH\n", me, argv[start]);
            return 2;
        }
        int idx = hosted_host_add(host, path);
        char **envp = idx < 0 ? NULL : hosted_host_environ(host, idx, NULL);
        if (!envp) {
            fprintf(stderr, "%s: out of memory\n", me);
            return 2;
        }
        hosted_prog *p = hosted_load(path, n, argv + start, envp, err, sizeof err);
        if (!p) {
            fprintf(stderr, "%s: %s\n", me, err);
            return 2;
        }
        hosted_host_set_code(host, idx, p);
        progs[nprog++] = p;
    }
    for (int k = 0; k < nprog; k++) {
        hosted_spawn sp = { .fds = { -1, -1, -1 }, .umask = -1, .pid_out = &host->progs[k].pid };
        if (hosted_start_spawn(progs[k], &sp, err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", me, err);
            forward_all(SIGKILL);
            return 2;
        }
        atomic_store(&running_pids[k], hosted_pid(progs[k]));
    }
    /* Installed after the programs started: they must not inherit it. */
    struct sigaction sa = { .sa_sigaction = forward };
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    for (unsigned k = 0; k < sizeof forwarded / sizeof forwarded[0]; k++) sigaction(forwarded[k], &sa, NULL);
    /* Report each program as it finishes, in whatever order (a server may outlive its clients). */
    int failed = 0, left = nprog, end_sig = 0;
    char reported[HOSTED_NNS] = { 0 };
    while (left > 0) {
        int k;
        for (k = 0; k < nprog && (reported[k] || !hosted_done(progs[k])); k++)
            ;
        if (k == nprog) {
            struct timespec ts = { 0, 5 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            hosted_host_unmap_unread(host, rundir, 0);
            for (int j = 0; j < nprog; j++) {
                int lost = reported[j] ? -1 : hosted_host_execd(host, j, hosted_pid(progs[j]));
                char prefix[64];
                if (lost <= 0) continue;
                snprintf(prefix, sizeof prefix, "%s: [%d] ", me, j);
                hosted_print_exec_lost(stderr, prefix, hosted_path(progs[j]), hosted_pid(progs[j]), lost);
            }
            continue;
        }
        reported[k] = 1;
        left--;
        atomic_store(&running_pids[k], 0);
        int st = hosted_wait(progs[k]);
        int lost = hosted_host_ended(host, k);
        /* A program killed while it read an outside peer's arena could not unmap it. */
        hosted_host_unmap_unread(host, rundir, 1);
        int sig = atomic_load(&host->progs[k].failed);
        if (st != 0) failed = 1;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: [%d] ", me, k);
        hosted_print_call_end(stderr, prefix, hosted_path(progs[k]), hosted_pid(progs[k]), lost, sig,
                              atomic_load(&host->progs[k].fault_addr));
        /* A failure inside a call says how the program ended; otherwise its status does. */
        if (sig)
            continue;
        int killed = hosted_signal(progs[k]);
        if (killed)
            fprintf(stderr, "%s: [%d] %s (pid %d) was killed by signal %d (%s%s)\n", me, k,
                    hosted_path(progs[k]), hosted_pid(progs[k]), killed, strsignal(killed),
                    hosted_core_dumped(progs[k]) ? ", core dumped" : "");
        else if (!quiet)
            fprintf(stderr, "%s: [%d] %s exited with status %d\n", me, k, hosted_path(progs[k]), st);
        if (killed > 0 && killed < 64 && (atomic_load(&received) & (1ull << (killed - 1))) && !end_sig)
            end_sig = killed;
    }
    return end_sig ? -end_sig : failed;
}
