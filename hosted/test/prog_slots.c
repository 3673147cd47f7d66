/* prog_slots.c: hosted programs for run_slots.sh, which checks that an arena stays in place for
 * as long as another program reads it, in the one address space of a host.
 *
 *   prog_slots source SERVICE           listen and print "source: listening, pid N"; accept one
 *                                       connection; send it an 8 KiB zero-copy buffer of 'A',
 *                                       then 4000 bytes of 'B' and "hello"; print "source: sent",
 *                                       then wait to be killed
 *   prog_slots hold SERVICE GO          connect, take the buffer (rpal_recv_msg) and print
 *                                       "hold: holding"; once the file GO exists, check that the
 *                                       buffer still reads 'A' and that the two queued messages
 *                                       arrive whole; exit 0 when all held, 1 otherwise
 *   prog_slots claim SERVICE            rpal_listen(SERVICE): claim a slot; print "claim: slot N"
 *                                       and exit 0, or the error and exit 1
 *   prog_slots echo SERVICE GO [close|closeat]
 *                                       connect to an echo server and check one 4000-byte echo;
 *                                       print "echo: ready, pid N"; with close, rpal_close() and print
 *                                       "echo: closed"; once the file GO exists, check another
 *                                       echo (with close, just exit 0; with closeat, rpal_close()
 *                                       and print "echo: closed")
 * Prints what it does; exits 0 when what it checked held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <rpal.h>

enum { BUF = 8192, BIG = 4000 };

static void wait_for(const char *path) {
    struct stat st;
    while (stat(path, &st) != 0) usleep(10000);
}

/* How many of the n bytes at p are not c. */
static size_t differ(const void *p, size_t n, char c) {
    const char *s = p;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += s[i] != c;
    return bad;
}

static int source(const char *service) {
    int lfd = rpal_listen(service, NULL);
    if (lfd < 0) {
        fprintf(stderr, "source: listen %s: %s\n", service, rpal_strerror(lfd));
        return 1;
    }
    printf("source: listening, pid %d\n", (int)getpid());
    fflush(stdout);
    int fd = rpal_accept(lfd, 0);
    char *b = fd >= 0 ? rpal_buf_alloc(BUF) : NULL;
    if (!b) {
        fprintf(stderr, "source: accept or buffer: %s\n", rpal_strerror(fd < 0 ? fd : -12));
        return 1;
    }
    memset(b, 'A', BUF);
    char big[BIG];
    memset(big, 'B', sizeof big);
    if (rpal_send_buf(fd, b, BUF, 0) < 0 || rpal_send(fd, big, sizeof big, 0) != BIG ||
        rpal_send(fd, "hello", 5, 0) != 5) {
        fprintf(stderr, "source: send failed\n");
        return 1;
    }
    printf("source: sent\n");
    fflush(stdout);
    for (;;) pause();
}

static int connect_to(const char *service) {
    int fd = -1;
    for (int i = 0; i < 500 && fd < 0; i++) {
        fd = rpal_connect(service, NULL, 0);
        if (fd < 0) usleep(10000);
    }
    if (fd < 0) fprintf(stderr, "connect %s: %s\n", service, rpal_strerror(fd));
    return fd;
}

static int hold(const char *service, const char *go) {
    int fd = connect_to(service), fail = 0;
    struct rpal_msg m;
    if (fd < 0) return 1;
    if (rpal_recv_msg(fd, &m, 1, 0) != 1 || m.len != BUF) {
        fprintf(stderr, "hold: no buffer message\n");
        return 1;
    }
    printf("hold: holding\n");
    fflush(stdout);
    wait_for(go);
    size_t bad = differ(m.data, m.len, 'A');
    printf("hold: held buffer: %zu of %u bytes changed\n", bad, m.len);
    fail |= bad != 0;
    char buf[BIG];
    ssize_t n = rpal_recv(fd, buf, sizeof buf, 0);
    printf("hold: queued message: %zd bytes, %zu not 'B'\n", n, n > 0 ? differ(buf, (size_t)n, 'B') : 0);
    fail |= n != BIG || differ(buf, BIG, 'B');
    n = rpal_recv(fd, buf, sizeof buf, 0);
    printf("hold: queued message: %zd bytes, %s\n", n, n == 5 && !memcmp(buf, "hello", 5) ? "hello" : "wrong");
    fail |= n != 5 || memcmp(buf, "hello", 5);
    rpal_msg_release(fd, &m, 1);
    rpal_close(fd);
    return fail;
}

static int claim(const char *service) {
    int lfd = rpal_listen(service, NULL);
    unsigned slot;
    if (lfd < 0) {
        printf("claim: %s\n", rpal_strerror(lfd));
        return 1;
    }
    rpal_self(&slot, NULL, NULL);
    printf("claim: slot %u\n", slot);
    return 0;
}

static int echo_once(int fd, char c) {
    char out[BIG], in[BIG];
    memset(out, c, sizeof out);
    if (rpal_send(fd, out, sizeof out, 0) != BIG) return -1;
    size_t got = 0;
    while (got < BIG) {
        ssize_t n = rpal_recv(fd, in + got, sizeof in - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return differ(in, BIG, c) ? -1 : 0;
}

static int echo(const char *service, const char *go, const char *how) {
    int close_early = !strcmp(how, "close"), close_at_go = !strcmp(how, "closeat");
    int fd = connect_to(service);
    if (fd < 0 || echo_once(fd, 'x')) {
        fprintf(stderr, "echo: first echo failed\n");
        return 1;
    }
    printf("echo: ready, pid %d\n", (int)getpid());
    if (close_early) {
        rpal_close(fd);
        printf("echo: closed\n");
    }
    fflush(stdout);
    wait_for(go);
    if (close_early) return 0;
    if (close_at_go) {
        rpal_close(fd);
        printf("echo: closed\n");
        return 0;
    }
    if (echo_once(fd, 'y')) {
        printf("echo: second echo failed\n");
        return 1;
    }
    printf("echo: second echo whole\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "source")) return source(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "hold")) return hold(argv[2], argv[3]);
    if (argc >= 3 && !strcmp(argv[1], "claim")) return claim(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "echo")) return echo(argv[2], argv[3], argc > 4 ? argv[4] : "");
    fprintf(stderr, "usage: prog_slots source|hold|claim|echo SERVICE ...\n");
    return 2;
}
