/* host.c: the launcher's side of the RPAL call (protocol in rpal_host.h).
 *
 * The launcher owns what must exist once per process: the reserved region that every program's
 * librpal carves its slot from, the per-program counters, and the signal handlers that make a
 * borrowed receiver safe to run on a sender's thread:
 *  - SIGSYS (Syscall User Dispatch): a syscall made by the receiver while borrowed.  The frame on
 *    the receiver's stack captures it; the handler jumps back to the sender's call point, and the
 *    sender hands the receiver (and that frame) to the receiver's own thread, which makes the
 *    syscall (librpal call.c, hosted_lazy_resume).  A syscall that one of the sender's signal
 *    handlers makes through the sender's libc does not trap: Syscall User Dispatch lets that libc
 *    through on the sender's threads.  One made from the rest of the sender's code is made here,
 *    as the sender's (run_for_sender).
 *  - SIGSEGV, SIGBUS, SIGFPE, SIGILL: a fault in the receiver while borrowed.  The receiving program
 *    is marked failed and the sender's call returns an error.  Outside calls the signal does what
 *    it would have done without us (the previous handler, or the default action).
 * The handlers run with the receiver's fs base: no TLS, no libc calls that could use it.  They
 * find the sender's record through the gs base, which librpal points at it.
 *
 * A thread of the launcher also hands receivers' kick eventfds to programs that the kernel no
 * longer lets take them with pidfd_getfd (kick_serve). */
#include "hosted.h"
#include "rpal_host.h"
#include "sigchain.h"   /* src/: librpal's, shared */
#include "wire.h"       /* src/: the bytes of slots.lock */

#include <cpuid.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif
#ifndef SYS_USER_DISPATCH
#define SYS_USER_DISPATCH 2
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static struct rpal_host *the_host;
static pid_t launcher_pid; /* the process that created the host block */
static int kick_sock = -1; /* kick_serve's socket */
static const int fault_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL };
static struct sigaction old_fault[4], old_sys;

/* This thread's sender record while one of its calls is under way (NULL otherwise), and the
 * thread's fs base: the receiver's while the receiver runs, the sender's own where the call is
 * entered or left. */
static struct rpal_host_sender *calling_sender(uintptr_t *fs) {
    if (!the_host || !the_host->fsgsbase) return NULL;
    struct rpal_host_sender *s = (struct rpal_host_sender *)rpal_rdgsbase();
    __asm__ __volatile__("rdfsbase %0" : "=r"(*fs));
    return s && s->magic == RPAL_SENDER_MAGIC && s->cur ? s : NULL;
}

/* The sender running a borrowed receiver on this thread, or NULL. */
static struct rpal_host_sender *current_call(void) {
    uintptr_t fs;
    struct rpal_host_sender *s = calling_sender(&fs);
    return rpal_sender_in_call(s, fs) ? s : NULL;
}

/* Hand a signal that is not ours on as if the launcher had never installed a handler: to the
 * disposition the process had before hosted_host_create (a sanitizer's handler, SIG_IGN inherited
 * across exec, usually SIG_DFL; the programs' own handlers come later and replace ours).  The same
 * code as librpal's fault handler uses (src/sigchain.h): TLS-free, as it may run with a
 * receiver's fs base (a SIGSYS that Syscall User Dispatch did not raise, during a call). */
static void chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc) {
    sig_chain(old, sig, si, uc);
}

/* Each program's code (hosted_host_set_code), written before its process starts. */
#define CODE_RANGES 128
static struct {
    uintptr_t lo[CODE_RANGES], hi[CODE_RANGES];
    _Atomic int n;
} prog_code[RPAL_HOST_MAX_PROGS];

void hosted_host_set_code(struct rpal_host *h, int prog, hosted_prog *p) {
    if (prog < 0 || prog >= RPAL_HOST_MAX_PROGS) return;
    atomic_store(&prog_code[prog].n, 0);
    atomic_store(&prog_code[prog].n, hosted_code_ranges(p, prog_code[prog].lo, prog_code[prog].hi, CODE_RANGES));
    uintptr_t lo, hi;
    int libc = hosted_libc_code(p, &lo, &hi);
    h->progs[prog].sud_start = libc ? lo : 0;
    h->progs[prog].sud_len = libc ? hi - lo : 0;
}

