/* prog_rpc.c: an ordinary rpal program (connected-mode source) that the hosted tests run under
 * `rpal run`, and that also runs as a plain process.
 *
 *   prog_rpc server SERVICE [meddle]     serve until a client sends QUIT; with meddle, a second
 *                                        thread keeps re-arming the server's connections
 *                                        (EPOLL_CTL_MOD) and polling its set (timeout 0) while
 *                                        calls run, the set's other users (not its parked owner)
 *   prog_rpc client SERVICE THREADS N    THREADS connections x N checksummed round trips, then
 *                                        the probes below (when hosted), then QUIT
 *   prog_rpc crasher SERVICE [overflow|spin]  ask the server to fault inside its handler; check
 *                                        that our send fails with ECONNRESET and that we go on;
 *                                        with overflow, the handler overflows its stack, and this
 *                                        thread has an alternate signal stack for the fault; with
 *                                        spin, the handler spins on our thread until we are killed
 *   prog_rpc dropper SERVICE N           connect, start a second thread, drop to uid and gid 65534
 *                                        with libc's setgroups, setresgid and setresuid (run as
 *                                        root), check that every thread of the program did (the
 *                                        process's first task keeps its ids), and that pidfd_getfd
 *                                        of the server is refused now, then N GETTID round trips: each
 *                                        hands a syscall off to the server's thread, which sleeps
 *                                        until we kick it; one that takes 10 s ends us (status 3)
 *   prog_rpc calleekill SERVICE          one call whose handler spins 2 s on our thread, then calls
 *                                        getpid(): the script kills the server meanwhile; prints
 *                                        what the send, the receive and a second send return
 *   prog_rpc selfcall SERVICE N          a server thread and N GETTID round trips from another
 *                                        thread of ours: the handler's gettid() is the server
 *                                        thread's every time
 *   prog_rpc signals SERVICE N           N calls that each spin 100 ms on our thread while a timer
 *                                        sends this thread SIGUSR1: the handler, which the kernel
 *                                        runs on top of the server's code, must find our pid, write
 *                                        our pipe and see its own mask; the server's getpid() after
 *                                        it, the server's pid; SIGUSR1 not left blocked after
 *   prog_rpc sigfill SERVICE N           the same with the handler's sa_mask full (sigfillset):
 *                                        SIGSYS is blocked while it runs
 *   prog_rpc sigexit SERVICE             one such call whose handler calls _exit(42): we end
 *   prog_rpc sigfault SERVICE            one such call whose handler writes to address 3 or so:
 *                                        we die of SIGSEGV, the server is not blamed
 *   prog_rpc sigvec SERVICE N            N calls that each keep values in the server's ymm0-15,
 *                                        r12-r15, MXCSR and x87 control word for 60 ms while a
 *                                        timer sends this thread SIGUSR1, whose handler clobbers
 *                                        them and makes failing system calls (errno): the server
 *                                        must find them intact; every other call on an alternate
 *                                        signal stack, and every other pair with SIGUSR2's handler
 *                                        run on top of SIGUSR1's (exit 77 without AVX)
 *   prog_rpc sigstorm SERVICE N [fill]   N echo calls while a timer sends this thread SIGUSR1
 *                                        every 37 us, whose handler calls getpid(): we must live
 *                                        through all of them, and it must find our pid; with
 *                                        fill, every signal is blocked while the handler runs
 *
 * The server answers on the connection the request came on.  Probes: GETTID (the handler's
 * gettid() and the server main thread's tid), BLOCK (the handler blocks in read() on a pipe whose
 * write end it reports; the client checks its own send returned at once, then writes the pipe),
 * SPIN (the handler spins for a given number of TSC cycles: the server program's call cycles must
 * grow by at least that much per call, and by no more than the client's whole loop took),
 * and 200 short-lived threads that each make one call (the heap must not grow).
 * On QUIT, the server notes the most bytes left unread in any pipe of its process: a
 * waiter that sleeps on a doorbell must empty it first, or the pipe fills up and a ring that finds
 * it full brings no wake-up.
 *
 * With RPAL_PROTECT_PEERS set on a CPU with protection keys, the client also checks that no send
 * comes back with PKRU changed: a server parked inside rpal_epoll_wait() holds its windows on its
 * peers open, and a call must not leave them open on the sender's thread; and a call whose
 * handler makes a syscall (GETTID) comes back through a signal handler, which runs with the
 * kernel's default PKRU, not the key of its own that the client opened. */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <cpuid.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>
#include <rpal.h>

#include "rpc_proto.h"

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ server */

static atomic_int in_handler;
static long twice;

/* meddle: the connections the server has open, and the set. */
#define MEDDLE_MAX 64
static atomic_int meddle_fds[MEDDLE_MAX], meddle_ep = -1, meddle_stop;
static long meddle_mods, meddle_waits;

static void *meddler(void *arg) {
    (void)arg;
    for (unsigned i = 0, k = 0; !atomic_load(&meddle_stop); i++) {
        int fd = 0, ep = atomic_load(&meddle_ep);
        for (int tries = 0; fd <= 0 && tries < MEDDLE_MAX; tries++)
            fd = atomic_load(&meddle_fds[k++ % MEDDLE_MAX]);
        struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = fd }, evs[4];
        /* Level-triggered: an event this thread takes stays due for the server's own wait. */
        if (fd > 0 && ep >= 0 && rpal_epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) == 0) meddle_mods++;
        if (ep >= 0 && (i & 1) && rpal_epoll_wait(ep, evs, 4, 0) >= 0) meddle_waits++;
        usleep(100);
    }
    return NULL;
}

static void meddle_note(int fd, int open) {
    for (int i = 0; i < MEDDLE_MAX; i++) {
        int want = open ? 0 : fd;
        if (atomic_compare_exchange_strong(&meddle_fds[i], &want, open ? fd : 0)) return;
    }
}

/* The most bytes waiting in any pipe of this process (doorbells are pipes). */
static long largest_unread_pipe(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long most = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        int fd = atoi(e->d_name), n = 0;
        if (fd != dirfd(d) && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && ioctl(fd, FIONREAD, &n) == 0 &&
            n > most)
            most = n;
    }
    closedir(d);
    return most;
}

/* Recurses until the stack's guard page stops it (overflow_sink never goes negative: the test is
 * there for the compiler, which cannot know). */
