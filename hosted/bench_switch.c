/* bench_switch.c: cost of the user-mode switch, in TSC cycles (median and p99 of N round trips):
 *   (a) registers + stack only (hosted_switch), there and back
 *   (b) plus the fs base with rdfsbase/wrfsbase, both ways (hosted_switch_wrfs)
 *   (c) plus the fs base with arch_prctl(ARCH_SET_FS), both ways (hosted_switch_prctl)
 * Each sample is one round trip timed with lfence;rdtsc; the timing overhead (an empty timed
 * region) is printed and not subtracted.  A second line per row gives the median cost per round trip
 * of batches of 1000 back-to-back round trips (no fences inside: throughput, not latency).
 *   (d) the floor of `rpal bench`'s one-way figure for rpal-hosted: its method (a client rdtscp
 *       stamp in a 32-byte message, the server's rdtscp once it has copied it) around a bare
 *       wrfsbase switch, with the sender and the parked receiver each one call deep, as librpal's
 *       are (so the receiver's first return is mispredicted, as there); then the same plus what
 *       an RPAL call cannot drop: the claim's compare-and-swap and its release.  Median and mean
 *       of N one-way samples, nothing subtracted.
 *   hosted_bench_switch [N] [CPU]      (default 1000000 round trips; pinned to CPU if given) */
#include "hosted.h"

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

static hosted_ctx main_ctx, co_ctx;
static void (*sw)(hosted_ctx *, hosted_ctx *);
static uint64_t fake_tcb[64];

static inline uint64_t tsc(void) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