/* Is ip in the code of the sender's own program?  Then the system call that trapped there was made
 * by a signal handler of that program, which the kernel ran on this thread during the call. */
static int senders_code(const struct rpal_host_sender *s, uintptr_t ip) {
    if (s->prog >= RPAL_HOST_MAX_PROGS) return 0;
    int n = atomic_load(&prog_code[s->prog].n);
    for (int k = 0; k < n; k++)
        if (ip >= prog_code[s->prog].lo[k] && ip < prog_code[s->prog].hi[k]) return 1;
    return 0;
}

static long raw6(long nr, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The x86-64 kernel's signal frame: the FPU/xsave area's software bytes, where the kernel says how
 * much of it the frame holds. */
struct fpx_sw {
    uint32_t magic1, extended_size;
    uint64_t xfeatures;
    uint32_t xstate_size;
};
#ifndef FP_XSTATE_MAGIC1
#define FP_XSTATE_MAGIC1 0x46505853u
#endif
#define FPX_SW_OFFSET 464

/* The frame's FPU state size, or 0 where it has none or is not what the kernel writes. */
static size_t fp_size(const void *fp) {
    if (!fp) return 0;
    const struct fpx_sw *sw = (const struct fpx_sw *)((const char *)fp + FPX_SW_OFFSET);
    return sw->magic1 == FP_XSTATE_MAGIC1 ? sw->extended_size : 512;
}

/*
 * A system call of the sender's own signal handler, which the kernel ran on this thread in the
 * middle of a call (the sender's process handles its signals, on whichever of its threads), made
 * outside the sender's libc (whose system calls do not trap), or anywhere in a sender whose libc
 * has no range of its own (rpal_host_prog.sud_len 0).  It
 * is the sender's, made on the sender's thread: run it here, as the sender, and go back to the
 * handler with the call's system calls still blocked, so that those of the receiver, once the
 * handler has returned, are still handed to its own thread.  The handler's return (its
 * rt_sigreturn) is done here too: this frame takes the state the handler's frame saved, and the
 * return from this handler restores it.  0 where the call is left to the caller (a frame of
 * another size).
 */
static int run_for_sender(struct rpal_host_sender *s, siginfo_t *si, ucontext_t *uc) {
    greg_t *g = uc->uc_mcontext.gregs;
    if (si->si_syscall == SYS_rt_sigreturn) {
        /* The handler returned into its restorer, which pops nothing: its frame's ucontext is at
         * the stack pointer. */
        ucontext_t *h = (ucontext_t *)(uintptr_t)g[REG_RSP];
        size_t ours = fp_size(uc->uc_mcontext.fpregs), theirs = fp_size(h->uc_mcontext.fpregs);
        if (ours != theirs) return 0;
        if (ours) memcpy(uc->uc_mcontext.fpregs, h->uc_mcontext.fpregs, ours);
        memcpy(g, h->uc_mcontext.gregs, sizeof uc->uc_mcontext.gregs);
        memcpy(&uc->uc_sigmask, &h->uc_sigmask, 8); /* the kernel's sigset */
        uc->uc_stack = h->uc_stack;
        s->selector = SUD_BLOCK;
        return 1;
    }
    long r;
    if (si->si_syscall == SYS_rt_sigprocmask) {
        /* This frame's mask is the handler's, restored as this handler returns. */
        uint64_t *mask = (uint64_t *)&uc->uc_sigmask, set = 0;
        int how = (int)g[REG_RDI];
        r = g[REG_R10] != 8 ? -EINVAL : 0;
        if (!r && g[REG_RSI]) {
            set = *(const uint64_t *)(uintptr_t)g[REG_RSI];
            /* Nor SIGSYS: the handler's next system call in the call would then end its process
             * (the kernel takes a blocked Syscall User Dispatch signal to its default action). */
            set &= ~((1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)) | (1ull << (SIGSYS - 1)));
            if (how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK) r = -EINVAL;
        }
        if (!r && g[REG_RDX]) *(uint64_t *)(uintptr_t)g[REG_RDX] = *mask;
        if (!r && g[REG_RSI])
            *mask = how == SIG_BLOCK ? *mask | set : how == SIG_UNBLOCK ? *mask & ~set : set;
    } else {
        r = raw6(si->si_syscall, g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]);
    }
    g[REG_RAX] = r;
    s->selector = SUD_BLOCK;
    return 1;
}