static volatile int overflow_sink;
static int overflow(int n) {
    volatile char pad[256];
    pad[0] = 1;
    overflow_sink += pad[0];
    return overflow_sink >= 0 ? overflow(n + 1) + pad[1] : n;
}

static int no_fault(void *arg) {
    (void)arg;
    return 0;
}

/* Spins until the TSC reaches end with known values in ymm0-15, r12-r15, MXCSR (round toward zero)
 * and the x87 control word (53-bit precision), then says which changed meanwhile (a bit each: 0-15
 * ymm, 16-19 r12-r15, 20 MXCSR, 21 the control word).  A signal handler of the caller that the
 * kernel runs on this thread in the spin uses all of them; its return must give them back. */
__attribute__((target("avx"))) static uint64_t vec_spin(uint64_t end) {
    static uint8_t in[16][32] __attribute__((aligned(32))), out[16][32] __attribute__((aligned(32)));
    uint64_t gin[4] = { 0x1111111111111111ull, 0x2222222222222222ull, 0x3333333333333333ull,
                        0x4444444444444444ull }, gout[4];
    uint32_t mxin = 0x7f80, mxout, mxsave;
    uint16_t cwin = 0x27f, cwout, cwsave;
    uint64_t changed = 0;
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 32; k++) in[i][k] = (uint8_t)(i * 32 + k + 1);
    __asm__ volatile(
        "stmxcsr %[mxsave]\n\tfnstcw %[cwsave]\n\tldmxcsr %[mxin]\n\tfldcw %[cwin]\n\t"
        "vmovdqu 0(%[in]), %%ymm0\n"
        "vmovdqu 32(%[in]), %%ymm1\n"
        "vmovdqu 64(%[in]), %%ymm2\n"
        "vmovdqu 96(%[in]), %%ymm3\n"
        "vmovdqu 128(%[in]), %%ymm4\n"
        "vmovdqu 160(%[in]), %%ymm5\n"
        "vmovdqu 192(%[in]), %%ymm6\n"
        "vmovdqu 224(%[in]), %%ymm7\n"
        "vmovdqu 256(%[in]), %%ymm8\n"
        "vmovdqu 288(%[in]), %%ymm9\n"
        "vmovdqu 320(%[in]), %%ymm10\n"
        "vmovdqu 352(%[in]), %%ymm11\n"
        "vmovdqu 384(%[in]), %%ymm12\n"
        "vmovdqu 416(%[in]), %%ymm13\n"
        "vmovdqu 448(%[in]), %%ymm14\n"
        "vmovdqu 480(%[in]), %%ymm15\n"
        "movq 0(%[gin]), %%r12\n\tmovq 8(%[gin]), %%r13\n\t"
        "movq 16(%[gin]), %%r14\n\tmovq 24(%[gin]), %%r15\n"
        "1:\n\tpause\n\trdtsc\n\tshlq $32, %%rdx\n\torq %%rdx, %%rax\n\tcmpq %[end], %%rax\n\tjb 1b\n\t"
        "vmovdqu %%ymm0, 0(%[out])\n"
        "vmovdqu %%ymm1, 32(%[out])\n"
        "vmovdqu %%ymm2, 64(%[out])\n"
        "vmovdqu %%ymm3, 96(%[out])\n"
        "vmovdqu %%ymm4, 128(%[out])\n"
        "vmovdqu %%ymm5, 160(%[out])\n"
        "vmovdqu %%ymm6, 192(%[out])\n"
        "vmovdqu %%ymm7, 224(%[out])\n"
        "vmovdqu %%ymm8, 256(%[out])\n"
        "vmovdqu %%ymm9, 288(%[out])\n"
        "vmovdqu %%ymm10, 320(%[out])\n"
        "vmovdqu %%ymm11, 352(%[out])\n"
        "vmovdqu %%ymm12, 384(%[out])\n"
        "vmovdqu %%ymm13, 416(%[out])\n"
        "vmovdqu %%ymm14, 448(%[out])\n"
        "vmovdqu %%ymm15, 480(%[out])\n"
        "movq %%r12, 0(%[gout])\n\tmovq %%r13, 8(%[gout])\n\t"
        "movq %%r14, 16(%[gout])\n\tmovq %%r15, 24(%[gout])\n\t"
        "stmxcsr %[mxout]\n\tfnstcw %[cwout]\n\tldmxcsr %[mxsave]\n\tfldcw %[cwsave]\n\tvzeroupper"
        : [mxout] "=m"(mxout), [cwout] "=m"(cwout), [mxsave] "+m"(mxsave), [cwsave] "+m"(cwsave)
        : [in] "r"(in), [out] "r"(out), [gin] "r"(gin), [gout] "r"(gout), [end] "r"(end),
          [mxin] "m"(mxin), [cwin] "m"(cwin)
        : "rax", "rdx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
    for (int i = 0; i < 16; i++)
        if (memcmp(in[i], out[i], 32)) changed |= 1ull << i;
    for (int i = 0; i < 4; i++)
        if (gin[i] != gout[i]) changed |= 1ull << (16 + i);
    if (mxout != mxin) changed |= 1ull << 20;
    if (cwout != cwin) changed |= 1ull << 21;
    return changed;
}

