/* SPDX-License-Identifier: MIT */
/*
 * safety.c - recovery points: rpal_access_safely(fn, arg) runs fn and turns
 * a SIGSEGV or SIGBUS raised by fn into -EFAULT (the RPAL RFC's
 * rpal_read_access_safety).
 *
 * How it works.  Each call pushes a frame (a sigjmp_buf and a link to the
 * enclosing frame) on a per-thread list, runs fn, and pops the frame.  One
 * process-wide handler for SIGSEGV and SIGBUS, installed once
 * (pthread_once), looks at the faulting thread's list: if the thread is
 * inside a window and the fault came from the kernel (a real memory fault,
 * not a kill()), it restores the signal mask of the faulting context and
 * jumps back into rpal_access_safely, which returns -EFAULT.  Otherwise it
 * passes the signal on exactly as if rpal had never installed anything: to
 * the handler installed before ours, or, for SIG_DFL (and SIG_IGN, which
 * the kernel overrides for a real fault), by restoring SIG_DFL and
 * re-raising, so that the process dies of the same signal and dumps core
 * where it would have.
 *
 * Async-signal-safety.  The handler touches only:
 *  - the thread-local frame pointer, declared with the initial-exec TLS
 *    model: its storage is allocated with the thread (static TLS), so the
 *    access is a %fs-relative load and never calls __tls_get_addr, which
 *    may allocate memory on first use of a dynamic TLS block (a librpal
 *    loaded with dlopen takes the few bytes from glibc's static TLS
 *    surplus);
 *  - plain stores into the frame, which lives in the faulting thread's own
 *    stack, below no other handler (one thread, one signal at a time: the
 *    signal is blocked while its handler runs);
 *  - old_act[], written once under pthread_once before the handler is
 *    installed, and only read afterwards;
 *  - sigaction, raise, siglongjmp and sigprocmask, which POSIX lists as
 *    async-signal-safe (pthread_sigmask is glibc's one rt_sigprocmask
 *    system call for this thread, just as safe; siglongjmp out of a handler that
 *    interrupted fn is safe because fn is the code the caller vouched for:
 *    if fn held a lock or was inside malloc when it faulted, that state is
 *    abandoned, which the documentation forbids).
 * The detail for rpal_strerror is formatted after the jump, in ordinary
 * context, from the fault address and code the handler stored.
 *
 * The signal mask.  sigsetjmp(..., 0) does not save the mask, which keeps
 * the fast path free of system calls.  On a fault the kernel blocks the
 * signal (and our sa_mask) while the handler runs; the handler restores
 * the mask of the interrupted context (uc_sigmask) before it jumps, so the
 * caller continues with the mask it had when fn faulted (the one it called
 * with, unless fn changed it).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

#include "internal.h"
#include "sigchain.h"

struct rpal_recovery {
	sigjmp_buf jb;
	struct rpal_recovery *prev;   /* the enclosing window, if nested */
	volatile int signo;           /* filled in by the handler */
	volatile int code;
	void *volatile addr;
};

/* The innermost open window of this thread, NULL outside any. */
static __thread struct rpal_recovery *volatile cur_window
	__attribute__((tls_model("initial-exec")));

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_err;                       /* -errno if sigaction failed */
static struct sigaction old_act[2];           /* [0] SIGSEGV, [1] SIGBUS */

static inline int sig_index(int sig) { return sig == SIGBUS; }

/* Hand a signal that is not ours to what was there before (sigchain.h). */
static void chain(int sig, siginfo_t *si, void *uc)
{
	sig_chain(&old_act[sig_index(sig)], sig, si, uc);
}

static void fault_handler(int sig, siginfo_t *si, void *ucv)
{
	struct rpal_recovery *w = cur_window;
	ucontext_t *uc = ucv;
	int saved_errno = errno;

	/* Before any system call: inside an RPAL call (hosted mode) one that
	 * Syscall User Dispatch does not let through would be handed to the
	 * receiver's own thread (local.h). */
	call_signal_allow_syscalls();
	if (w && sig_fault_is_synchronous(sig, si)) {
		w->signo = sig;
		w->code = si->si_code;
		w->addr = si->si_addr;
		/* Pop the window before jumping, so that a fault between here
		 * and the caller's own pop is not recovered twice. */
		cur_window = w->prev;
		/* Back to the mask of the interrupted context: sig itself, and
		 * what sa_mask added, are unblocked again. */
		if (uc)
			pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
		siglongjmp(w->jb, 1);
	}
	chain(sig, si, ucv);
	errno = saved_errno;
}

static void install(void)
{
	struct sigaction sa;
	static const int sigs[2] = { SIGSEGV, SIGBUS };

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fault_handler;
	/* SA_ONSTACK: a thread with an alternate stack (say, to survive a
	 * stack overflow) keeps using it; without one the flag does nothing.
	 * No SA_RESTART: synchronous faults interrupt no system call. */
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 2; i++) {
		/* Fetch the old disposition first, then install: old_act must
		 * be complete before our handler can run. */
		if (sigaction(sigs[i], NULL, &old_act[i]) != 0 ||
		    sigaction(sigs[i], &sa, NULL) != 0) {
			install_err = -errno;
			return;
		}
	}
}

static const char *code_name(int sig, int code)
{
	if (sig == SIGSEGV) {
		switch (code) {
		case SEGV_MAPERR: return "address not mapped";
		case SEGV_ACCERR: return "access not permitted";
		case SEGV_PKUERR: return "protection key denies access: outside a window";
		default: return "invalid access";
		}
	}
	switch (code) {
	case BUS_ADRALN: return "misaligned address";
	case BUS_ADRERR: return "address beyond the object";
	default: return "bus error";
	}
}

RPAL_EXPORT int rpal_access_safely(int (*fn)(void *arg), void *arg)
{
	struct rpal_recovery w;
	uint64_t keys;

	if (!fn)
		return rpal_fail(EINVAL, "rpal_access_safely: fn is NULL");
	pthread_once(&install_once, install);
	if (unlikely(install_err))
		return rpal_fail(-install_err, "rpal_access_safely: cannot install the fault handler");

	w.prev = cur_window;
	w.signo = 0;
	/* protect_peers: fn may read every peer.  Set before sigsetjmp and
	 * never changed after, so it is intact after the jump too. */
	keys = mpk_all_begin();
	/* Savemask 0: no system call on the fast path; the handler restores
	 * the mask itself (see the top of the file). */
	if (sigsetjmp(w.jb, 0) == 0) {
		int ret;

		cur_window = &w;
		atomic_signal_fence(memory_order_seq_cst);
		ret = fn(arg);
		atomic_signal_fence(memory_order_seq_cst);
		cur_window = w.prev;
		mpk_all_end(keys);
		return ret;
	}
	/* Back from the handler, which ran with the kernel's default PKRU
	 * and left it so: put the caller's back. */
	mpk_all_end(keys);
	/* The handler already popped the window.  w was not
	 * modified between sigsetjmp and the jump except by the handler
	 * (through memory), so reading it here is well defined. */
	return rpal_fail(EFAULT, "rpal_access_safely: %s at %p (%s) inside fn",
			 w.signo == SIGBUS ? "SIGBUS" : "SIGSEGV", w.addr,
			 code_name(w.signo, w.code));
}