static void on_sigsys(int sig, siginfo_t *si, void *ucv) {
    uintptr_t fs;
    struct rpal_host_sender *e = calling_sender(&fs), *s = rpal_sender_in_call(e, fs) ? e : NULL;
    ucontext_t *uc = ucv;
    /* A call being entered or left: the selector says BLOCK from just before the switch to the
     * receiver until just after the switch back, while the fs base is still, or again, the
     * sender's own.  A system call that a signal handler of the sender makes there outside its
     * libc traps too. */
    if (!s && e && e->owner_fs == fs && si->si_code == SYS_USER_DISPATCH &&
        senders_code(e, (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 2)) {
        /* Not ours to chain: the old disposition's own system calls would trap again, without
         * end.  The call goes on with its system calls blocked, as it would have. */
        e->selector = SUD_ALLOW;
        if (run_for_sender(e, si, uc)) return;
        uc->uc_mcontext.gregs[REG_RIP] -= 2; /* let it through, and the rest of the call's */
        return;
    }
    if (!s || si->si_code != SYS_USER_DISPATCH) {
        /* Not a syscall of a borrowed receiver (seccomp's SIGSYS, a kill()).  During a call, let
         * the rest of the call's syscalls through, chain()'s and the old handler's first, as
         * for a handler of code we do not know that returns during a call (below). */
        if (s) s->selector = SUD_ALLOW;
        chain(&old_sys, sig, si, ucv);
        return;
    }
    s->selector = SUD_ALLOW;
    if (senders_code(s, (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 2) && run_for_sender(s, si, uc)) return;
    uc->uc_mcontext.gregs[REG_RIP] -= 2; /* re-execute the syscall (rax is its number again) */
    if (si->si_syscall == SYS_rt_sigreturn) {
        /* A signal handler returned during the call through a restorer outside the sender's
         * known code: let it through here, on this thread; the rest of the call's syscalls are
         * let through too. */
        return;
    }
    struct rpal_host_rcv *r = s->cur;
    memcpy(&uc->uc_sigmask, &r->sigmask, sizeof r->sigmask); /* 8 bytes: the kernel's sigset */
    uc->uc_stack = r->altstack;
    r->uc = uc;
    r->trapped = 1;
    hosted_ctx_jump_wrfs((hosted_ctx *)&s->ctx);
}

/* Async-signal-safe: "rpal: NAME (pid P): signal N at pc 0x... (address 0x...), outside any RPAL
 * call: its process ends" ("in its own signal handler during an RPAL call" for in_handler), or,
 * in the launcher's own process (where the constructors of a loading
 * program's libraries run), that the launcher faulted.  The same handler runs under rpal run and
 * rpal host, and a joined program's stderr is its joiner's: the line names neither command. */
static void report_fault(int sig, const siginfo_t *si, const ucontext_t *uc, int in_handler) {
    char buf[320], *p = buf;
    pid_t pid = getpid();
    const char *name = NULL;
    for (unsigned k = 0; the_host && pid != launcher_pid && k < the_host->nprogs && k < RPAL_HOST_MAX_PROGS; k++)
        if (atomic_load(&the_host->progs[k].pid) == pid) name = the_host->progs[k].name;
    char num[4][20];
    uint64_t vals[4] = { (uint64_t)pid, (uint64_t)sig, (uint64_t)uc->uc_mcontext.gregs[REG_RIP],
                         (uint64_t)(uintptr_t)si->si_addr };
    for (int k = 0; k < 4; k++) {
        char *q = num[k] + sizeof num[k];
        unsigned base = k < 2 ? 10 : 16;
        *--q = 0;
        do *--q = "0123456789abcdef"[vals[k] % base]; while ((vals[k] /= base) && q > num[k]);
        vals[k] = (uint64_t)(uintptr_t)q;
    }
#define S(k) ((const char *)(uintptr_t)vals[k])
    const char *launcher[] = { "rpal: signal ", S(1), " at pc 0x", S(2), " (address 0x", S(3),
                               ") in the launcher itself (pid ", S(0), "; the constructors of a "
                               "program's libraries run there while it loads): it ends, and every "
                               "program with it\n" };
    const char *prog[] = { "rpal: ", name ? name : "a program", " (pid ", S(0), "): signal ", S(1),
                           " at pc 0x", S(2), " (address 0x", S(3),
                           in_handler ? "), in its own signal handler during an RPAL call: its process ends\n"
                                      : "), outside any RPAL call: its process ends\n" };
#undef S
    const char **parts = pid == launcher_pid ? launcher : prog;
    size_t nparts = pid == launcher_pid ? sizeof launcher / sizeof *launcher : sizeof prog / sizeof *prog;
    for (size_t k = 0; k < nparts; k++)
        for (const char *c = parts[k]; *c && p < buf + sizeof buf - 1; c++) *p++ = *c;
    if (p == buf + sizeof buf - 1) *p++ = '\n';
    ssize_t w = write(2, buf, (size_t)(p - buf));
    (void)w;
}

/* RPAL_DEBUG_FAULT, for debugging only (stdio and dladdr are not async-signal-safe): the function
 * of the faulting pc, and every library address among the 400 words above the stack pointer. */
static void debug_fault(const ucontext_t *uc) {
    Dl_info di;
    void *pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
    if (dladdr(pc, &di))
        fprintf(stderr, "  in %s (%s+%#lx)\n", di.dli_fname, di.dli_sname ? di.dli_sname : "?",
                (unsigned long)((char *)pc - (char *)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)));
    uint64_t *fp = (uint64_t *)uc->uc_mcontext.gregs[REG_RSP];
    for (int k = 0; k < 400; k++) {
        if (dladdr((void *)fp[k], &di) && di.dli_fname && strstr(di.dli_fname, "lib"))
            fprintf(stderr, "  stack %s %s+%#lx\n", di.dli_fname, di.dli_sname ? di.dli_sname : "?",
                    (unsigned long)((char *)fp[k] - (char *)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)));
    }
}

