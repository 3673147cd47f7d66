/* test_kill.c: kill -9 of a hosted process while its programs are parked or inside RPAL calls.
 *
 * Each round starts `rpal run prog_rpc server S ::: prog_rpc client S 2 <forever>`: a hosted server
 * whose two hosted client threads keep it in RPAL calls.  We are a connected-mode peer in another
 * process: we connect to the hosted server and keep round trips going, and we keep a connection to
 * a steady server of our own.  At a random moment the hosted process gets SIGKILL.  Checks: we
 * notice within one second (our call fails with ECONNRESET or EPIPE, or end of stream), never hang
 * or crash, the steady connection keeps working, and afterwards we hold no extra connection,
 * mapped peer, arena byte or descriptor.  The next round connects to a new instance. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rpal.h>

#include "rpc_proto.h"

/* Quiet in the loop: only a failure prints, and ends the test. */
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            printf("FAIL: ");                                                                     \
            printf(__VA_ARGS__);                                                                  \
            printf("   [%s]\n", #cond);                                                           \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int count_fds(void) {
    char path[64];
    int n = 0;
    for (int fd = 0; fd < 4096; fd++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (access(path, F_OK) == 0) n++;
    }
    return n;
}

/* A plain rpal echo server in its own process: the connection that must survive. */
static char steady_name[64];

static void steady_server(int ready) {
    rpal_fini();
    int l = rpal_listen(steady_name, NULL);
    (void)!write(ready, "r", 1);
    int fd = rpal_accept(l, 0);
    char b[64];
    ssize_t n;
    while ((n = rpal_recv(fd, b, sizeof b, 0)) > 0) rpal_send(fd, b, (size_t)n, 0);
    _exit(0);
}

static pid_t start_host(const char *svc) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execl(RPAL_BIN, RPAL_BIN, "run", "-q", PROG_RPC, "server", svc, ":::", PROG_RPC, "client", svc,
              "2", "1000000000000", (char *)NULL);
        _exit(127);
    }
    return p;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    char svc[64];
    int sp[2];
    struct rpal_stats st0, st;
    double worst = 0;
    long in_flight_kills = 0;
    unsigned seed = (unsigned)getpid();

    CHECK(rpal_init(NULL) == 0, "rpal_init");
    CHECK(pipe(sp) == 0, "pipe");
    snprintf(steady_name, sizeof steady_name, "@hkill-steady-%d", (int)getpid());
    fflush(stdout);
    pid_t steady_pid = fork();
    if (steady_pid == 0) steady_server(sp[1]);
    char c;
    CHECK(read(sp[0], &c, 1) == 1, "steady server up");
    int steady = rpal_connect(steady_name, NULL, 0);
    CHECK(steady >= 0, "connect to the steady server: %s", rpal_strerror(steady));
    CHECK(rpal_stats(&st0) == 0, "stats");
    int fds0 = count_fds();

    printf("%ld rounds: a hosted server in RPAL calls, its process killed at a random moment\n", rounds);
    for (long r = 0; r < rounds; r++) {
        snprintf(svc, sizeof svc, "hkill-%d-%ld", (int)getpid(), r);
        pid_t host = start_host(svc);
        int fd = -1;
        for (int i = 0; i < 500 && fd < 0; i++) {
            fd = rpal_connect(svc, NULL, 0);
            if (fd < 0) usleep(10000);
        }
        CHECK(fd >= 0, "round %ld: connect to the hosted server: %s", r, rpal_strerror(fd));
        uint64_t kill_at = now_ns() + 2000000 + (uint64_t)(rand_r(&seed) % 40000000), killed = 0;
        long trips = 0;
        int err = 0;
        for (;;) {
            if (!killed && now_ns() >= kill_at) {
                CHECK(kill(host, SIGKILL) == 0, "kill");
                killed = now_ns();
            }
            struct req q = { .op = OP_ECHO, .seq = (uint32_t)trips };
            struct rep p;
            q.sum = checksum(q.data, sizeof q.data);
            ssize_t s = rpal_send(fd, &q, sizeof q, 0);
            ssize_t n = s < 0 ? s : rpal_recv(fd, &p, sizeof p, RPAL_NONBLOCK);
            while (n == -EAGAIN && (!killed || now_ns() - killed < 2000000000ull))
                n = rpal_recv(fd, &p, sizeof p, 0);
            if (n <= 0) {
                err = (int)n;
                break;
            }
            CHECK(n == sizeof p && p.seq == q.seq && p.sum == q.sum, "round %ld: bad echo", r);
            trips++;
            CHECK(!killed || now_ns() - killed < 1000000000ull, "round %ld: still answered 1 s after kill -9", r);
        }
        CHECK(killed, "round %ld: connection failed before the kill (%s)", r, rpal_strerror(err));
        double ms = (double)(now_ns() - killed) / 1e6;
        CHECK(ms < 1000, "round %ld: noticed after %.1f ms", r, ms);
        CHECK(err == 0 || err == -ECONNRESET || err == -EPIPE, "round %ld: error %d (%s)", r, err,
              rpal_strerror(err));
        if (ms > worst) worst = ms;
        in_flight_kills += trips > 0;
        int status;
        CHECK(waitpid(host, &status, 0) == host && WIFSIGNALED(status), "round %ld: host killed", r);
        CHECK(rpal_close(fd) == 0, "close");
        /* The other connection is untouched. */
        char pong[8];
        CHECK(rpal_send(steady, "ping", 4, 0) == 4 && rpal_recv(steady, pong, sizeof pong, 0) == 4,
              "round %ld: the steady connection", r);
        CHECK(rpal_stats(&st) == 0, "stats");
        CHECK(st.nr_conns == st0.nr_conns && st.nr_peers_mapped == st0.nr_peers_mapped,
              "round %ld: %u conns, %u peers mapped (was %u, %u)", r, st.nr_conns, st.nr_peers_mapped,
              st0.nr_conns, st0.nr_peers_mapped);
        CHECK(st.arena_used == st0.arena_used, "round %ld: arena %zu bytes used, was %zu", r, st.arena_used,
              st0.arena_used);
        CHECK(count_fds() == fds0, "round %ld: %d descriptors, was %d", r, count_fds(), fds0);
    }
    printf("ok: %ld kills (%ld after round trips through the hosted server), worst kill-to-error %.1f ms\n",
           rounds, in_flight_kills, worst);
    printf("ok: the steady connection answered after every round; no connection, peer mapping, arena "
           "byte or descriptor left behind\n");
    rpal_close(steady);
    waitpid(steady_pid, NULL, 0);
    return 0;
}