static int server(const char *service, int meddle) {
    pid_t main_tid = (pid_t)syscall(SYS_gettid);
    /* rpal_access_safely() installs librpal's SIGSEGV/SIGBUS handler over the launcher's: the
     * crasher's fault inside a call must still fail only this program. */
    if (rpal_access_safely(no_fault, NULL) != 0) return 1;
    struct epoll_event ev, evs[16];
    int lfd = rpal_listen(service, NULL), ep, quit = 0, open = 0;
    long unread = -1;
    long served = 0, bad = 0;

    if (lfd < 0) {
        fprintf(stderr, "server: listen %s: %s\n", service, rpal_strerror(lfd));
        return 1;
    }
    ep = rpal_epoll_create(0);
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    rpal_epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    pthread_t med;
    if (meddle) {
        atomic_store(&meddle_ep, ep);
        pthread_create(&med, NULL, meddler, NULL);
    }
    printf("server: ready\n");
    fflush(stdout);
    while (!quit || open > 0) {
        int n = rpal_epoll_wait(ep, evs, 16, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            perror("server: rpal_epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c = rpal_accept(lfd, RPAL_NONBLOCK);
                if (c < 0) continue;
                ev.events = EPOLLIN | EPOLLRDHUP;
                ev.data.fd = c;
                rpal_epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                if (meddle) meddle_note(c, 1);
                open++;
                continue;
            }
            for (;;) {
                struct req q;
                struct rep r = { 0 };
                ssize_t len = rpal_recv(fd, &q, sizeof q, RPAL_NONBLOCK);
                if (len == -EAGAIN) break;
                if (len <= 0) {
                    if (meddle) meddle_note(fd, 0);
                    rpal_close(fd);
                    open--;
                    break;
                }
                /* The server is one thread of control: two threads running it at once would
                 * find the flag set. */
                if (atomic_exchange(&in_handler, 1)) twice++;
                r.op = q.op;
                r.seq = q.seq;
                switch (q.op) {
                case OP_ECHO:
                    if (len != sizeof q || checksum(q.data, sizeof q.data) != q.sum) bad++;
                    r.sum = q.sum;
                    served++;
                    break;
                case OP_GETTID:
                    r.a = (int64_t)syscall(SYS_gettid);
                    r.b = main_tid;
                    break;
                case OP_BLOCK: {
                    int p[2];
                    char c;
                    if (pipe(p) < 0) return 1;
                    r.a = p[1];
                    r.sum = (uint64_t)getpid(); /* our descriptors are ours: the client opens it by /proc */
                    /* Tell the client which fd to write, then block on our end. */
                    rpal_send(fd, &r, sizeof r, 0);
                    r.b = read(p[0], &c, 1);
                    close(p[0]);
                    close(p[1]);
                    r.a = (int64_t)syscall(SYS_gettid) == main_tid;
                    break;
                }
                case OP_SPIN:
                case OP_SPINPID: {
                    uint64_t end = __rdtsc() + q.sum;
                    while (__rdtsc() < end) __builtin_ia32_pause();
                    if (q.op == OP_SPINPID) r.a = syscall(SYS_getpid);
                    break;
                }
                case OP_VEC:
                    r.a = (int64_t)vec_spin(__rdtsc() + q.sum);
                    r.b = syscall(SYS_getpid);
                    break;
                case OP_CRASH:
                    if (q.sum == 1)
                        overflow(0);
                    else
                        *(volatile int *)(uintptr_t)q.sum = 1; /* q.sum = 0: a null write */
                    break;
                case OP_QUIT:
                    quit = 1;
                    unread = largest_unread_pipe(); /* while the connections are open */
                    break;
                }
                atomic_store(&in_handler, 0);
                rpal_send(fd, &r, sizeof r, 0);
            }
        }
    }
    if (meddle) {
        atomic_store(&meddle_stop, 1);
        pthread_join(med, NULL);
        printf("server: another thread re-armed connections %ld times and polled the set %ld times\n",
               meddle_mods, meddle_waits);
    }
    printf("server: served %ld, bad %ld, run twice at once %ld\n", served, bad, twice);
    printf("server: largest unread pipe %ld bytes\n", unread);
    return bad || twice ? 1 : 0;
}

/* ------------------------------------------------------------------ client */

struct worker {
    const char *service;
    long n, errors;
    pthread_t th;
};

static bool pkru_probe;                 /* RPAL_PROTECT_PEERS set and the CPU has OSPKE */
static atomic_long pkru_changed, pkru_sends;

static uint32_t pkru_read(void) {
    uint32_t eax, edx;
    __asm__ __volatile__(".byte 0x0f,0x01,0xee" : "=a"(eax), "=d"(edx) : "c"(0));
    return eax;
}

static int roundtrip(int fd, struct req *q, struct rep *r) {
    uint32_t pkru = pkru_probe ? pkru_read() : 0;
    ssize_t s = rpal_send(fd, q, sizeof *q, 0);
    if (pkru_probe) {
        atomic_fetch_add(&pkru_sends, 1);
        if (pkru_read() != pkru) atomic_fetch_add(&pkru_changed, 1);
    }
    if (s != (ssize_t)sizeof *q) {
        fprintf(stderr, "client: send: %s\n", rpal_strerror((int)s));
        return -1;
    }
    ssize_t len = rpal_recv(fd, r, sizeof *r, 0);
    if (len != (ssize_t)sizeof *r) {
        fprintf(stderr, "client: recv: %s\n", rpal_strerror((int)len));
        return -1;
    }
    return 0;
}

static void *work(void *arg) {
    struct worker *w = arg;
    int fd = rpal_connect(w->service, NULL, 0);
    if (fd < 0) {
        fprintf(stderr, "client: connect: %s\n", rpal_strerror(fd));
        w->errors++;
        return NULL;
    }
    unsigned seed = (unsigned)(uintptr_t)w;
    const char *gap = getenv("PROG_RPC_GAP_US"); /* pause between round trips: the server parks */
    for (long i = 0; i < w->n; i++) {
        if (gap) usleep((useconds_t)atoi(gap));
        struct req q = { .op = OP_ECHO, .seq = (uint32_t)i };
        struct rep r;
        for (size_t k = 0; k < sizeof q.data; k++) q.data[k] = (uint8_t)rand_r(&seed);
        q.sum = checksum(q.data, sizeof q.data);
        if (roundtrip(fd, &q, &r) || r.op != OP_ECHO || r.seq != q.seq || r.sum != q.sum) {
            w->errors++;
            if (w->errors > 10) break;
        }
    }
    rpal_close(fd);
    return NULL;
}

static int connect_retry(const char *service) {
    for (int i = 0; i < 500; i++) {
        int fd = rpal_connect(service, NULL, 0);
        if (fd >= 0 || (fd != -ENOENT && fd != -ECONNREFUSED)) return fd;
        usleep(10000); /* the server is still starting */
    }
    return -ENOENT;
}

/* One echo round trip on the connection *arg, from a thread of its own. */
static void *one_call(void *arg) {
    struct req q = { .op = OP_ECHO };
    struct rep r;
    q.sum = checksum(q.data, sizeof q.data);
    return (void *)(intptr_t)(roundtrip(*(int *)arg, &q, &r) || r.sum != q.sum);
}