static void on_fault(int sig, siginfo_t *si, void *ucv) {
    struct rpal_host_sender *s = current_call();
    int fault = sig_fault_is_synchronous(sig, si);
    ucontext_t *uc = ucv;
    /* A fault in the sender's own code during a call is one of its signal handlers': the sender's,
     * as after its fault outside calls (the receiver its thread ran is lost with it). */
    int senders = s && fault && senders_code(s, (uintptr_t)uc->uc_mcontext.gregs[REG_RIP]);
    if (!s || !fault || senders) {
        /* Not a fault of a borrowed receiver: a fault outside calls, or a signal sent with kill()
         * (during a call too: then let the rest of the call's syscalls through, chain()'s first). */
        if (s) s->selector = SUD_ALLOW;
        if (fault) {
            report_fault(sig, si, ucv, senders);
            if (getenv("RPAL_DEBUG_FAULT")) debug_fault(ucv);
        }
        for (unsigned i = 0; i < sizeof fault_sigs / sizeof fault_sigs[0]; i++)
            if (fault_sigs[i] == sig) chain(&old_fault[i], sig, si, ucv);
        return;
    }
    s->selector = SUD_ALLOW;
    struct rpal_host_rcv *r = s->cur;
    struct rpal_host_prog *p = &the_host->progs[r->prog];
    atomic_store(&p->fault_addr, (uint64_t)(uintptr_t)si->si_addr);
    atomic_store(&p->failed, sig);
    r->fault_sig = sig;
    hosted_ctx_jump_wrfs((hosted_ctx *)&s->ctx);
}

static long raw2(long nr, long a, long b) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return ret;
}

__attribute__((noreturn)) static int sleep_forever(void *arg) {
    (void)arg;
    for (;;) raw2(SYS_pause, 0, 0);
}

/* The descriptor taken is an eventfd of our own, made before the clone (so the child has it
 * too), as the kick fds that hosted mode takes are: not one of stdio, which the caller may have
 * closed, so that the answer is about pidfd_getfd only. */
int hosted_getfd_works(void) {
    static char stack[16384] __attribute__((aligned(16)));
    int efd = eventfd(0, EFD_CLOEXEC);
    if (efd < 0) return 0;
    pid_t c = clone(sleep_forever, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
    if (c < 0) {
        close(efd);
        return 0;
    }
    int ok = 0, pidfd = (int)syscall(SYS_pidfd_open, c, 0);
    if (pidfd >= 0) {
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, efd, 0);
        ok = fd >= 0;
        if (fd >= 0) close(fd);
        close(pidfd);
    }
    kill(c, SIGKILL);
    while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
        ;
    close(efd);
    return ok;
}

