/* prog_proc.c: what a hosted program sees of its own process, for run_host.sh.
 *   prog_proc info        its pid, parent, cwd, umask, RLIMIT_NOFILE, RPAL_TEST_VAR, whether
 *                         SIGPIPE and SIGHUP are ignored, and its open descriptors, one per line
 *   prog_proc hold FILE   opens FILE, says which descriptor it got, then waits for SIGTERM in a
 *                         handler of its own and exits 0 ("clean shutdown")
 *   prog_proc count       counts the SIGINTs that reach it: from the first, for 1 s, then says how
 *                         many ("got SIGINT N time(s)") and exits 0 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t term;

static void on_term(int sig) { term = sig; }
static volatile sig_atomic_t nint;
static void on_int(int sig) { (void)sig; nint++; }

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "info")) {
        char cwd[4096];
        struct rlimit rl;
        mode_t m = umask(0);
        umask(m);
        getrlimit(RLIMIT_NOFILE, &rl);
        printf("pid %d ppid %d\n", (int)getpid(), (int)getppid());
        printf("cwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
        printf("umask %03o\n", (unsigned)m);
        printf("nofile %llu\n", (unsigned long long)rl.rlim_cur);
        printf("var %s\n", getenv("RPAL_TEST_VAR") ? getenv("RPAL_TEST_VAR") : "(unset)");
        struct sigaction pipe_sa, hup_sa;
        sigaction(SIGPIPE, NULL, &pipe_sa);
        sigaction(SIGHUP, NULL, &hup_sa);
        printf("sigpipe %s sighup %s\n", pipe_sa.sa_handler == SIG_IGN ? "ignored" : "default",
               hup_sa.sa_handler == SIG_IGN ? "ignored" : "default");
        DIR *d = opendir("/proc/self/fd");
        printf("fds");
        for (struct dirent *e; d && (e = readdir(d));)
            if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) printf(" %s", e->d_name);
        printf("\n");
        if (d) closedir(d);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "hold")) {
        struct sigaction sa = { .sa_handler = on_term };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        int fd = open(argv[2], O_RDONLY);
        printf("holding fd %d\n", fd);
        fflush(stdout);
        while (!term) pause();
        printf("clean shutdown on signal %d\n", (int)term);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "count")) {
        struct sigaction sa = { .sa_handler = on_int };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        printf("counting, pid %d\n", (int)getpid());
        fflush(stdout);
        while (!nint) pause();
        sleep(1);
        printf("got SIGINT %d time(s)\n", (int)nint);
        return 0;
    }
    fprintf(stderr, "usage: prog_proc info | hold FILE | count\n");
    return 2;
}