/* Threads that each make a call and end: what they leave in the heap, and how many calls. */
static long short_lived(int fd, int nthreads, uint64_t *calls) {
    struct rpal_prog_stat st[2];
    struct mallinfo2 m0;
    long errors = 0;
    uint64_t c0 = 0;
    for (int i = 0; i < nthreads + 5; i++) {
        pthread_t t;
        void *ret;
        if (i == 5) { /* after a warm-up: thread caches, TLS of this namespace */
            m0 = mallinfo2();
            c0 = rpal_hosted_stat(st, 2) > 0 ? st[0].calls : 0;
        }
        if (pthread_create(&t, NULL, one_call, &fd)) return -1;
        pthread_join(t, &ret);
        errors += ret != NULL;
    }
    *calls = (rpal_hosted_stat(st, 2) > 0 ? st[0].calls : 0) - c0;
    printf("client: %d short-lived sender threads (%llu calls, %ld errors): heap grew by %ld bytes\n",
           nthreads, (unsigned long long)*calls, errors, (long)(mallinfo2().uordblks - m0.uordblks));
    return errors;
}

/* Time-slice accounting: calls whose handler spins SPIN_CYCLES and a quarter of that in turn run
 * on our thread, so the server program's call cycles grow by at least five eighths of
 * SPIN_CYCLES per call, and by no more than our loop took in all (a stale or doubled start time
 * shows as more).  librpal times one call in 16 and counts it for 16: over 1,600 calls its
 * estimate is off by a few of them at most, so both bounds allow SPIN_SLACK; timing every 16th
 * call would time only one of the two kinds, and miss one bound or the other by far more. */
#define SPIN_CALLS 1600
#define SPIN_CYCLES 100000ull
#define SPIN_SLACK 0.1
static int accounting_probe(int fd) {
    struct rpal_prog_stat st[2];
    struct req q = { .op = OP_SPIN, .sum = SPIN_CYCLES };
    struct rep r;
    uint64_t calls = 0, cycles = 0, took = 0;
    bool ok = false;
    /* On a loaded machine the server may not be parked for most spins (they
     * go by ring, and are not calls), and the few calls left may overlap
     * other work: a wrong count must show in every one of five runs. */
    for (int attempt = 0; attempt < 5 && !ok; attempt++) {
        if (attempt) {
            printf("client: accounting run %d: %llu calls, %llu cycles, loop %llu; again\n", attempt,
                   (unsigned long long)calls, (unsigned long long)cycles, (unsigned long long)took);
            usleep(20000);
        }
        if (rpal_hosted_stat(st, 2) < 1) return 1;
        uint64_t n0 = st[0].calls, c0 = st[0].call_cycles, t0 = __rdtsc();
        for (int i = 0; i < SPIN_CALLS; i++) {
            q.sum = i & 1 ? SPIN_CYCLES / 4 : SPIN_CYCLES;
            if (roundtrip(fd, &q, &r)) return 1;
        }
        took = __rdtsc() - t0;
        if (rpal_hosted_stat(st, 2) < 1) return 1;
        calls = st[0].calls - n0;
        cycles = st[0].call_cycles - c0;
        ok = calls > 0 && cycles >= (1 - SPIN_SLACK) * (double)(calls * SPIN_CYCLES) * 5 / 8 &&
             cycles <= (1 + SPIN_SLACK) * (double)took;
    }
    printf("client: accounting %s: %llu of %d spins of %llu and a quarter of that were calls, counted %llu cycles; "
           "the loop took %llu\n", ok ? "ok" : "WRONG", (unsigned long long)calls, SPIN_CALLS,
           SPIN_CYCLES, (unsigned long long)cycles, (unsigned long long)took);
    return ok ? 0 : 1;
}

static int client(const char *service, int threads, long n) {
    struct worker w[64];
    struct rep r;
    long errors = 0;
    int fd = connect_retry(service);
    if (fd < 0) {
        fprintf(stderr, "client: connect %s: %s\n", service, rpal_strerror(fd));
        return 1;
    }
    if (threads > 64) threads = 64;
    /* A key of our own, open (as for memory we protect ourselves): our PKRU then differs from
     * the kernel's default, which a signal handler runs with, so a call that came back through
     * one (a syscall or fault in the handler) without restoring PKRU shows. */
    if (pkru_probe && syscall(SYS_pkey_alloc, 0, 0) < 0) {
        fprintf(stderr, "client: pkey_alloc: %s\n", strerror(errno));
        return 1;
    }
    long t0 = now_ms();
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){ .service = service, .n = n };
        pthread_create(&w[i].th, NULL, work, &w[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].th, NULL);
        errors += w[i].errors;
    }
    printf("client: %ld round trips in %ld ms, %ld errors\n", threads * n, now_ms() - t0, errors);

    struct rpal_prog_stat st[16];
    struct req q = { .op = OP_QUIT };
    int np = rpal_hosted_stat(st, 16);
    if (np <= 0) {              /* a plain process: no calls to probe */
        printf("client: not hosted, no probes\n");
        if (roundtrip(fd, &q, &r)) return 1;
        rpal_close(fd);
        return errors ? 1 : 0;
    }

    /* Probes on the first connection. */
    q.op = OP_GETTID;
    if (roundtrip(fd, &q, &r)) return 1;
    printf("client: gettid in handler %s the server's thread\n", r.a == r.b ? "is" : "is NOT");
    if (r.a != r.b) errors++;
    if (pkru_probe) {
        /* Until a GETTID went by a call and was handed off (a busy server takes it by ring). */
        uint64_t h0 = rpal_hosted_stat(st, 16) > 0 ? st[0].handoffs : 0;
        for (int i = 0; i < 1000 && rpal_hosted_stat(st, 16) > 0 && st[0].handoffs == h0; i++)
            if (roundtrip(fd, &q, &r)) return 1;
    }

    q.op = OP_BLOCK;
    long t = now_ms();
    ssize_t s = rpal_send(fd, &q, sizeof q, 0);
    long sent_ms = now_ms() - t;
    if (s != (ssize_t)sizeof q || rpal_recv(fd, &r, sizeof r, 0) != (ssize_t)sizeof r) return 1;
    printf("client: send returned in %ld ms while the handler blocks in read()\n", sent_ms);
    if (sent_ms > 500) errors++;
    usleep(50000); /* the handler stays blocked meanwhile */
    char pipe_path[64];
    snprintf(pipe_path, sizeof pipe_path, "/proc/%d/fd/%d", (int)r.sum, (int)r.a);
    int wfd = open(pipe_path, O_WRONLY | O_CLOEXEC);
    if (wfd < 0 || write(wfd, "x", 1) != 1) errors++;
    if (wfd >= 0) close(wfd);
    if (rpal_recv(fd, &r, sizeof r, 0) != (ssize_t)sizeof r || r.b != 1 || r.a != 1) {
        printf("client: the blocked read did not complete on the server's thread\n");
        errors++;
    } else {
        printf("client: the blocked read completed on the server's thread\n");
    }

    if (accounting_probe(fd)) errors++;

    uint64_t calls;
    if (short_lived(fd, 200, &calls)) errors++;

    if (pkru_probe)
        printf("client: PKRU changed across %ld of %ld sends (GETTID's hand-off included)\n",
               atomic_load(&pkru_changed), atomic_load(&pkru_sends));

    np = rpal_hosted_stat(st, 16);
    for (int i = 0; i < np && i < 16; i++)
        printf("client: stat [%d] %s calls=%llu cycles=%llu handoffs=%llu\n", i, st[i].name,
               (unsigned long long)st[i].calls, (unsigned long long)st[i].call_cycles,
               (unsigned long long)st[i].handoffs);

    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    return errors ? 1 : 0;
}