/* The program (index) whose process is pid and has not ended, or -1. */
static int prog_of_pid(struct rpal_host *h, pid_t pid) {
    unsigned n = __atomic_load_n(&h->nprogs, __ATOMIC_ACQUIRE);
    for (unsigned k = 0; pid > 0 && k < n && k < RPAL_HOST_MAX_PROGS; k++)
        if (atomic_load(&h->progs[k].pid) == pid && !atomic_load(&h->progs[k].ended)) return (int)k;
    return -1;
}

/* The kick eventfd of the receiver at addr, for program me: a receiver on the list of another
 * program (lists only grow, receivers are never freed).  A descriptor of ours, or -errno. */
static int kick_fd_for(struct rpal_host *h, int me, uint64_t addr) {
    unsigned n = __atomic_load_n(&h->nprogs, __ATOMIC_ACQUIRE);
    for (unsigned q = 0; q < n && q < RPAL_HOST_MAX_PROGS; q++) {
        unsigned steps = 0;
        if ((int)q == me) continue;
        /* Bounded: the list lies in memory every program can write. */
        for (struct rpal_host_rcv *r = atomic_load(&h->progs[q].rcvs); r && steps < 65536; r = r->next, steps++) {
            if ((uintptr_t)r != addr) continue;
            if (r->magic != RPAL_RCV_MAGIC || r->prog != q) return -EINVAL;
            return rpal_host_take_kick_fd(h, r);
        }
    }
    return -ENOENT;
}

/* The launcher's side of a program's kick fd request (rpal_host_kick_msg): one datagram in, at
 * most one out, never waiting on a program (a reply that finds the asker's queue full is
 * dropped; the asker gives up after its own timeout).  Descriptors sent to us are closed. */
static void *kick_serve(void *arg) {
    struct rpal_host *h = arg;
    int s = kick_sock;
    for (;;) {
        struct rpal_host_kick_msg m;
        struct sockaddr_un from;
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
            struct cmsghdr align;
        } cb;
        struct iovec iov = { &m, sizeof m };
        struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cb.buf, .msg_controllen = sizeof cb.buf };
        pid_t pid = 0;
        ssize_t n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ENOMEM || errno == ENOBUFS) continue;
            /* Unusable: askers then fail at once (ECONNREFUSED) instead of after their timeout. */
            h->kick_name[0] = 0;
            close(s);
            return NULL;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET) continue;
            if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
                struct ucred uc;
                memcpy(&uc, CMSG_DATA(c), sizeof uc);
                pid = uc.pid;
            } else if (c->cmsg_type == SCM_RIGHTS) {
                for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + k * sizeof fd, sizeof fd);
                    close(fd);
                }
            }
        }
        if (n != (ssize_t)sizeof m || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || m.magic != RPAL_KICK_MAGIC ||
            mh.msg_namelen <= offsetof(struct sockaddr_un, sun_path))
            continue;
        int me = prog_of_pid(h, pid);
        int fd = me < 0 ? -EPERM : kick_fd_for(h, me, m.rcv);
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } out;
        m.err = fd < 0 ? fd : 0;
        m.pad = 0;
        mh = (struct msghdr){ .msg_name = &from, .msg_namelen = mh.msg_namelen, .msg_iov = &iov, .msg_iovlen = 1 };
        if (fd >= 0) {
            mh.msg_control = out.buf;
            mh.msg_controllen = sizeof out.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof fd);
            memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        (void)!sendmsg(s, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (fd >= 0) close(fd);
    }
}

/* Bind h->kick_name and start kick_serve, with every signal blocked (they are the main
 * thread's business).  Without it h->kick_name stays empty: a program refused pidfd_getfd then
 * cannot kick. */
