/* test_lazy.c: the lazy switch prototype.  Thread R owns a coroutine parked in hosted_lazy_wait();
 * this thread (S) borrows it with one CAS and runs it in user mode with fs = R's TCB.
 * Checks: no-syscall calls run entirely on S (no trap); gettid() inside returns R's tid (and S's tid
 * with trapping off: negative control); a blocking read() inside does not block S, R completes it;
 * the coroutine is never run by two threads (BUSY while R runs it).  Prints the costs. */
#include "../hosted.h"
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

enum { K_ADD, K_GETTID, K_READ };
struct msg {
    int kind;
    int fd;
    long arg, result;
    char buf[16];
    uintptr_t self;
    _Atomic int done;
};

static _Atomic(hosted_lazy_co *) the_co;
static pthread_t r_thread;
static int r_tid;

static void body(hosted_lazy_co *co, void *arg) {
    (void)arg;
    struct msg *m = hosted_lazy_wait(co);
    for (;;) {
        m->self = (uintptr_t)pthread_self(); /* through fs: the owner's view */
        switch (m->kind) {
        case K_ADD: m->result = m->arg + 1; break;
        case K_GETTID: m->result = gettid(); break;
        case K_READ: m->result = read(m->fd, m->buf, sizeof m->buf - 1); break;
        }
        atomic_store(&m->done, 1);
        m = hosted_lazy_wait(co);
    }
}

static void *r_main(void *arg) {
    (void)arg;
    r_tid = gettid();
    hosted_lazy_co *co = hosted_lazy_co_create(256 << 10, body, NULL);
    atomic_store(&the_co, co);
    hosted_lazy_serve(co);
    return NULL;
}

static int cmpu(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void wait_done(struct msg *m) {
    while (!atomic_load(&m->done)) sched_yield();
}

int main(void) {
    char err[256];
    if (hosted_lazy_init(err, sizeof err) < 0) SKIP("%s", err);
    pthread_create(&r_thread, NULL, r_main, NULL);
    hosted_lazy_co *co;
    while (!(co = atomic_load(&the_co))) sched_yield();
    hosted_lazy_sender *s = hosted_lazy_sender_init(err, sizeof err);
    if (!s) SKIP("%s", err);
    int s_tid = gettid();

    /* 1. Calls without syscalls: run on S, never trap. */
    enum { N = 20000 };
    static uint64_t t[N];
    int bad = 0, done = 0;
    for (int i = 0; i < N; i++) {
        struct msg m = {.kind = K_ADD, .arg = i};
        uint64_t t0 = __rdtsc();
        int r = hosted_lazy_call(s, co, &m);
        t[i] = __rdtsc() - t0;
        done += r == HOSTED_LAZY_DONE;
        if (m.result != i + 1 || m.self != (uintptr_t)r_thread || !m.done) bad++;
    }
    long calls, traps;
    hosted_lazy_sender_stats(s, &calls, &traps);
    qsort(t, N, sizeof *t, cmpu);
    CHECK(done == N && bad == 0 && traps == 0,
          "%d calls without syscalls ran on S to completion, pthread_self() inside is R's, 0 traps "
          "(%ld)", N, traps);
    fprintf(CHECK_OUT, "     borrow + run + return, no syscall: median %llu cycles, p99 %llu\n",
            (unsigned long long)t[N / 2], (unsigned long long)t[N * 99 / 100]);

    /* 2. gettid() inside: trapped and made by R. */
    enum { G = 200 };
    static uint64_t tg[G];
    int handed = 0, right = 0;
    for (int i = 0; i < G; i++) {
        struct msg m = {.kind = K_GETTID};
        uint64_t t0 = __rdtsc();
        int r = hosted_lazy_call(s, co, &m);
        tg[i] = __rdtsc() - t0;
        handed += r == HOSTED_LAZY_HANDED_OFF;
        wait_done(&m);
        right += m.result == r_tid;
        while (hosted_lazy_call(s, co, &(struct msg){.kind = K_ADD}) == HOSTED_LAZY_BUSY)
            sched_yield(); /* until R has parked it again */
    }
    qsort(tg, G, sizeof *tg, cmpu);
    CHECK(handed == G && right == G,
          "gettid() inside a borrowed coroutine returns R's tid %d, not S's %d (%d/%d handed off, "
          "%d right)", r_tid, s_tid, handed, G, right);
    fprintf(CHECK_OUT, "     trap -> S resumed (hand-off to R): median %llu cycles, p99 %llu\n",
            (unsigned long long)tg[G / 2], (unsigned long long)tg[G * 99 / 100]);

    /* Negative control: trapping off, the same call reports S's tid. */
    hosted_lazy_sender_trap(s, 0);
    struct msg mn = {.kind = K_GETTID};
    int rn = hosted_lazy_call(s, co, &mn);
    CHECK(rn == HOSTED_LAZY_DONE && mn.result == s_tid,
          "negative control: with trapping off, gettid() inside returns S's tid (%ld)", mn.result);
    hosted_lazy_sender_trap(s, 1);

    /* 3. A blocking read() inside does not block S. */
    int p[2];
    if (pipe(p) < 0) return 1;
    struct msg mr = {.kind = K_READ, .fd = p[0]};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rr = hosted_lazy_call(s, co, &mr);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long us = (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000;
    CHECK(rr == HOSTED_LAZY_HANDED_OFF && us < 100000,
          "read() on an empty pipe inside: S got control back after %ld us", us);
    usleep(20000);
    CHECK(!atomic_load(&mr.done), "20 ms later the read is still blocked (on R)");
    struct msg mb = {.kind = K_ADD, .arg = 1};
    CHECK(hosted_lazy_call(s, co, &mb) == HOSTED_LAZY_BUSY && !mb.done,
          "meanwhile a second call finds the coroutine busy: never run by two threads");
    if (write(p[1], "hello", 5) != 5) return 1;
    wait_done(&mr);
    CHECK(mr.result == 5 && !memcmp(mr.buf, "hello", 5),
          "after a write to the pipe, R completed the read: %ld bytes \"%.5s\"", mr.result, mr.buf);
    int rd = HOSTED_LAZY_BUSY;
    struct msg ma = {.kind = K_ADD, .arg = 41};
    for (int i = 0; i < 100000 && rd == HOSTED_LAZY_BUSY; i++) {
        rd = hosted_lazy_call(s, co, &ma);
        if (rd == HOSTED_LAZY_BUSY) sched_yield();
    }
    CHECK(rd == HOSTED_LAZY_DONE && ma.result == 42, "and the next call runs on S again");
    hosted_lazy_stop(co);
    pthread_join(r_thread, NULL);
    CHECK_DONE();
}
