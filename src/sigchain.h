/* SPDX-License-Identifier: MIT */
/*
 * sigchain.h - hand a signal on to the disposition that was there before
 * ours, as if ours had never been installed.  Used by librpal's fault
 * handler (safety.c) and by the launcher's (hosted/host.c): one behaviour
 * for both, though one runs with the signal blocked and the other, whose
 * handlers leave by a jump, with SA_NODEFER.
 *
 * Async-signal-safe and free of TLS: the launcher's handler may run with a
 * hosted receiver's fs base, so the thread is named by gettid(), never by
 * glibc's raise().
 */
#ifndef RPAL_SIGCHAIN_H
#define RPAL_SIGCHAIN_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A fault raised by the kernel for this thread's own instruction (si_code
 * > 0), which it delivers even where the disposition is SIG_IGN; not a
 * kill(), tgkill() or sigqueue() (si_code <= 0), and not a machine-check
 * report about some other page. */
static inline bool sig_fault_is_synchronous(int sig, const siginfo_t *si)
{
	if (!si || si->si_code <= 0)
		return false;
#ifdef BUS_MCEERR_AO
	if (sig == SIGBUS && si->si_code == BUS_MCEERR_AO)
		return false;
#endif
	return true;
}

/*
 * Give sig to old.  A handler gets what the kernel would have given it on
 * entry: reset first if one-shot (SA_RESETHAND), its sa_mask blocked, sig
 * blocked unless it asked for SA_NODEFER (whether or not our handler ran
 * with sig blocked); our handler's return restores the interrupted mask.
 * SIG_IGN (a value of sa_handler whatever sa_flags says, SA_SIGINFO too)
 * drops a signal sent with kill(), not a fault.  SIG_DFL: the signal is
 * reset to the default, blocked and queued to this thread, so that it is
 * delivered as our handler returns, with the interrupted context's
 * registers (a core dump shows the faulting instruction).
 */
static inline void sig_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc)
{
	struct sigaction dfl;
	sigset_t set;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		if (old->sa_flags & SA_RESETHAND)
			sigaction(sig, &dfl, NULL);
		pthread_sigmask(SIG_BLOCK, &old->sa_mask, NULL);
		sigemptyset(&set);
		sigaddset(&set, sig);
		pthread_sigmask(old->sa_flags & SA_NODEFER ? SIG_UNBLOCK : SIG_BLOCK, &set, NULL);
		if (old->sa_flags & SA_SIGINFO)
			old->sa_sigaction(sig, si, uc);
		else
			old->sa_handler(sig);
		return;
	}
	if (old->sa_handler == SIG_IGN && !sig_fault_is_synchronous(sig, si))
		return;
	sigaction(sig, &dfl, NULL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	syscall(SYS_tgkill, (long)getpid(), syscall(SYS_gettid), (long)sig);
}

#endif /* RPAL_SIGCHAIN_H */
