/* SPDX-License-Identifier: MIT */
/*
 * rpal_host.h - what a hosted-mode launcher shares with every copy of librpal
 * in its process.  Private to librpal and the launcher.
 *
 * Under `rpal run` (or `rpal host`) each program lives in its own linker
 * namespace with its own copy of librpal, and is its own process sharing the
 * launcher's address space.  The copies find the launcher's struct rpal_host
 * through the environment variable RPAL_HOST ("<launcher pid>:<address>:
 * <program index>"); only a child of the launcher trusts the address, so a
 * program's own forked or exec'd children do not.  Each program has its own
 * descriptor table: a descriptor number means something only in the program
 * that owns it (a receiver's kick eventfd is fetched with pidfd_getfd, or,
 * where the kernel refuses that, asked of the launcher: rpal_host_kick_msg).
 *
 * The RPAL call.  A receiver that waits in rpal_epoll_wait() with nothing
 * pending parks its context in its struct rpal_host_rcv and its own thread
 * goes to an idle loop on a private stack.  A sender whose peer is in the same
 * process claims a parked receiver with one CAS (PARKED -> BORROWED) and
 * switches into it in user mode; when the receiver waits again with nothing
 * pending, it switches back.  Whoever regains control of a receiver publishes
 * PARKED, only after its registers are saved, so no receiver ever runs on two
 * threads at once.  Syscalls made by a borrowed receiver trap through Syscall
 * User Dispatch (the launcher's SIGSYS handler) and are handed back to the
 * receiver's own thread; faults in it end the call with an error.
 *
 * Every field here is read by code of several librpal copies and of the
 * launcher: change the layout only together with RPAL_HOST_VERSION.
 */
#ifndef RPAL_HOST_H
#define RPAL_HOST_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>

#define RPAL_HOST_MAGIC     0x54534f484c415052ull  /* "RPALHOST" */
#define RPAL_HOST_VERSION   8u
#define RPAL_HOST_ENV       "RPAL_HOST"
#define RPAL_HOST_MAX_PROGS 16
#define RPAL_RCV_MAGIC      0x56434c41504c5052ull  /* "RPLPALCV" */
#define RPAL_SENDER_MAGIC   0x444e45534c415052ull  /* "RPALSEND" */
#define RPAL_KICK_MAGIC     0x4b4349544c415052ull  /* "RPALTICK" */

/* A suspended context, as switch_x86_64.S lays it out (= hosted_ctx). */
struct rpal_host_ctx {
	void *sp;
	uintptr_t fs;
};

struct rpal_host_rcv;

/* Per program: written by librpal copies, read by anyone (rpal_hosted_stat). */
struct rpal_host_prog {
	/* Its receivers, newest first; each counts the calls into it (a
	 * receiver is never freed, so the list only grows). */
	struct rpal_host_rcv *_Atomic rcvs;
	_Atomic uint64_t handoffs;    /* syscalls in calls, handed to its own thread */
	_Atomic int32_t failed;       /* signal of a fault inside an RPAL call; 0 none */
	_Atomic int32_t slot;         /* its librpal's slot; -1 before rpal_init */
	_Atomic uint64_t fault_addr;
	_Atomic int32_t pid;          /* its process; 0 before it starts */
	_Atomic int32_t ended;        /* its process ended (set by the launcher as it reaps it) */
	/* Its threads that made calls (records are pooled, never freed), for calls_out. */
	struct rpal_host_sender *_Atomic senders;
	/* Its librpal's statistics page (struct rpal_stat_hdr), 0 without one:
	 * callers copy its call counters there now and then. */
	_Atomic uintptr_t stat;
	/* The code Syscall User Dispatch lets through on its threads: its libc's, so
	 * that its own signal handlers' system calls during a call run as usual; 0
	 * len: the launcher's (struct rpal_host). */
	uintptr_t sud_start, sud_len;
	char name[64];                /* its path, or "..." and the path's end (hosted_host_add) */
};

struct rpal_host {
	uint64_t magic;               /* RPAL_HOST_MAGIC */
	uint32_t version;             /* RPAL_HOST_VERSION */
	uint32_t size;                /* sizeof(struct rpal_host) */
	uint64_t region_base;         /* reserved by the launcher for all copies */
	uint64_t slot_size;
	uint32_t nr_slots;
	uint32_t nprogs;
	uint32_t fsgsbase;            /* user mode may write the fs/gs base */
	uint32_t sud;                 /* Syscall User Dispatch works; SIGSYS handler installed */
	uint32_t pku;                 /* PKRU exists (OSPKE): a call keeps the sender's */
	uint32_t getfd;               /* pidfd_getfd works: a sender can kick another program's receiver */
	uintptr_t sud_start, sud_len; /* code SUD lets through where a program has none of its own */
	/* The abstract Unix datagram socket (name without its leading NUL) where
	 * the launcher hands a receiver's kick eventfd to a program that may not
	 * take it itself; "" when it has none. */
	char kick_name[48];
	struct rpal_host_prog progs[RPAL_HOST_MAX_PROGS];
};