static void kick_serve_start(struct rpal_host *h) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int one = 1, len = snprintf(h->kick_name, sizeof h->kick_name, "rpal-kick-%d-%llx", (int)getpid(),
                                (unsigned long long)(uintptr_t)h);
    sigset_t all, old;
    pthread_t t;
    memcpy(a.sun_path + 1, h->kick_name, (size_t)len);
    kick_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (kick_sock < 0 || setsockopt(kick_sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0 ||
        bind(kick_sock, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0)
        goto fail;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t, NULL, kick_serve, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        pthread_detach(t);
        return;
    }
fail:
    if (kick_sock >= 0) close(kick_sock);
    kick_sock = -1;
    h->kick_name[0] = 0;
}

/* 1 if Syscall User Dispatch can be armed on this kernel. */
static int sud_works(void) {
    static volatile unsigned char sel = 0;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, 0, 0, &sel) < 0) return 0;
    prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
    return 1;
}

struct rpal_host *hosted_host_create(uint64_t region_base, uint64_t slot_size, uint32_t nr_slots,
                                     char *err, size_t errlen) {
    size_t size = (size_t)slot_size * nr_slots;
    struct rpal_host *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    void *p = mmap((void *)(uintptr_t)region_base, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || (uintptr_t)p != region_base) {
        /* ENOMEM is RLIMIT_AS (or the kernel's map count), not another mapping in the way. */
        struct rlimit as;
        if (p == MAP_FAILED && errno == ENOMEM && getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
            snprintf(err, errlen, "cannot reserve the rpal region (%zu bytes at %#llx): RLIMIT_AS (ulimit -v) "
                     "is %llu KiB; raise it (ulimit -v unlimited)", size, (unsigned long long)region_base,
                     (unsigned long long)(as.rlim_cur / 1024));
        else
            snprintf(err, errlen, "cannot reserve the rpal region (%zu bytes at %#llx): %s; set RPAL_REGION_BASE",
                     size, (unsigned long long)region_base, p == MAP_FAILED ? strerror(errno) : "taken");
        if (p != MAP_FAILED) munmap(p, size);
        free(h);
        return NULL;
    }
    madvise(p, size, MADV_DONTFORK);
    h->magic = RPAL_HOST_MAGIC;
    h->version = RPAL_HOST_VERSION;
    h->size = sizeof *h;
    h->region_base = region_base;
    h->slot_size = slot_size;
    h->nr_slots = nr_slots;
    h->fsgsbase = hosted_have_fsgsbase();
    unsigned a, b, c, d;
    h->pku = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 4)); /* OSPKE */
    h->sud_start = (uintptr_t)hosted_sud_allowed_start;
    h->sud_len = (uintptr_t)(hosted_sud_allowed_end - hosted_sud_allowed_start);
    h->getfd = hosted_getfd_works();
    for (int i = 0; i < RPAL_HOST_MAX_PROGS; i++) atomic_store(&h->progs[i].slot, -1);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    /* SA_NODEFER: the handlers leave by a jump, which must not leave the signal blocked.
     * SA_ONSTACK for faults only: a receiver that overflows its stack during a call fails the call
     * where the sender's thread has an alternate stack.  Never for SIGSYS: its frame must lie on
     * the receiver's stack, as the receiver's saved state that its own thread resumes. */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sa.sa_sigaction = on_fault;
    for (unsigned i = 0; i < sizeof fault_sigs / sizeof fault_sigs[0]; i++)
        sigaction(fault_sigs[i], &sa, &old_fault[i]);
    if (h->fsgsbase && sud_works() && sigaction(SIGSYS, NULL, &old_sys) == 0) {
        /* Our own restorer, in the code Syscall User Dispatch lets through where a program has
         * no range of its own: the handler returns during a call with the call's system calls
         * blocked (run_for_sender).  A program's process returns through its libc instead
         * (loader.c, find_libc_sigreturn), which is that program's range. */
        struct {
            uintptr_t handler;
            unsigned long flags;
            uintptr_t restorer;
            uint64_t mask;
        } ka = { (uintptr_t)on_sigsys, SA_SIGINFO | SA_NODEFER | 0x04000000 /* SA_RESTORER */,
                 (uintptr_t)hosted_sigsys_restorer, 0 };
        if (syscall(SYS_rt_sigaction, SIGSYS, &ka, NULL, 8) == 0) h->sud = 1;
    }
    launcher_pid = getpid();
    the_host = h;
    if (h->getfd) kick_serve_start(h);
    return h;
}

