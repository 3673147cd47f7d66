/* test_switch.c: the user-mode switch keeps rbx, rbp, r12-r15, rsp, MXCSR and the x87 control word
 * of both sides, passes control back and forth, and switches the fs base (wrfsbase and arch_prctl
 * variants). */
#include "../hosted.h"
#include "check.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

unsigned regcheck_switch(hosted_ctx *from, hosted_ctx *to, uint32_t mxcsr, uint32_t fcw,
                         void (*sw)(hosted_ctx *, hosted_ctx *), uint64_t seed);

static hosted_ctx main_ctx, co_ctx;
static void (*sw)(hosted_ctx *, hosted_ctx *);
static unsigned co_mask;
static int co_rounds;
static uintptr_t co_fs_seen;
static uint64_t fake_tcb[64]; /* a fake thread pointer for the fs tests: fs:0 points to itself */

static void coroutine(void *arg) {
    (void)arg;
    for (;;) {
        /* Different values here: MXCSR rounding down, CW with 53-bit precision. */
        co_fs_seen = hosted_get_fs();
        co_mask |= regcheck_switch(&co_ctx, &main_ctx, 0x1f80 | 0x2000, 0x027f, sw,
                                   0xa5a5000000000000ull + (uint64_t)co_rounds);
        co_rounds++;
    }
}

static void run(const char *name, void (*fn)(hosted_ctx *, hosted_ctx *), uintptr_t co_fs) {
    sw = fn;
    co_mask = 0;
    co_rounds = 0;
    size_t sz = 64 << 10;
    void *stk = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    hosted_ctx_make(&co_ctx, stk, sz, coroutine, NULL);
    co_ctx.fs = co_fs;
    uintptr_t my_fs = hosted_get_fs();
    unsigned mask = 0;
    int bad_fs = 0;
    for (int i = 0; i < 1000; i++) {
        mask |= regcheck_switch(&main_ctx, &co_ctx, 0x1f80 | 0x6000 /* round toward zero */,
                                0x037f & ~0x0300u /* 24-bit precision */, fn,
                                0x1234000000000000ull + (uint64_t)i);
        if (co_fs && (co_fs_seen != co_fs || hosted_get_fs() != my_fs)) bad_fs++;
    }
    CHECK(mask == 0, "%s: the switching side's callee-saved registers, MXCSR and x87 CW survive "
          "1000 round trips (mask 0x%x)", name, mask);
    CHECK(co_mask == 0 && co_rounds == 999,
          "%s: so do the coroutine's own (mask 0x%x, %d returns)", name, co_mask, co_rounds);
    if (co_fs)
        CHECK(bad_fs == 0, "%s: inside, fs points at the coroutine's TCB; outside, at ours (%d bad)",
              name, bad_fs);
    munmap(stk, sz);
}

int main(void) {
    run("hosted_switch", hosted_switch, 0);
    fake_tcb[0] = (uintptr_t)fake_tcb;
    fake_tcb[5] = ((uint64_t *)hosted_get_fs())[5]; /* the stack-protector canary at fs:0x28 */
    run("hosted_switch_prctl", hosted_switch_prctl, (uintptr_t)fake_tcb);
    if (!hosted_have_fsgsbase()) SKIP("no FSGSBASE (AT_HWCAP2 bit 1): wrfsbase variant untested");
    run("hosted_switch_wrfs", hosted_switch_wrfs, (uintptr_t)fake_tcb);
    run("hosted_switch_fs", hosted_switch_fs, (uintptr_t)fake_tcb);
    CHECK_DONE();
}
