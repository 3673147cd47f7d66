/* ctx.c: C side of the user-mode switch (switch_x86_64.S). */
#include "hosted.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif

/* Read by hosted_switch_fs in switch_x86_64.S. */
__attribute__((visibility("hidden"))) unsigned char hosted_fsgsbase_ok;

__attribute__((constructor)) static void hosted_switch_init(void) {
    hosted_fsgsbase_ok = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
}

int hosted_have_fsgsbase(void) { return (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0; }

void hosted_ctx_trampoline(void);

__attribute__((visibility("hidden"), noreturn)) void hosted_ctx_returned(void) {
    static const char msg[] = "rpal hosted: a context entry function returned\n";
    fwrite(msg, 1, sizeof msg - 1, stderr);
    abort();
}

void hosted_ctx_make(hosted_ctx *ctx, void *stack, size_t size, void (*entry)(void *), void *arg) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    /* The return-address slot sits at top-24 so that rsp is 16-aligned in the trampoline. */
    uint64_t *f = (uint64_t *)(top - 80);
    memset(f, 0, 80);
    uint32_t mxcsr = 0x1f80; /* ABI defaults: all exceptions masked, round to nearest */
    uint16_t fcw = 0x037f;
    memcpy((char *)f + 0, &mxcsr, 4);
    memcpy((char *)f + 4, &fcw, 2);
    f[1] = 0;                    /* r15 */
    f[2] = 0;                    /* r14 */
    f[3] = (uintptr_t)entry;     /* r13 */
    f[4] = (uintptr_t)arg;       /* r12 */
    f[5] = 0;                    /* rbx */
    f[6] = 0;                    /* rbp */
    f[7] = (uintptr_t)hosted_ctx_trampoline;
    ctx->sp = f;
    ctx->fs = 0;
}