/* Receiver states (low bits of rpal_host_rcv.state) and flags. */
enum {
	RCV_OWNER    = 0,   /* its own thread has it (running, or about to park) */
	RCV_PARKED   = 1,   /* parked: a sender may claim it */
	RCV_BORROWED = 2,   /* running on a sender's thread */
	RCV_HANDOFF  = 3,   /* trapped on a syscall while borrowed: its thread resumes it */
	RCV_DEAD     = 4,   /* faulted inside a call: never runs again */
	RCV_MASK     = 7,
	RCV_PENDING  = 8,   /* a message came while it could not be claimed: rescan */
	RCV_WANT     = 16,  /* its own thread wants it back (descriptors, timeout, signal) */
};

/* Why a parked receiver resumed (rpal_host_rcv.reason). */
enum { RESUME_CALL = 0, RESUME_RESCAN = 1, RESUME_KERNEL = 2, RESUME_TIMEOUT = 3, RESUME_EINTR = 4 };

struct rpal_host_sender;

/* One per rpal epoll set that parks; in the receiving program's heap. */
struct rpal_host_rcv {
	uint64_t magic;               /* RPAL_RCV_MAGIC */
	_Atomic uint32_t state;       /* RCV_* | flags */
	uint32_t prog;                /* owner program index */
	struct rpal_host_ctx ctx;     /* the parked receiver (fs = its thread's TCB) */
	struct rpal_host_ctx idle;    /* its own thread's idle loop */
	struct rpal_host_sender *sender; /* borrower, NULL unless BORROWED */
	void *uc;                     /* ucontext of the SIGSYS frame of a hand-off */
	int32_t trapped;              /* set by the SIGSYS handler */
	int32_t fault_sig;            /* set by the fault handler */
	uint64_t sigmask;             /* its thread's signal mask (kernel sigset) */
	stack_t altstack;             /* its thread's sigaltstack */
	int32_t kick_fd;              /* eventfd its idle loop polls (a descriptor of prog) */
	int32_t reason;               /* RESUME_* */
	/* kick_fd as a descriptor of each program, -1 until that program first kicks. */
	_Atomic int32_t kick_fds[RPAL_HOST_MAX_PROGS];
	uint32_t writes_pkru;         /* its program uses protection keys (protect_peers) */
	/* Set by the sender before it switches in: this call is timed, so
	 * the receiver stamps run_tsc as it resumes (call.c's call_end). */
	uint32_t timed;
	uint64_t deadline_ns;         /* CLOCK_MONOTONIC; UINT64_MAX none */
	/* TSC when it last resumed from a park for a timed call, on whichever
	 * thread: the call's time runs from here to the sender's return. */
	uint64_t run_tsc;
	/* Set by the sender before it switches in: the receiver's cookie of the
	 * connection the call delivers on (rpal_block.hosted_cookie), 0 when
	 * it must look at every connection.  A hint: the receiver checks it. */
	uint64_t cookie;
	/* Accounting, written only by whoever holds the receiver (so with
	 * plain stores, before it gives the receiver up) and read by anyone. */
	_Atomic uint64_t calls;       /* RPAL calls into it */
	_Atomic uint64_t call_tsc;    /* TSC cycles it ran on other programs' threads (estimated
	                                 from one call in 16: call.c's call_timed) */
	struct rpal_host_rcv *next;   /* in its program's rcvs list; set before it is linked */
};

/* Calls into program p and the TSC cycles they ran, summed over its receivers. */
static inline void rpal_host_prog_calls(const struct rpal_host_prog *p, uint64_t *calls, uint64_t *tsc)
{
	const struct rpal_host_rcv *r;

	*calls = *tsc = 0;
	for (r = atomic_load_explicit(&p->rcvs, memory_order_acquire); r; r = r->next) {
		*calls += atomic_load_explicit(&r->calls, memory_order_relaxed);
		*tsc += atomic_load_explicit(&r->call_tsc, memory_order_relaxed);
	}
}

/*
 * A program that the kernel refuses pidfd_getfd (it changed its user id, so
 * it may no longer ptrace the others) asks the launcher, which may: one
 * datagram from a socket of its own to h->kick_name, { magic, rcv }.  The
 * launcher knows the asker by its credentials (SO_PASSCRED), checks that rcv
 * is a receiver of another program and that neither has ended, and answers
 * { magic, rcv, 0 } with the eventfd (SCM_RIGHTS), or { magic, rcv, -errno }.
 */
struct rpal_host_kick_msg {
	uint64_t magic;               /* RPAL_KICK_MAGIC */
	uint64_t rcv;                 /* the struct rpal_host_rcv's address */
	int32_t err;                  /* reply: 0 with the descriptor, else -errno */
	uint32_t pad;
};