static int crasher(const char *service, int overflow_stack) {
    int fd = connect_retry(service);
    if (fd < 0) return 1;
    struct req q = { .op = OP_ECHO };
    struct rep r;
    struct rpal_prog_stat st[2];
    uint64_t calls0;
    q.sum = checksum(q.data, sizeof q.data);
    /* Until an echo went by RPAL call: the server is parked then, and the crash happens inside a
     * call (a fault on the server's own thread would end the whole process, by design). */
    do {
        calls0 = rpal_hosted_stat(st, 2) > 0 ? st[0].calls : 0;
        if (roundtrip(fd, &q, &r)) return 1;
    } while (rpal_hosted_stat(st, 2) > 0 && st[0].calls == calls0);
    if (overflow_stack == 2) {
        /* Spin inside the server's handler, on this thread, until the test kills us. */
        printf("crasher: spinning in a call, pid %d\n", (int)getpid());
        fflush(stdout);
        q = (struct req){ .op = OP_SPIN, .sum = ~0ull >> 2 };
        rpal_send(fd, &q, sizeof q, 0);
        return 1;
    }
    if (overflow_stack) {
        /* The fault comes on this thread, with the server's stack full: only an alternate
         * stack has room for the launcher's handler. */
        stack_t ss = { .ss_sp = malloc(64 << 10), .ss_size = 64 << 10 };
        if (!ss.ss_sp || sigaltstack(&ss, NULL) < 0) return 1;
    }
    q = (struct req){ .op = OP_CRASH, .sum = overflow_stack ? 1 : 0 };
    ssize_t s = rpal_send(fd, &q, sizeof q, 0);
    printf("crasher: send of CRASH returned %zd (%s)\n", s, s < 0 ? rpal_strerror((int)s) : "ok");
    ssize_t len = rpal_recv(fd, &r, sizeof r, 0);
    printf("crasher: then recv returned %zd\n", len);
    rpal_close(fd);
    /* We go on: a fresh connection attempt fails cleanly, no hang. */
    int fd2 = rpal_connect(service, NULL, 0);
    printf("crasher: reconnect returned %s\n", fd2 < 0 ? "an error" : "a connection");
    if (fd2 >= 0) rpal_close(fd2);
    return s == -ECONNRESET && len <= 0 ? 0 : 1;
}

static void stalled(int sig) {
    static const char m[] = "dropper: a round trip stalled for 10 s: the server's thread was never woken\n";
    (void)sig;
    (void)!write(2, m, sizeof m - 1);
    _exit(3);
}

/* Another program of our launcher (its children), read before we drop our privileges. */
static pid_t other_program(void) {
    char path[64], buf[256], *p = buf;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getppid(), (int)getppid());
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    for (long pid; (pid = strtol(p, &p, 10)) > 0;)
        if (pid != getpid()) return (pid_t)pid;
    return 0;
}

/* Connect to service and find the server's pid in *server; on failure say so as who and return
 * -1. */
static int connect_server(const char *who, const char *service, pid_t *server) {
    int fd = connect_retry(service);
    *server = other_program();
    if (fd < 0 || !*server) {
        fprintf(stderr, "%s: connect %s: %s, server pid %d\n", who, service, rpal_strerror(fd), (int)*server);
        return -1;
    }
    return fd;
}

static void *idle_thread(void *arg) {
    for (;;) pause();
    return arg;
}

static int dropper(const char *service, long n) {
    struct rpal_prog_stat st[4];
    struct req q = { .op = OP_GETTID };
    struct rep r;
    pid_t server;
    int fd = connect_server("dropper", service, &server);
    if (fd < 0) return 1;
    /* libc's calls, which change the ids of every thread of ours (a signal to each). */
    pthread_t idle;
    pthread_create(&idle, NULL, idle_thread, NULL);
    if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0) {
        fprintf(stderr, "dropper: cannot drop to uid 65534: %s\n", strerror(errno));
        return 1;
    }
    int threads = 0, dropped = 0;
    DIR *tasks = opendir("/proc/self/task");
    for (struct dirent *d; tasks && (d = readdir(tasks));) {
        char path[64], line[128];
        /* Not the process's first task: it only started the program and sleeps. */
        if (d->d_name[0] == '.' || atoi(d->d_name) == getpid()) continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/status", d->d_name);
        FILE *f = fopen(path, "r");
        int uid_ok = 0, gid_ok = 0;
        while (f && fgets(line, sizeof(line), f)) {
            uid_ok |= !strcmp(line, "Uid:\t65534\t65534\t65534\t65534\n");
            gid_ok |= !strcmp(line, "Gid:\t65534\t65534\t65534\t65534\n");
        }
        if (f) fclose(f);
        threads++;
        dropped += uid_ok && gid_ok;
    }
    if (tasks) closedir(tasks);
    printf("dropper: %d of %d threads run as uid and gid 65534\n", dropped, threads);
    fflush(stdout);
    /* What the kick must get around: the kernel no longer lets us take a descriptor of the
     * server (ptrace access: another uid, and the shared memory is no longer dumpable). */
    int pidfd = (int)syscall(SYS_pidfd_open, server, 0);
    int got = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    printf("dropper: uid %d gid %d, dumpable %d, pidfd_getfd of the server (pid %d): %s\n", (int)getuid(),
           (int)getgid(), prctl(PR_GET_DUMPABLE), (int)server, got < 0 ? strerror(errno) : "taken");
    fflush(stdout);
    if (got >= 0) close(got);
    if (pidfd >= 0) close(pidfd);
    /* The server's entry: the other one (under rpal host, either may have joined first). */
    int nst = rpal_hosted_stat(st, 4), k = nst > 0 && st[0].self ? 1 : 0;
    uint64_t h0 = nst > k ? st[k].handoffs : 0, c0 = nst > k ? st[k].calls : 0;
    signal(SIGALRM, stalled);
    long t0 = now_ms();
    for (long i = 0; i < n; i++) {
        alarm(10);
        q.seq = (uint32_t)i;
        if (roundtrip(fd, &q, &r) || r.op != OP_GETTID || r.seq != q.seq || r.a != r.b) {
            fprintf(stderr, "dropper: round trip %ld failed\n", i);
            return 1;
        }
    }
    alarm(0);
    rpal_hosted_stat(st, 4);
    printf("dropper: %ld round trips in %ld ms, %llu calls, %llu hand-offs, dumpable %d\n", n, now_ms() - t0,
           (unsigned long long)(st[k].calls - c0), (unsigned long long)(st[k].handoffs - h0),
           prctl(PR_GET_DUMPABLE));
    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    return 0;
}

