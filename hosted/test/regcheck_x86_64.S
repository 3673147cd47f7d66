/* regcheck_x86_64.S: test helper.
 * unsigned regcheck_switch(hosted_ctx *from, hosted_ctx *to, uint32_t mxcsr, uint32_t fcw,
 *                          void (*sw)(hosted_ctx *, hosted_ctx *), uint64_t seed)
 * Loads rbx, rbp, r12-r15 with seed + k * 0x0101010101010101 (k = 1..6), MXCSR and the x87 control
 * word with the given values, calls sw(from, to), and on return compares them all.  Returns a mask
 * of what changed: bit 0 rbx, 1 rbp, 2 r12, 3 r13, 4 r14, 5 r15, 6 MXCSR, 7 x87 CW.  The caller's
 * own registers, MXCSR and CW are restored. */
        .text
        .globl  regcheck_switch
        .type   regcheck_switch, @function
regcheck_switch:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $40, %rsp               /* 6 pushes + 40: rsp is 16-aligned at the call */
        stmxcsr 0(%rsp)                 /* caller's */
        fnstcw  4(%rsp)
        movl    %edx, 8(%rsp)           /* wanted */
        movw    %cx, 12(%rsp)
        movq    %r9, 16(%rsp)           /* seed */
        ldmxcsr 8(%rsp)
        fldcw   12(%rsp)
        movabsq $0x0101010101010101, %r10
        movq    %r9, %rbx
        addq    %r10, %rbx
        movq    %rbx, %rbp
        addq    %r10, %rbp
        movq    %rbp, %r12
        addq    %r10, %r12
        movq    %r12, %r13
        addq    %r10, %r13
        movq    %r13, %r14
        addq    %r10, %r14
        movq    %r14, %r15
        addq    %r10, %r15
        callq   *%r8
        xorl    %eax, %eax
        movabsq $0x0101010101010101, %r10
        movq    16(%rsp), %r11
        addq    %r10, %r11
        cmpq    %r11, %rbx
        je      1f
        orl     $1, %eax
1:      addq    %r10, %r11
        cmpq    %r11, %rbp
        je      1f
        orl     $2, %eax
1:      addq    %r10, %r11
        cmpq    %r11, %r12
        je      1f
        orl     $4, %eax
1:      addq    %r10, %r11
        cmpq    %r11, %r13
        je      1f
        orl     $8, %eax
1:      addq    %r10, %r11
        cmpq    %r11, %r14
        je      1f
        orl     $16, %eax
1:      addq    %r10, %r11
        cmpq    %r11, %r15
        je      1f
        orl     $32, %eax
1:      stmxcsr 24(%rsp)
        movl    24(%rsp), %r10d
        cmpl    8(%rsp), %r10d
        je      1f
        orl     $64, %eax
1:      fnstcw  28(%rsp)
        movzwl  28(%rsp), %r10d
        movzwl  12(%rsp), %r11d
        cmpl    %r11d, %r10d
        je      1f
        orl     $128, %eax
1:      ldmxcsr 0(%rsp)
        fldcw   4(%rsp)
        addq    $40, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   regcheck_switch, .-regcheck_switch
        .section .note.GNU-stack,"",@progbits