/* One per thread that makes RPAL calls; found through the gs base. */
struct rpal_host_sender {
	uint64_t magic;               /* RPAL_SENDER_MAGIC */
	volatile uint8_t selector;    /* this thread's SUD selector byte */
	uint8_t sud;                  /* SUD armed on this thread */
	uintptr_t owner_fs;           /* its thread's TCB: a new thread inherits the gs base */
	struct rpal_host_ctx ctx;     /* where a call returns to */
	struct rpal_host_rcv *cur;    /* the receiver being run, NULL outside calls */
	struct rpal_host_sender *next_free; /* records are pooled, never freed: a thread
	                                     * that inherited a gs base may still read one */
	struct rpal_host_sender *next_all;  /* in its program's senders list */
	uint32_t prog;                /* its program */
	_Atomic uint64_t calls;       /* calls it made (plain stores by its thread) */
};

/* Calls program p made into others, summed over its threads. */
static inline uint64_t rpal_host_prog_calls_out(const struct rpal_host_prog *p)
{
	const struct rpal_host_sender *s;
	uint64_t n = 0;

	for (s = atomic_load_explicit(&p->senders, memory_order_acquire); s; s = s->next_all)
		n += atomic_load_explicit(&s->calls, memory_order_relaxed);
	return n;
}

/* Is this thread running s's call right now?  The gs base alone does not
 * say: a thread inherits its creator's.  During a call the fs base is the
 * receiver's, as saved in its context. */
static inline int rpal_sender_in_call(const struct rpal_host_sender *s, uintptr_t fs)
{
	return s && s->magic == RPAL_SENDER_MAGIC && s->cur && s->cur->ctx.fs == fs;
}

#define SUD_ALLOW 0
#define SUD_BLOCK 1

/* A system call without errno: code that may run on a borrower's thread
 * must not touch TLS. */
static inline long rpal_host_syscall(long nr, long a, long b, long c, long d)
{
	register long r10 __asm__("r10") = d;
	long ret;

	__asm__ __volatile__("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			     : "rcx", "r11", "memory");
	return ret;
}

/* Is fd (ours) an eventfd?  Only one is written to as a kick, so that a
 * stray write never lands elsewhere.  No TLS, no stdio. */
static inline int rpal_host_fd_is_eventfd(long fd)
{
	static const char want[] = "anon_inode:[eventfd]", dir[] = "/proc/self/fd/";
	char path[sizeof(dir) + 12], link[sizeof(want)], digits[12], *q = digits + sizeof(digits);
	unsigned v, n = 0;

	v = (unsigned)fd;
	do
		*--q = (char)('0' + v % 10);
	while ((v /= 10));
	__builtin_memcpy(path, dir, sizeof(dir) - 1);
	while (q < digits + sizeof(digits))
		path[sizeof(dir) - 1 + n++] = *q++;
	path[sizeof(dir) - 1 + n] = 0;
	return rpal_host_syscall(SYS_readlinkat, AT_FDCWD, (long)path, (long)link, sizeof(link)) ==
	       (long)sizeof(want) - 1 && !__builtin_memcmp(link, want, sizeof(want) - 1);
}

/*
 * r's kick eventfd as a descriptor of the calling process (each program has
 * its own descriptor table), or -errno: -ESRCH when its program has ended,
 * -EPERM where the kernel refuses us (we may not ptrace it).  The launcher
 * marks a program ended no later than it reaps it (after which its pid may
 * be reused): a pidfd opened while it is not yet marked is the program's own.
 * Only an eventfd is returned.  No TLS, no stdio.
 */
static inline int rpal_host_take_kick_fd(const struct rpal_host *h, const struct rpal_host_rcv *r)
{
	const struct rpal_host_prog *p = &h->progs[r->prog];
	long pidfd, fd;

	if (atomic_load(&p->ended))
		return -ESRCH;
	pidfd = rpal_host_syscall(SYS_pidfd_open, atomic_load(&p->pid), 0, 0, 0);
	if (pidfd < 0)
		return (int)pidfd;
	fd = atomic_load(&p->ended) ? -ESRCH : rpal_host_syscall(SYS_pidfd_getfd, pidfd, r->kick_fd, 0, 0);
	rpal_host_syscall(SYS_close, pidfd, 0, 0, 0);
	if (fd < 0)
		return (int)fd;
	if (!rpal_host_fd_is_eventfd(fd)) {
		rpal_host_syscall(SYS_close, fd, 0, 0, 0);
		return -EBADF;
	}
	return (int)fd;
}

static inline uintptr_t rpal_rdgsbase(void)
{
	uintptr_t v;
	__asm__ __volatile__("rdgsbase %0" : "=r"(v));
	return v;
}

static inline void rpal_wrgsbase(uintptr_t v)
{
	__asm__ __volatile__("wrgsbase %0" : : "r"(v) : "memory");
}

#endif /* RPAL_HOST_H */
