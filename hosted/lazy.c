/* lazy.c: lazy switch prototype (issue 4, "must hold" 4), after research/lazy-switch.md.
 *
 * States of a coroutine (co->state, also a futex word for R):
 *   PARKED     waiting in hosted_lazy_wait(); a sender may claim it with one CAS
 *   BORROWED   running on a sender S (fs = R's TCB, S's SUD selector = BLOCK)
 *   PENDING_R  it trapped on a syscall while borrowed: its context is the SIGSYS frame at co->uc,
 *              on its own stack; R must resume it
 *   RUNNING_R  running on R
 * Only the thread that gets control back publishes PARKED (after the coroutine's registers are
 * saved), so a coroutine is never run by two threads at once.
 *
 * The SIGSYS handler runs on S with fs still pointing at R's TCB: it uses no TLS and no libc call
 * that could; it finds S's record through the gs base (set per sender thread), lets syscalls
 * through again (selector ALLOW), rewinds rip to the syscall instruction, puts R's signal mask and
 * sigaltstack into the frame, and jumps to S's borrow point with S's fs base, MXCSR and x87 CW
 * (hosted_ctx_jump_wrfs restores what hosted_switch_wrfs saved).  The handler is installed with
 * SA_NODEFER so that leaving it by a jump does not leave SIGSYS blocked on S. */
#include "hosted.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif
#ifndef SYSCALL_DISPATCH_FILTER_ALLOW
#define SYSCALL_DISPATCH_FILTER_ALLOW 0
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif
#ifndef SYS_USER_DISPATCH
#define SYS_USER_DISPATCH 2
#endif

enum { PARKED, BORROWED, PENDING_R, RUNNING_R };

#define SENDER_MAGIC 0x5244504c53454e44ull /* "RDPLSEND" */

struct hosted_lazy_sender {
    uint64_t magic;
    volatile unsigned char selector; /* SUD selector byte of this thread */
    hosted_ctx ctx;                  /* the borrow point */
    hosted_lazy_co *cur;             /* the coroutine being run, or NULL */
    int no_trap;                     /* 1: leave syscalls on S (thread-like semantics) */
    long calls, traps;
};

struct hosted_lazy_co {
    _Atomic int state;
    int on_r;                 /* 1 while R runs it */
    int trapped;              /* set by the SIGSYS handler */
    _Atomic int stop;
    hosted_ctx ctx;           /* the coroutine when suspended by a switch (fs = R's TCB) */
    hosted_ctx r_ctx;         /* R's place to come back to */
    hosted_lazy_sender *sender;
    void *msg;
    void *uc;                 /* ucontext of the SIGSYS frame when PENDING_R */
    uint64_t r_sigmask;       /* R's signal mask (kernel sigset: 8 bytes) */
    stack_t r_altstack;
    void (*body)(hosted_lazy_co *, void *);
    void *arg;
    void *stack;
    size_t stack_size;
};


static inline uintptr_t rdgsbase(void) {
    uintptr_t v;
    __asm__ volatile("rdgsbase %0" : "=r"(v));
    return v;
}
static inline void wrgsbase(uintptr_t v) { __asm__ volatile("wrgsbase %0" ::"r"(v) : "memory"); }

static void fatal(const char *msg) {
    /* no stdio: may run with another thread's fs */
    ssize_t r = write(2, msg, strlen(msg));
    (void)r;
    abort();
}

static void sigsys_handler(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    hosted_lazy_sender *s = (hosted_lazy_sender *)rdgsbase();
    if (!s || s->magic != SENDER_MAGIC || !s->cur || si->si_code != SYS_USER_DISPATCH)
        fatal("rpal hosted: unexpected SIGSYS\n");
    s->selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    hosted_lazy_co *co = s->cur;
    ucontext_t *uc = ucv;
    uc->uc_mcontext.gregs[REG_RIP] -= 2; /* re-execute the syscall (rax = nr after rollback) */
    memcpy(&uc->uc_sigmask, &co->r_sigmask, sizeof co->r_sigmask); /* 8 bytes: not glibc's 128 */
    uc->uc_stack = co->r_altstack;
    co->uc = uc;
    co->trapped = 1;
    hosted_ctx_jump_wrfs(&s->ctx);
}

int hosted_lazy_init(char *err, size_t errlen) {
    if (!hosted_have_fsgsbase()) {
        snprintf(err, errlen, "no FSGSBASE (AT_HWCAP2 bit 1)");
        return -1;
    }
    /* Probe SUD on this thread and turn it off again. */
    static volatile unsigned char probe_sel = SYSCALL_DISPATCH_FILTER_ALLOW;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, 0, 0, &probe_sel) < 0) {
        snprintf(err, errlen, "Syscall User Dispatch unavailable: %s", strerror(errno));
        return -1;
    }
    prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sigsys_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) < 0) {
        snprintf(err, errlen, "sigaction(SIGSYS): %s", strerror(errno));
        return -1;
    }
    return 0;
}