int hosted_host_add(struct rpal_host *h, const char *name) {
    if (h->nprogs >= RPAL_HOST_MAX_PROGS) return -1;
    int i = (int)h->nprogs++;
    /* A path longer than the entry keeps its end, with its file's name, which is what the fault
     * line and rpal_host_programs are read for: "..." and the last bytes, from a character's
     * start (the name is often UTF-8). */
    size_t len = strlen(name), room = sizeof h->progs[i].name - 1;
    if (len > room) {
        const char *tail = name + len - (room - 3);
        while ((*tail & 0xc0) == 0x80) tail++;
        snprintf(h->progs[i].name, sizeof h->progs[i].name, "...%s", tail);
    } else {
        snprintf(h->progs[i].name, sizeof h->progs[i].name, "%s", name);
    }
    return i;
}

int hosted_host_unadd(struct rpal_host *h, int prog) {
    if (prog < 0 || prog != (int)h->nprogs - 1) return -1;
    struct rpal_host_prog *p = &h->progs[prog];
    /* A library constructor of a program that failed after dlmopen may have registered here: then
     * the entry stays taken (a later program must not inherit its receivers). */
    if (atomic_load(&p->rcvs) || atomic_load(&p->senders) || atomic_load(&p->slot) != -1 ||
        atomic_load(&p->stat))
        return -1;
    p->name[0] = 0;
    atomic_store(&p->pid, 0);
    h->nprogs--;
    return 0;
}

char **hosted_host_environ(struct rpal_host *h, int prog, char *const *base) {
    if (!base) base = hosted_clean_environ();
    size_t n = 0;
    while (base[n]) n++;
    char **v = calloc(n + 2, sizeof *v);
    char *mine = malloc(128);
    if (!v || !mine) {
        free(v);
        free(mine);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(base[i], RPAL_HOST_ENV "=", sizeof RPAL_HOST_ENV)) v[k++] = (char *)base[i];
    snprintf(mine, 128, "%s=%d:%llx:%d", RPAL_HOST_ENV, (int)getpid(),
             (unsigned long long)(uintptr_t)h, prog);
    v[k++] = mine;
    v[k] = NULL;
    return v;
}

/* Wake r's own thread from the launcher: its kick eventfd is a descriptor of its program. */
static void kick_from_launcher(struct rpal_host *h, struct rpal_host_rcv *r) {
    int fd = rpal_host_take_kick_fd(h, r);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(fd, &one, sizeof one);
        (void)w;
        close(fd);
    }
}

/* Move r to RCV_DEAD; returns its state before. */
static uint32_t rcv_kill(struct rpal_host_rcv *r) {
    uint32_t st = atomic_load(&r->state);
    while ((st & RCV_MASK) != RCV_DEAD && !atomic_compare_exchange_weak(&r->state, &st, RCV_DEAD))
        ;
    return st;
}