/* ------------------------------------------------------------ selfcall */

static const char *self_service;
static void *self_server(void *arg) {
    (void)arg;
    return (void *)(intptr_t)server(self_service, 0);
}

/* A server thread and a client thread of one program: the client's messages never run the
 * server's receiver on the client's thread, whose system calls would be the client thread's. */
static int selfcall(const char *service, long n) {
    pthread_t t;
    struct req q = { .op = OP_GETTID };
    struct rep r;
    long on_client = 0;
    self_service = service;
    if (pthread_create(&t, NULL, self_server, NULL) != 0) return 1;
    int fd = connect_retry(service);
    if (fd < 0) {
        fprintf(stderr, "selfcall: connect %s: %s\n", service, rpal_strerror(fd));
        return 1;
    }
    pid_t me = (pid_t)syscall(SYS_gettid);
    for (long i = 0; i < n; i++) {
        q.seq = (uint32_t)i;
        if (roundtrip(fd, &q, &r) || r.op != OP_GETTID || r.seq != q.seq) {
            fprintf(stderr, "selfcall: round trip %ld failed\n", i);
            return 1;
        }
        on_client += r.a == me || r.a != r.b;
    }
    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    void *rc;
    pthread_join(t, &rc);
    printf("selfcall: %ld round trips, gettid() in the handler was not the server thread's in %ld\n", n, on_client);
    return on_client || rc;
}

/* ------------------------------------------------------------ signals */

static int sig_pipe[2];
static volatile sig_atomic_t sig_ran, sig_blocked, sig_exit;
static volatile long sig_pid, sig_wrote;
static volatile uint64_t sig_tsc;

/* A handler of ours that the kernel may run while our thread runs the server's receiver: its
 * system calls must be ours (our pid, our pipe, our signal mask). */
static void on_usr1(int sig) {
    (void)sig;
    sig_tsc = __rdtsc();
    if (sig_exit == 1) _exit(42);
    if (sig_exit == 2) *(volatile int *)(uintptr_t)sig_pipe[0] = 1; /* a fault of ours: address 3 or so */
    sigset_t m;
    sig_pid = syscall(SYS_getpid);
    sig_wrote = write(sig_pipe[1], "A", 1);
    sig_blocked = pthread_sigmask(SIG_BLOCK, NULL, &m) == 0 && sigismember(&m, SIGUSR1);
    sig_ran++;
}

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* TSC cycles per ms, measured over a 10 ms sleep. */
static uint64_t tsc_per_ms(void) {
    struct timespec ten = { 0, 10000000 };
    uint64_t t0 = __rdtsc();
    nanosleep(&ten, NULL);
    return (__rdtsc() - t0) / 10;
}

/* A timer that sends SIGUSR1 to this thread, not to the process: 0, or -1 with a message. */
static int thread_timer(timer_t *tm, const char *who) {
    struct sigevent ev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGUSR1 };
    ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &ev, tm) == 0) return 0;
    fprintf(stderr, "%s: timer_create: %s\n", who, strerror(errno));
    return -1;
}

/* One call whose handler spins 2 s on our thread, then makes a system call: the script kills
 * the server meanwhile.  Prints what the send and, after it, the receive return. */
static int calleekill(const char *service) {
    struct req q = { .op = OP_SPINPID };
    struct rep r;
    pid_t server;
    int fd = connect_server("calleekill", service, &server);
    if (fd < 0) return 1;
    q.sum = 2000 * tsc_per_ms();
    printf("calleekill: calling, server pid %d\n", (int)server);
    fflush(stdout);
    ssize_t sent = rpal_send(fd, &q, sizeof q, 0);
    printf("calleekill: send %zd\n", sent);
    if (sent >= 0) printf("calleekill: recv %zd\n", rpal_recv(fd, &r, sizeof r, 0));
    printf("calleekill: send %zd after it\n", rpal_send(fd, &q, sizeof q, RPAL_NONBLOCK));
    return 0;
}

/* n calls that each spin 100 ms on our thread, with SIGUSR1 sent to this thread 20 ms in; with
 * exit, the handler calls _exit(42) at the first. */