static void coroutine(void *arg) {
    (void)arg;
    for (;;) sw(&co_ctx, &main_ctx);
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double cycles_per_ns(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = __rdtsc();
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 100000000L);
    uint64_t t1 = __rdtsc();
    return (double)(t1 - t0) /
           (double)((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
}

static void report(const char *name, uint64_t *s, long n, double cpn) {
    qsort(s, (size_t)n, sizeof *s, cmp);
    uint64_t med = s[n / 2], p99 = s[n * 99 / 100];
    printf("%-44s median %5llu cycles (%6.1f ns)   p99 %6llu cycles (%6.1f ns)\n", name,
           (unsigned long long)med, med / cpn, (unsigned long long)p99, p99 / cpn);
}

static void bench(const char *name, void (*fn)(hosted_ctx *, hosted_ctx *), uintptr_t fs,
                  uint64_t *s, long n, double cpn) {
    static char stack[64 << 10] __attribute__((aligned(64)));
    sw = fn;
    hosted_ctx_make(&co_ctx, stack, sizeof stack, coroutine, NULL);
    co_ctx.fs = fs;
    for (long i = 0; i < n / 10; i++) fn(&main_ctx, &co_ctx); /* warm up */
    for (long i = 0; i < n; i++) {
        uint64_t t0 = tsc();
        fn(&main_ctx, &co_ctx);
        s[i] = tsc() - t0;
    }
    report(name, s, n, cpn);
    /* Back-to-back round trips, no timing inside: median over batches of 1000, per round trip. */
    long nb = n / 1000 < 20 ? 20 : n / 1000;
    if (nb > n) nb = n;
    for (long b = 0; b < nb; b++) {
        uint64_t t0 = tsc();
        for (int i = 0; i < 1000; i++) fn(&main_ctx, &co_ctx);
        s[b] = (tsc() - t0 + 500) / 1000;
    }
    qsort(s, (size_t)nb, sizeof *s, cmp);
    printf("%-44s median %5llu cycles (%6.1f ns) per round trip\n", "    same, back to back (batches of 1000)",
           (unsigned long long)s[nb / 2], s[nb / 2] / cpn);
}

/* (d): a message, a receiver coroutine and a sender each one frame deep, as librpal's
 * (rpal_epoll_wait and rpal_send switch in their own frames). */
static volatile uint64_t floor_msg[4];
static uint64_t *floor_out;
static long floor_n, floor_i;
static int floor_claim;                 /* 1: add the claim's CAS and its release */
static _Atomic unsigned floor_state;

static inline uint64_t stamp(void) {
    unsigned aux;
    return __rdtscp(&aux);
}

static inline __attribute__((always_inline)) void floor_park(void) {
    sw(&co_ctx, &main_ctx);
}

__attribute__((noinline)) static const uint64_t *floor_wait(uint64_t *copy) {
    floor_park();
    memcpy(copy, (const void *)floor_msg, sizeof floor_msg);
    return copy;
}

static void floor_receiver(void *arg) {
    (void)arg;
    uint64_t copy[4];
    for (;;) {
        const uint64_t *m = floor_wait(copy);
        uint64_t now = stamp();
        if (floor_i < floor_n) floor_out[floor_i++] = now - m[0];
    }
}

static inline __attribute__((always_inline)) void floor_deliver(void) {
    unsigned parked = 0;
    if (floor_claim && !__atomic_compare_exchange_n(&floor_state, &parked, 1, 0, __ATOMIC_ACQ_REL,
                                                    __ATOMIC_RELAXED))
        abort();
    sw(&main_ctx, &co_ctx);
    if (floor_claim)
        __atomic_store_n(&floor_state, 0, __ATOMIC_RELEASE);
}

__attribute__((noinline)) static void floor_send(const uint64_t *b) {
    memcpy((void *)floor_msg, b, sizeof floor_msg);
    floor_deliver();
}

static void bench_floor(const char *name, int claim, uint64_t *s, long n, double cpn) {
    static char stack[64 << 10] __attribute__((aligned(64)));
    sw = hosted_switch_wrfs;
    hosted_ctx_make(&co_ctx, stack, sizeof stack, floor_receiver, NULL);
    co_ctx.fs = (uintptr_t)fake_tcb;
    floor_claim = claim;
    sw(&main_ctx, &co_ctx); /* the receiver parks */
    floor_out = s;
    for (int pass = 0; pass < 2; pass++) { /* a warm-up pass, then the measured one */
        floor_n = pass ? n : n / 10;
        floor_i = 0;
        for (long i = 0; i < floor_n; i++) {
            uint64_t b[4] = { 0, 1, 2, 3 };
            b[0] = stamp();
            floor_send(b);
        }
    }
    double sum = 0;
    for (long i = 0; i < n; i++) sum += (double)s[i];
    report(name, s, n, cpn);
    printf("%-44s mean   %7.1f cycles (%6.1f ns)\n", "", sum / n, sum / n / cpn);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (n < 100) n = 100;
    if (argc > 2) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(argv[2]), &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) perror("sched_setaffinity");
    }
    uint64_t *s = malloc((size_t)n * sizeof *s);
    if (!s) return 1;
    double cpn = cycles_per_ns();
    printf("TSC: %.3f cycles/ns; %ld round trips per row; FSGSBASE: %s\n", cpn, n,
           hosted_have_fsgsbase() ? "yes" : "no");
    for (long i = 0; i < n; i++) {
        uint64_t t0 = tsc();
        s[i] = tsc() - t0;
    }
    report("timing overhead (empty region)", s, n, cpn);
    bench("(a) switch round trip, regs + stack", hosted_switch, 0, s, n, cpn);
    /* A fake TCB: fs:0 points at itself; the canary at fs:0x28 is copied. */
    fake_tcb[0] = (uintptr_t)fake_tcb;
    fake_tcb[5] = ((uint64_t *)hosted_get_fs())[5];
    if (hosted_have_fsgsbase())
        bench("(b) round trip + wrfsbase both ways", hosted_switch_wrfs, (uintptr_t)fake_tcb, s, n,
              cpn);
    else
        printf("(b) skipped: no FSGSBASE\n");
    bench("(c) round trip + arch_prctl both ways", hosted_switch_prctl, (uintptr_t)fake_tcb, s,
          n / 10, cpn);
    if (hosted_have_fsgsbase()) {
        bench_floor("(d) one-way floor, bare switch", 0, s, n, cpn);
        bench_floor("    plus the claim's CAS and release", 1, s, n, cpn);
    }
    free(s);
    return 0;
}