/* One byte of slots.lock, without waiting: 0 taken, -1 if not. */
static int lock_byte(int fd, short type, off_t byte) {
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* A peer's arena as /proc/self/maps shows it: read-only and shared, of an rpal-arena memfd. */
static int peer_arena_line(const char *line, unsigned long *lo, unsigned long *hi) {
    char perms[8], path[256] = "";
    return sscanf(line, "%lx-%lx %7s %*x %*x:%*x %*u %255s", lo, hi, perms, path) == 4 && !strcmp(perms, "r--s") &&
           strstr(path, "rpal-arena") != NULL;
}

/* The length of the peer's arena mapped at base, else 0. */
static size_t peer_arena_at(uintptr_t base) {
    char line[512];
    unsigned long lo, hi;
    size_t len = 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (peer_arena_line(line, &lo, &hi) && lo == base) {
            len = hi - lo;
            break;
        }
    fclose(f);
    return len;
}

/* Put the reservation back over a peer's arena at base, if nobody may read it: its slot whole for
 * a moment, no owner (it has gone, and nobody claims the slot meanwhile), no program deciding what
 * to map there (the map guard), no reader (the mapped byte).  What is there is looked at again
 * under those locks.  1 if unmapped. */
static int unmap_if_unread(int fd, uint32_t slot, uintptr_t base) {
    int done = 0;
    size_t len;
    if (lock_byte(fd, F_WRLCK, slot) < 0) return 0;
    if (lock_byte(fd, F_WRLCK, RPAL_SLOT_MAP_GUARD + slot) == 0) {
        if (lock_byte(fd, F_WRLCK, RPAL_SLOT_MAPPED_LOCK + slot) == 0 && (len = peer_arena_at(base))) {
            void *p = mmap((void *)base, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            if (p != MAP_FAILED) {
                madvise(p, len, MADV_DONTFORK);
                done = 1;
            }
        }
        lock_byte(fd, F_UNLCK, RPAL_SLOT_MAPPED_LOCK + slot);
        lock_byte(fd, F_UNLCK, RPAL_SLOT_MAP_GUARD + slot);
    }
    lock_byte(fd, F_UNLCK, slot);
    return done;
}

int hosted_host_unmap_unread(struct rpal_host *h, const char *rundir, int now) {
    static uint64_t next;
    char path[PATH_MAX], line[512];
    unsigned long lo, hi;
    int fd, n = 0;
    FILE *f;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (!now && t < next) return 0;
    next = t + HOSTED_UNREAD_SWEEP_MS * 1000000ull;
    if (snprintf(path, sizeof path, "%s/slots.lock", rundir) >= (int)sizeof path) return 0;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    f = fopen("/proc/self/maps", "re");
    /* The kernel goes on from the last address it showed: what unmap_if_unread() changes
     * behind us does not derail this pass. */
    while (f && fgets(line, sizeof line, f)) {
        if (!peer_arena_line(line, &lo, &hi) || lo < h->region_base || (lo - h->region_base) % h->slot_size)
            continue;
        uint64_t slot = (lo - h->region_base) / h->slot_size;
        if (slot < h->nr_slots) n += unmap_if_unread(fd, (uint32_t)slot, lo);
    }
    if (f) fclose(f);
    close(fd);
    return n;
}

int hosted_host_ended(struct rpal_host *h, int prog) {
    int lost = 0;
    if (prog < 0 || prog >= (int)h->nprogs) return 0;
    struct rpal_host_prog *p = &h->progs[prog];
    atomic_store(&p->ended, 1);
    /* Its receivers take no more calls (a caller still running one finishes it: the memory stays). */
    for (struct rpal_host_rcv *r = atomic_load(&p->rcvs); r; r = r->next) rcv_kill(r);
    /* A receiver of another program that one of its threads was running is lost with that thread:
     * its state lived there.  Its program fails, as after a fault in a call, and its own thread
     * hangs up its connections and ends it. */
    for (unsigned q = 0; q < h->nprogs; q++) {
        if ((int)q == prog || atomic_load(&h->progs[q].ended)) continue;
        for (struct rpal_host_rcv *r = atomic_load(&h->progs[q].rcvs); r; r = r->next) {
            struct rpal_host_sender *s = r->sender;
            if ((atomic_load(&r->state) & RCV_MASK) != RCV_BORROWED || !s || s->prog != (uint32_t)prog)
                continue;
            int zero = 0;
            atomic_compare_exchange_strong(&h->progs[q].failed, &zero, SIGKILL);
            rcv_kill(r);
            kick_from_launcher(h, r);
            lost++;
        }
    }
    return lost;
}

int hosted_host_execd(struct rpal_host *h, int prog, int pid) {
    char path[64], exe[16];
    if (prog < 0 || prog >= (int)h->nprogs || pid <= 0 || atomic_load(&h->progs[prog].ended)) return -1;
    /* 0: the same memory; < 0: it cannot be told (no CONFIG_KCMP), which its reap settles. */
    if (syscall(SYS_kcmp, (long)getpid(), (long)pid, KCMP_VM, 0L, 0L) <= 0) return -1;
    /* A process that is ending has let its memory go, and a zombie has none (ENOENT): no exec,
     * its reap says how it ended.  A new image has an executable, if maybe not one we may read. */
    snprintf(path, sizeof path, "/proc/%d/exe", pid);
    if (readlink(path, exe, sizeof exe) < 0 && errno == ENOENT) return -1;
    return hosted_host_ended(h, prog);
}

int hosted_host_calls_in_flight(struct rpal_host *h) {
    for (unsigned q = 0; q < h->nprogs; q++)
        for (struct rpal_host_rcv *r = atomic_load(&h->progs[q].rcvs); r; r = r->next)
            if (r->sender) return 1;
    return 0;
}
