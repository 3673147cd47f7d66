/* test_switch_ns.c: a user-mode switch into code of another loaded program, with fs set to that
 * program's main thread's TCB: inside, errno, thread-locals and pthread_self() are the callee
 * thread's, although the code runs on the test's kernel thread; callee-saved registers, MXCSR and
 * the x87 CW of the caller survive; the caller's own errno and fs are untouched. */
#include "../hosted.h"
#include "check.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

struct probe {
    int err;
    int tls;
    uintptr_t errno_addr;
    uintptr_t tls_addr;
    uintptr_t self;
    long calls;
};

unsigned regcheck_switch(hosted_ctx *from, hosted_ctx *to, uint32_t mxcsr, uint32_t fcw,
                         void (*sw)(hosted_ctx *, hosted_ctx *), uint64_t seed);

static hosted_ctx caller, callee;
static void (*probe_fn)(struct probe *);
static struct probe pr;
static void (*sw)(hosted_ctx *, hosted_ctx *);
static unsigned co_mask;

static void coroutine(void *arg) {
    (void)arg;
    for (int i = 0;; i++) {
        probe_fn(&pr); /* code of the other namespace, its TLS through fs */
        co_mask |= regcheck_switch(&callee, &caller, 0x1f80 | 0x2000, 0x027f, sw,
                                   0x5a5a000000000000ull + (uint64_t)i);
    }
}

int main(int argc, char **argv) {
    hosted_reexec_with_tunables(argc, argv);
    char err[512];
    char *av[] = {"prog_callee"};
    hosted_prog *p = hosted_load(PROG_CALLEE, 1, av, NULL, err, sizeof err);
    CHECK(p != NULL, "load prog_callee (%s)", p ? "" : err);
    if (!p) return 1;
    CHECK(hosted_start(p, err, sizeof err) == 0, "start it");
    _Atomic int *ready = hosted_sym(p, "callee_ready");
    while (!atomic_load(ready)) usleep(1000);
    probe_fn = (void (*)(struct probe *))hosted_sym(p, "callee_probe");
    uintptr_t r_fs = hosted_main_fsbase(p);
    uintptr_t r_self = *(uintptr_t *)hosted_sym(p, "callee_self");
    uintptr_t r_errno = *(uintptr_t *)hosted_sym(p, "callee_errno_addr");
    uintptr_t r_tls = *(uintptr_t *)hosted_sym(p, "callee_tls_addr");
    CHECK(r_self == r_fs, "the callee's main thread: pthread_self 0x%lx == its fs base",
          (unsigned long)r_self);

    struct {
        const char *name;
        void (*fn)(hosted_ctx *, hosted_ctx *);
    } variants[] = {{"wrfsbase", hosted_switch_wrfs}, {"arch_prctl", hosted_switch_prctl}};
    size_t sz = 256 << 10;
    void *stk = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long total = 0;
    for (int v = 0; v < 2; v++) {
        if (v == 0 && !hosted_have_fsgsbase()) {
            fprintf(CHECK_OUT, "(no FSGSBASE: wrfsbase variant skipped)\n");
            continue;
        }
        sw = variants[v].fn;
        co_mask = 0;
        hosted_ctx_make(&callee, stk, sz, coroutine, NULL);
        callee.fs = r_fs;
        uintptr_t my_fs = hosted_get_fs();
        unsigned mask = 0;
        int bad = 0, first_err = -1;
        for (int i = 0; i < 1000; i++) {
            errno = 11;
            mask |= regcheck_switch(&caller, &callee, 0x1f80 | 0x6000, 0x007f, sw,
                                    0x1234000000000000ull + (uint64_t)i);
            total++;
            if (first_err < 0) first_err = pr.err;
            if (errno != 11 || hosted_get_fs() != my_fs || pr.self != r_fs ||
                pr.errno_addr != r_errno || pr.tls_addr != r_tls || pr.calls != total ||
                pr.tls != 777 + total - 1 || (total > 1 && pr.err != 555))
                bad++;
        }
        if (v == 0 || !hosted_have_fsgsbase())
            CHECK(first_err == 4242, "%s: the first probe saw the callee thread's errno (%d)",
                  variants[v].name, first_err);
        CHECK(bad == 0,
              "%s: 1000 calls into the other namespace: pthread_self, &errno, &thread_local are the "
              "callee thread's, its values are seen and bumped; our errno and fs are untouched "
              "(%d bad)", variants[v].name, bad);
        CHECK(mask == 0 && co_mask == 0,
              "%s: callee-saved registers, MXCSR, x87 CW survive on both sides (0x%x, 0x%x)",
              variants[v].name, mask, co_mask);
    }
    atomic_store((_Atomic int *)hosted_sym(p, "callee_quit"), 1);
    int st = hosted_wait(p);
    CHECK(st == 0, "the callee's main thread saw errno and its thread-local changed by the %ld "
          "probes (exit status %d)", total, st);
    CHECK_DONE();
}