static int signals(const char *service, long n, int exit) {
    struct req q = { .op = OP_SPINPID };
    struct rep r;
    pid_t server, me = getpid();
    int fd = connect_server("signals", service, &server);
    if (fd < 0) return 1;
    if (pipe(sig_pipe) < 0) {
        perror("signals: pipe");
        return 1;
    }
    fcntl(sig_pipe[0], F_SETFL, O_NONBLOCK);
    uint64_t per_ms = tsc_per_ms();
    /* sigfill: every signal blocked while the handler runs (sigfillset), SIGSYS among them. */
    struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
    if (exit == 3) sigfillset(&sa.sa_mask);
    else sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    if (exit == 3) exit = 0;
    sig_exit = exit;
    timer_t tm;
    if (thread_timer(&tm, "signals") < 0) return 1;
    int bad = 0, during = 0;
    for (long i = 0; i < n; i++) {
        struct itimerspec at = { .it_value = { 0, 20000000 } };
        char c = 0;
        sig_ran = 0;
        q.seq = (uint32_t)i;
        q.sum = 100 * per_ms;
        uint64_t start = __rdtsc();
        timer_settime(tm, 0, &at, NULL);
        if (roundtrip(fd, &q, &r) || r.op != OP_SPINPID || r.seq != q.seq) {
            fprintf(stderr, "signals: call %ld failed\n", i);
            return 1;
        }
        uint64_t end = __rdtsc();
        sigset_t m;
        pthread_sigmask(SIG_BLOCK, NULL, &m);
        int got = read(sig_pipe[0], &c, 1) == 1 && c == 'A';
        during += sig_ran && sig_tsc > start + 5 * per_ms && sig_tsc + 5 * per_ms < end;
        if (sig_ran != 1 || sig_pid != me || sig_wrote != 1 || !got || !sig_blocked || r.a != server ||
            sigismember(&m, SIGUSR1)) {
            fprintf(stderr, "signals: call %ld: handler ran %d times, its getpid() %ld (ours %d), its write %ld, "
                    "our pipe %s, SIGUSR1 %sblocked in it and %sblocked after; the server's getpid() after it %lld "
                    "(the server's %d)\n", i, (int)sig_ran, sig_pid, (int)me, sig_wrote, got ? "got it" : "empty",
                    sig_blocked ? "" : "not ", sigismember(&m, SIGUSR1) ? "" : "not ", (long long)r.a, (int)server);
            bad++;
        }
    }
    printf("signals: %ld calls, the handler ran inside %d of them; %d went wrong\n", n, during, bad);
    fflush(stdout);
    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    return bad || !during;
}

/* ------------------------------------------------------------ sigvec */

/* sigvec: our handlers, which the kernel runs on top of the server's vec_spin. */
static volatile uint64_t sv_tsc;
static volatile sig_atomic_t sv_in1, sv_ran1, sv_ran2, sv_nest, sv_nested, sv_onstack, sv_bad;
static volatile long sv_pid;
static char *sv_alt;
#define SV_ALT_SIZE (256 << 10)

/* What a handler may do with the registers the interrupted code keeps its values in. */
__attribute__((target("avx"))) static void sv_clobber(void) {
    uint32_t mx = 0x3f80;     /* round down */
    uint16_t cw = 0x7f;       /* 24-bit precision */
    __asm__ volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\t"
                     "vpcmpeqd %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpcmpeqd %%ymm2, %%ymm2, %%ymm2\n\t"
                     "vpcmpeqd %%ymm3, %%ymm3, %%ymm3\n\t"
                     "vpcmpeqd %%ymm4, %%ymm4, %%ymm4\n\t"
                     "vpcmpeqd %%ymm5, %%ymm5, %%ymm5\n\t"
                     "vpcmpeqd %%ymm6, %%ymm6, %%ymm6\n\t"
                     "vpcmpeqd %%ymm7, %%ymm7, %%ymm7\n\t"
                     "vpcmpeqd %%ymm8, %%ymm8, %%ymm8\n\t"
                     "vpcmpeqd %%ymm9, %%ymm9, %%ymm9\n\t"
                     "vpcmpeqd %%ymm10, %%ymm10, %%ymm10\n\t"
                     "vpcmpeqd %%ymm11, %%ymm11, %%ymm11\n\t"
                     "vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n\t"
                     "vpcmpeqd %%ymm13, %%ymm13, %%ymm13\n\t"
                     "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\t"
                     "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
                     "movq $-1, %%r12\n\tmovq $-1, %%r13\n\tmovq $-1, %%r14\n\tmovq $-1, %%r15\n\t"
                     "ldmxcsr %[mx]\n\tfldcw %[cw]"
                     :
                     : [mx] "m"(mx), [cw] "m"(cw)
                     : "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

/* A failing system call sets errno; getpid() is ours. */
static int sv_syscalls_ours(void) {
    errno = 0;
    int ok = close(-1) == -1 && errno == EBADF;
    errno = 0;
    ok &= open("/nonexistent/rpal-sigvec", O_RDONLY) == -1 && errno == ENOENT;
    return ok && syscall(SYS_getpid) == sv_pid;
}

static void on_sv2(int sig) {
    (void)sig;
    sv_clobber();
    if (!sv_syscalls_ours()) sv_bad |= 4;
    sv_nested = sv_in1;
    sv_ran2++;
}

static void on_sv1(int sig) {
    char here;
    stack_t ss;
    (void)sig;
    sv_in1 = 1;
    sv_clobber();
    if (!sv_syscalls_ours()) sv_bad |= 1;
    sv_onstack = sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) && &here > sv_alt &&
                 &here < sv_alt + SV_ALT_SIZE;
    if (sv_nest) {
        /* SIGUSR2's handler runs on top of this one as raise() returns. */
        if (raise(SIGUSR2) != 0 || sv_ran2 != 1) sv_bad |= 2;
        sv_clobber();
        if (!sv_syscalls_ours()) sv_bad |= 1;
    }
    sv_tsc = __rdtsc();
    sv_in1 = 0;
    sv_ran1++;
}

/*
 * n calls that each keep values in the server's vector and other registers for 60 ms on our
 * thread, with SIGUSR1 sent to this thread 20 ms in.  Its handler clobbers those registers and
 * makes failing system calls; call i % 4: 1 and 3 on an alternate signal stack, 2 and 3 with
 * SIGUSR2's handler (which does the same) run on top of it.
 */
