/* prog_hostile.c: a hosted program that does what a program may do to its own process, for
 * run_hostile.sh.
 *
 *   prog_hostile server SERVICE          serve until a client sends "quit": each message is
 *                                        answered with itself; "syscall" makes the handler call
 *                                        getppid() first (inside an RPAL call: a trap, handed to
 *                                        the server's own thread); "spin" makes it spin 6e9 TSC
 *                                        cycles (seconds) with no system call first
 *   prog_hostile client SERVICE STEP...  connect, then for each STEP: "blockall" blocks every
 *                                        signal on this thread, "ignsys" ignores SIGSYS,
 *                                        "execspin" sends "spin" from another thread and, 0.3 s
 *                                        later, execs `sleep 4` (the call still running), and
 *                                        "killspin" kills its own process there instead, anything
 *                                        else is sent and its answer read; prints one line a step
 *   prog_hostile exec PROGRAM ARGS...    execv(PROGRAM, ARGS): a hosted program that becomes
 *                                        another (its pid and its parent stay, its memory does not) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <x86intrin.h>
#include <rpal.h>

static int server(const char *service) {
    int lfd = rpal_listen(service, NULL);
    if (lfd < 0) {
        fprintf(stderr, "server: listen %s: %s\n", service, rpal_strerror(lfd));
        return 1;
    }
    int ep = rpal_epoll_create(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd }, evs[16];
    rpal_epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    printf("server: ready\n");
    fflush(stdout);
    for (;;) {
        int n = rpal_epoll_wait(ep, evs, 16, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c = rpal_accept(lfd, 0);
                ev.data.fd = c;
                if (c >= 0) rpal_epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                continue;
            }
            char buf[64];
            ssize_t len = rpal_recv(fd, buf, sizeof buf - 1, RPAL_NONBLOCK);
            if (len == -EAGAIN) continue;
            if (len <= 0) {
                rpal_close(fd);
                continue;
            }
            buf[len] = 0;
            if (!strcmp(buf, "quit")) {
                printf("server: quit\n");
                return 0;
            }
            if (!strcmp(buf, "syscall")) getppid();
            if (!strcmp(buf, "spin"))
                for (uint64_t t0 = __rdtsc(); __rdtsc() - t0 < 6000000000ull;)
                    ;
            rpal_send(fd, buf, len, RPAL_NONBLOCK);
        }
    }
}

static atomic_int spin_sent;

/* Send "spin" and wait for the answer that never comes: the call runs the handler on this thread. */
static void *spin_thread(void *arg) {
    int fd = *(int *)arg;
    char buf[64];
    atomic_store(&spin_sent, 1);
    if (rpal_send(fd, "spin", 4, 0) == 4) rpal_recv(fd, buf, sizeof buf, 0);
    return NULL;
}

static int client(const char *service, int n, char **steps) {
    int fd = -1;
    for (int t = 0; t < 500 && fd < 0; t++)
        if ((fd = rpal_connect(service, NULL, 0)) < 0) usleep(10000);
    if (fd < 0) {
        fprintf(stderr, "client: connect %s: %s\n", service, rpal_strerror(fd));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (!strcmp(steps[i], "blockall")) {
            sigset_t all;
            sigfillset(&all);
            printf("client: blockall %d\n", pthread_sigmask(SIG_BLOCK, &all, NULL));
            continue;
        }
        if (!strcmp(steps[i], "execspin") || !strcmp(steps[i], "killspin")) {
            pthread_t t;
            usleep(100000); /* the server parks after its last answer */
            if (pthread_create(&t, NULL, spin_thread, &fd)) return 1;
            while (!atomic_load(&spin_sent)) usleep(1000);
            usleep(300000);
            if (steps[i][0] == 'k') kill(getpid(), SIGKILL);
            printf("client: execspin: exec sleep 4\n");
            fflush(stdout);
            execlp("sleep", "sleep", "4", (char *)NULL);
            perror("exec");
            return 127;
        }
        if (!strcmp(steps[i], "ignsys")) {
            printf("client: ignsys %d\n", signal(SIGSYS, SIG_IGN) == SIG_ERR ? -1 : 0);
            continue;
        }
        char buf[64];
        ssize_t s = rpal_send(fd, steps[i], strlen(steps[i]), 0);
        ssize_t r = s < 0 ? s : rpal_recv(fd, buf, sizeof buf, 0);
        printf("client: %s: sent %zd, answer %zd\n", steps[i], s, r);
        fflush(stdout);
        if (s < 0 || r != s) return 1;
    }
    rpal_close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "server")) return server(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "client")) return client(argv[2], argc - 3, argv + 3);
    if (argc >= 3 && !strcmp(argv[1], "exec")) {
        execv(argv[2], argv + 2);
        perror("exec");
        return 127;
    }
    fprintf(stderr, "usage: prog_hostile server SERVICE | client SERVICE STEP... | exec PROGRAM ARGS...\n");
    return 2;
}
