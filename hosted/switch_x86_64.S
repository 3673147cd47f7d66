/* switch_x86_64.S: user-mode context switch for rpal hosted mode (System V x86-64).
 *
 * A suspended context is its stack pointer; the stack holds, from the saved rsp upwards:
 *   [rsp+0]  MXCSR (4 bytes)   [rsp+4] x87 control word (2 bytes, 2 bytes padding)
 *   [rsp+8]  r15   [rsp+16] r14   [rsp+24] r13   [rsp+32] r12   [rsp+40] rbx   [rsp+48] rbp
 *   [rsp+56] return address
 * struct hosted_ctx { void *sp; uintptr_t fs; } (hosted.h): offsets 0 and 8.
 * Only the callee-saved state of the ABI is kept: the switch is a function call to both sides. */

#define CTX_SP 0
#define CTX_FS 8
#define ARCH_SET_FS 0x1002
#define SYS_arch_prctl 158

        .text

.macro SAVE_FRAME
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $8, %rsp
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
.endm

/* Resume by an indirect jump, not ret: the return stack buffer holds the other stack's return
 * addresses, so a ret here is always mispredicted, while the jump's target is learned (figures in
 * docs/HOSTED.md, "The user-mode switch"). */
.macro RESTORE_FRAME
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        popq    %rcx
        jmp     *%rcx
.endm

/* void hosted_switch(hosted_ctx *from, hosted_ctx *to): registers and stack, fs untouched. */
        .globl  hosted_switch
        .type   hosted_switch, @function
        .p2align 4
hosted_switch:
        SAVE_FRAME
        movq    %rsp, CTX_SP(%rdi)
        movq    CTX_SP(%rsi), %rsp
        RESTORE_FRAME
        .size   hosted_switch, .-hosted_switch

/* void hosted_switch_wrfs(hosted_ctx *from, hosted_ctx *to): plus fs base by rdfsbase/wrfsbase. */
        .globl  hosted_switch_wrfs
        .type   hosted_switch_wrfs, @function
        .p2align 4
hosted_switch_wrfs:
        SAVE_FRAME
        rdfsbase %rax
        movq    %rax, CTX_FS(%rdi)
        movq    %rsp, CTX_SP(%rdi)
        movq    CTX_FS(%rsi), %rax
        wrfsbase %rax
        movq    CTX_SP(%rsi), %rsp
        RESTORE_FRAME
        .size   hosted_switch_wrfs, .-hosted_switch_wrfs

/* void hosted_switch_prctl(hosted_ctx *from, hosted_ctx *to): fs base by arch_prctl(ARCH_SET_FS);
 * the current base is read from %fs:0 (the TCB self pointer of the x86-64 TLS ABI). */
        .globl  hosted_switch_prctl
        .type   hosted_switch_prctl, @function
        .p2align 4
hosted_switch_prctl:
        SAVE_FRAME
        movq    %fs:0, %rax
        movq    %rax, CTX_FS(%rdi)
        movq    %rsp, CTX_SP(%rdi)
        movq    %rsi, %r8               /* syscall keeps r8 */
        movl    $ARCH_SET_FS, %edi
        movq    CTX_FS(%r8), %rsi
        movl    $SYS_arch_prctl, %eax
        syscall
        movq    CTX_SP(%r8), %rsp
        RESTORE_FRAME
        .size   hosted_switch_prctl, .-hosted_switch_prctl

/* void hosted_switch_fs(hosted_ctx *from, hosted_ctx *to): wrfsbase when available. */
        .globl  hosted_switch_fs
        .type   hosted_switch_fs, @function
        .p2align 4
hosted_switch_fs:
        cmpb    $0, hosted_fsgsbase_ok(%rip)
        jne     hosted_switch_wrfs
        jmp     hosted_switch_prctl
        .size   hosted_switch_fs, .-hosted_switch_fs

/* uintptr_t hosted_get_fs(void) */
        .globl  hosted_get_fs
        .type   hosted_get_fs, @function
        .p2align 4
hosted_get_fs:
        movq    %fs:0, %rax
        ret
        .size   hosted_get_fs, .-hosted_get_fs

/* First code of a context made by hosted_ctx_make: r12 = arg, r13 = entry; rsp is 16-aligned. */
        .globl  hosted_ctx_trampoline
        .hidden hosted_ctx_trampoline
        .type   hosted_ctx_trampoline, @function
        .p2align 4
hosted_ctx_trampoline:
        movq    %r12, %rdi
        callq   *%r13
        callq   hosted_ctx_returned     /* hidden, noreturn */
        ud2
        .size   hosted_ctx_trampoline, .-hosted_ctx_trampoline

/* ---- lazy switch support (host.c's signal handlers, src/call.c) ---- */

/* void hosted_ctx_jump_wrfs(hosted_ctx *to): resume to (fs by wrfsbase) without saving anything:
 * how the launcher's SIGSYS and fault handlers leave for the sender's call point. */
        .globl  hosted_ctx_jump_wrfs
        .hidden hosted_ctx_jump_wrfs
        .type   hosted_ctx_jump_wrfs, @function
        .p2align 4
hosted_ctx_jump_wrfs:
        movq    CTX_FS(%rdi), %rax
        wrfsbase %rax
        movq    CTX_SP(%rdi), %rsp
        RESTORE_FRAME
        .size   hosted_ctx_jump_wrfs, .-hosted_ctx_jump_wrfs

/* The code range that Syscall User Dispatch lets through on the sender threads of a program whose
 * libc has no range of its own (the host block publishes the ranges, src/call.c arms them). */
        .section .text.hosted_sud_allowed,"ax",@progbits
        .globl  hosted_sud_allowed_start
        .hidden hosted_sud_allowed_start
hosted_sud_allowed_start:

/* void hosted_lazy_resume(hosted_ctx *save, void *uc): save the current context in save (so that
 * a later switch to it returns from this call), then resume the coroutine captured in the signal
 * frame whose ucontext is at uc, on this thread, with rt_sigreturn: the kernel restores all
 * registers, rip, flags, FPU/vector state and the signal mask from the frame. */
        .globl  hosted_lazy_resume
        .hidden hosted_lazy_resume
        .type   hosted_lazy_resume, @function
        .p2align 4
hosted_lazy_resume:
        SAVE_FRAME
        movq    %rsp, CTX_SP(%rdi)
        movq    %rsi, %rsp
        movl    $15, %eax               /* SYS_rt_sigreturn */
        syscall
        ud2
        .size   hosted_lazy_resume, .-hosted_lazy_resume

/* The restorer of the launcher's SIGSYS handler: its return during a call, with the call's
 * system calls blocked, must not trap again. */
        .globl  hosted_sigsys_restorer
        .hidden hosted_sigsys_restorer
        .type   hosted_sigsys_restorer, @function
        .p2align 4
hosted_sigsys_restorer:
        movl    $15, %eax               /* SYS_rt_sigreturn */
        syscall
        ud2
        .size   hosted_sigsys_restorer, .-hosted_sigsys_restorer

        .globl  hosted_sud_allowed_end
        .hidden hosted_sud_allowed_end
hosted_sud_allowed_end:

        .section .note.GNU-stack,"",@progbits