static int sigvec(const char *service, long n) {
    struct req q = { .op = OP_VEC };
    struct rep r;
    if (!__builtin_cpu_supports("avx")) {
        printf("sigvec: no AVX\n");
        return 77;
    }
    pid_t server;
    int fd = connect_server("sigvec", service, &server);
    if (fd < 0) return 1;
    sv_pid = getpid();
    stack_t ss = { .ss_sp = sv_alt = malloc(SV_ALT_SIZE), .ss_size = SV_ALT_SIZE };
    if (!sv_alt || sigaltstack(&ss, NULL) < 0) {
        perror("sigvec: alternate signal stack");
        return 1;
    }
    uint64_t per_ms = tsc_per_ms();
    struct sigaction sa = { .sa_handler = on_sv2 };
    sigaction(SIGUSR2, &sa, NULL);
    timer_t tm;
    if (thread_timer(&tm, "sigvec") < 0) return 1;
    int bad = 0, during = 0;
    for (long i = 0; i < n; i++) {
        struct itimerspec at = { .it_value = { 0, 20000000 } };
        int mode = (int)(i % 4);
        sa = (struct sigaction){ .sa_handler = on_sv1, .sa_flags = mode & 1 ? SA_ONSTACK : 0 };
        sigaction(SIGUSR1, &sa, NULL);
        sv_nest = mode >= 2;
        sv_ran1 = sv_ran2 = sv_nested = sv_onstack = sv_bad = 0;
        q.seq = (uint32_t)i;
        q.sum = 60 * per_ms;
        uint64_t start = __rdtsc();
        timer_settime(tm, 0, &at, NULL);
        if (roundtrip(fd, &q, &r) || r.op != OP_VEC || r.seq != q.seq) {
            fprintf(stderr, "sigvec: call %ld failed\n", i);
            return 1;
        }
        uint64_t end = __rdtsc();
        int inside = sv_ran1 == 1 && sv_tsc > start + 5 * per_ms && sv_tsc + 5 * per_ms < end;
        sigset_t m;
        pthread_sigmask(SIG_BLOCK, NULL, &m);
        during += inside;
        if (sv_ran1 != 1 || r.a != 0 || r.b != server || sv_bad || sv_onstack != (mode & 1) ||
            (sv_nest && (sv_ran2 != 1 || !sv_nested)) || sigismember(&m, SIGUSR1) || sigismember(&m, SIGUSR2)) {
            fprintf(stderr, "sigvec: call %ld (%s%s): handler ran %d times%s, registers changed in the server %#llx, "
                    "the server's getpid() after it %lld (the server's %d), handler checks failed %#x, "
                    "on the alternate stack %d, SIGUSR2's handler ran %d times%s; blocked after:%s%s\n",
                    i, mode & 1 ? "alternate stack" : "its stack", sv_nest ? ", nested" : "", (int)sv_ran1,
                    inside ? " inside the call" : "", (unsigned long long)r.a, (long long)r.b, (int)server,
                    (int)sv_bad, (int)sv_onstack, (int)sv_ran2, sv_nested ? " inside it" : "",
                    sigismember(&m, SIGUSR1) ? " SIGUSR1" : "", sigismember(&m, SIGUSR2) ? " SIGUSR2" : "");
            bad++;
        }
    }
    printf("sigvec: %ld calls, the handler ran inside %d of them; %d went wrong\n", n, during, bad);
    fflush(stdout);
    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    return bad || !during;
}

/* ------------------------------------------------------------ sigstorm */

static volatile long storm_ran, storm_bad;
static volatile pid_t storm_pid;

static void on_storm(int sig) {
    (void)sig;
    if (syscall(SYS_getpid) != storm_pid) storm_bad++;
    storm_ran++;
}

/* n short echo calls while a timer sends this thread SIGUSR1 every 37 us, whose handler makes a
 * system call: some land where the call is entered or left, with the call's system calls already
 * or still blocked but our own fs base. */
static int sigstorm(const char *service, long n, int fill) {
    struct req q = { .op = OP_ECHO };
    struct rep r;
    int fd = connect_retry(service);
    if (fd < 0) return 1;
    storm_pid = getpid();
    q.sum = checksum(q.data, sizeof q.data);
    struct sigaction sa = { .sa_handler = on_storm, .sa_flags = SA_RESTART };
    if (fill) sigfillset(&sa.sa_mask);
    else sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    timer_t tm;
    struct itimerspec every = { .it_interval = { 0, 37000 }, .it_value = { 0, 37000 } }, off = { 0 };
    if (thread_timer(&tm, "sigstorm") < 0) return 1;
    timer_settime(tm, 0, &every, NULL);
    long i;
    for (i = 0; i < n; i++)
        if (roundtrip(fd, &q, &r) || r.op != OP_ECHO || r.sum != q.sum) break;
    timer_settime(tm, 0, &off, NULL);
    printf("sigstorm: %ld of %ld calls, the handler ran %ld times, %ld of them with another pid\n", i, n,
           (long)storm_ran, (long)storm_bad);
    fflush(stdout);
    q.op = OP_QUIT;
    if (roundtrip(fd, &q, &r)) return 1;
    rpal_close(fd);
    return i != n || storm_bad || !storm_ran;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "server"))
        return server(argv[2], argc >= 4 && !strcmp(argv[3], "meddle"));
    unsigned a, b, c, d;
    pkru_probe = getenv("RPAL_PROTECT_PEERS") && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 4));
    if (argc >= 5 && !strcmp(argv[1], "client")) return client(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "crasher"))
        return crasher(argv[2], argc >= 4 && !strcmp(argv[3], "overflow") ? 1
                                : argc >= 4 && !strcmp(argv[3], "spin")   ? 2
                                                                          : 0);
    if (argc >= 4 && !strcmp(argv[1], "dropper")) return dropper(argv[2], atol(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "signals")) return signals(argv[2], atol(argv[3]), 0);
    if (argc >= 3 && !strcmp(argv[1], "sigexit")) return signals(argv[2], 1, 1);
    if (argc >= 3 && !strcmp(argv[1], "sigfault")) return signals(argv[2], 1, 2);
    if (argc >= 4 && !strcmp(argv[1], "sigfill")) return signals(argv[2], atol(argv[3]), 3);
    if (argc >= 4 && !strcmp(argv[1], "selfcall")) return selfcall(argv[2], atol(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "calleekill")) return calleekill(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "sigstorm"))
        return sigstorm(argv[2], atol(argv[3]), argc >= 5 && !strcmp(argv[4], "fill"));
    if (argc >= 4 && !strcmp(argv[1], "sigvec")) return sigvec(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: prog_rpc server|client|crasher|dropper|selfcall|signals|sigfill|sigexit|sigfault|sigvec|sigstorm SERVICE [THREADS N | overflow | spin | N [fill]]\n");
    return 2;
}