hosted_lazy_sender *hosted_lazy_sender_init(char *err, size_t errlen) {
    hosted_lazy_sender *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->magic = SENDER_MAGIC;
    s->selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON,
              (unsigned long)hosted_sud_allowed_start,
              (unsigned long)(hosted_sud_allowed_end - hosted_sud_allowed_start),
              &s->selector) < 0) {
        snprintf(err, errlen, "PR_SET_SYSCALL_USER_DISPATCH: %s", strerror(errno));
        free(s);
        return NULL;
    }
    wrgsbase((uintptr_t)s);
    return s;
}

void hosted_lazy_sender_trap(hosted_lazy_sender *s, int on) { s->no_trap = !on; }

void hosted_lazy_sender_stats(const hosted_lazy_sender *s, long *calls, long *traps) {
    if (calls) *calls = s->calls;
    if (traps) *traps = s->traps;
}

static void futex_wake(_Atomic int *w) {
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void co_entry(void *arg) {
    hosted_lazy_co *co = arg;
    co->body(co, co->arg);
    fatal("rpal hosted: a lazy coroutine body returned\n");
}

hosted_lazy_co *hosted_lazy_co_create(size_t stack_size, void (*body)(hosted_lazy_co *, void *),
                                      void *arg) {
    hosted_lazy_co *co = calloc(1, sizeof *co);
    if (!co) return NULL;
    if (stack_size < (64u << 10)) stack_size = 64u << 10; /* a SIGSYS frame needs ~3 KiB+ */
    co->stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (co->stack == MAP_FAILED) {
        free(co);
        return NULL;
    }
    co->stack_size = stack_size;
    co->body = body;
    co->arg = arg;
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    memcpy(&co->r_sigmask, &cur, sizeof co->r_sigmask);
    sigaltstack(NULL, &co->r_altstack);
    hosted_ctx_make(&co->ctx, co->stack, stack_size, co_entry, co);
    co->ctx.fs = hosted_get_fs();
    co->on_r = 1;
    atomic_store(&co->state, RUNNING_R);
    hosted_switch(&co->r_ctx, &co->ctx); /* run the body to its first wait */
    atomic_store(&co->state, PARKED);
    return co;
}

void *hosted_lazy_wait(hosted_lazy_co *co) {
    /* Runs with fs = R's TCB on whichever thread runs the coroutine: no TLS here. */
    if (co->on_r) {
        hosted_switch(&co->ctx, &co->r_ctx);
    } else {
        co->sender->selector = SYSCALL_DISPATCH_FILTER_ALLOW;
        hosted_switch_wrfs(&co->ctx, &co->sender->ctx);
    }
    return co->msg;
}

int hosted_lazy_call(hosted_lazy_sender *s, hosted_lazy_co *co, void *msg) {
    int expected = PARKED;
    if (!atomic_compare_exchange_strong(&co->state, &expected, BORROWED)) return HOSTED_LAZY_BUSY;
    co->msg = msg;
    co->sender = s;
    co->on_r = 0;
    co->trapped = 0;
    s->cur = co;
    s->calls++;
    if (!s->no_trap) s->selector = SYSCALL_DISPATCH_FILTER_BLOCK;
    hosted_switch_wrfs(&s->ctx, &co->ctx);
    /* Back on S with S's fs: the coroutine waited again, or the handler jumped here. */
    s->selector = SYSCALL_DISPATCH_FILTER_ALLOW;
    s->cur = NULL;
    if (co->trapped) {
        s->traps++;
        atomic_store(&co->state, PENDING_R);
        futex_wake(&co->state); /* only now: the handler's frames are off S's stack */
        return HOSTED_LAZY_HANDED_OFF;
    }
    atomic_store(&co->state, PARKED);
    return HOSTED_LAZY_DONE;
}

void hosted_lazy_serve(hosted_lazy_co *co) {
    for (;;) {
        int st = atomic_load(&co->state);
        if (st == PENDING_R) {
            atomic_store(&co->state, RUNNING_R);
            co->on_r = 1;
            hosted_lazy_resume(&co->r_ctx, co->uc); /* returns at the coroutine's next wait */
            co->on_r = 0;
            atomic_store(&co->state, PARKED);
            continue;
        }
        if (atomic_load(&co->stop)) return;
        struct timespec ts = {0, 50 * 1000 * 1000}; /* also notices stop */
        syscall(SYS_futex, &co->state, FUTEX_WAIT_PRIVATE, st, &ts, NULL, 0);
    }
}

void hosted_lazy_stop(hosted_lazy_co *co) {
    atomic_store(&co->stop, 1);
    futex_wake(&co->state);
}
