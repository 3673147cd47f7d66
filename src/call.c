/* SPDX-License-Identifier: MIT */
/*
 * call.c - hosted mode: the RPAL call between programs that `rpal run` put in
 * one address space (protocol in hosted/rpal_host.h).
 *
 * Each hosted program has its own copy of this library and is its own process
 * in the launcher's address space.  A copy finds the launcher's struct
 * rpal_host through RPAL_HOST, uses the region the launcher reserved, and
 * treats a peer whose pid is another program of the block as local: its arena
 * is already mapped, and messages to it may be delivered by switching into it.
 *
 * Sender (notify_peer_rx -> call_deliver in local.h): after publishing in the ring as in
 * connected mode, claim the peer's parked receiver with one CAS and switch
 * into it; the ring stays the source of truth, so a receiver that cannot be
 * claimed just gets RCV_PENDING and rescans before it parks again.
 *
 * Receiver (rpal_epoll_wait -> epoll.c's park, call_park_own): with nothing
 * pending, save the context and switch to the borrower (which publishes
 * PARKED) or, on the own thread, to the idle loop, which publishes PARKED and
 * sleeps on the set's descriptors and a kick eventfd until a descriptor, a
 * timeout, a hand-off of a trapped syscall, or a fault needs it.
 *
 * Code that may run on a sender's thread with the receiver's fs base uses no
 * thread-local state of its own (the TLS would be the receiver thread's).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <unistd.h>
#include <x86intrin.h>

#include "internal.h"
#include "hosted.h"
#include "rpal_host.h"

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif

#define IDLE_STACK (256u << 10)   /* signal handlers of the waiting thread run here */

struct rcv_priv {
	struct rpal_host_rcv pub;     /* first: what other copies see */
	int top;                      /* the set's private epoll (descriptors to watch) */
	void *stack;
	bool idle_made;
};

static struct rpal_host *host;
static unsigned host_prog;
static int host_pid;          /* the launcher's */

/* ------------------------------------------------------------ raw syscalls
 * No errno: the idle loop runs on a thread whose TLS a borrower may use. */
static long raw3(long nr, long a, long b, long c)
{
	long ret;

	__asm__ __volatile__("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c)
			     : "rcx", "r11", "memory");
	return ret;
}

static long raw5(long nr, long a, long b, long c, long d, long e)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	long ret;

	__asm__ __volatile__("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
			     : "rcx", "r11", "memory");
	return ret;
}

/*
 * r's kick eventfd from the launcher (rpal_host_kick_msg), or -errno.  One
 * datagram socket per request, so that several threads may ask at once and
 * no reply can reach the wrong one; the reply counts only with the
 * launcher's credentials, our request's rcv and one eventfd, and whatever
 * else came with it is closed.  Raw syscalls: see kick_fd_fetch.
 */
static int kick_fd_ask(const struct rpal_host_rcv *r)
{
	struct sockaddr_un to = { .sun_family = AF_UNIX }, from;
	sa_family_t self = AF_UNIX;
	struct rpal_host_kick_msg m = { .magic = RPAL_KICK_MAGIC, .rcv = (uint64_t)(uintptr_t)r };
	struct iovec iov = { &m, sizeof(m) };
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cb;
	struct msghdr mh = { .msg_name = &to, .msg_iov = &iov, .msg_iovlen = 1 };
	struct pollfd pfd = { .events = POLLIN };
	struct timespec ts = { 2, 0 };
	size_t len = strnlen(host->kick_name, sizeof(host->kick_name) - 1), off;
	long s, n;
	int one = 1, fd = -1, nfds = 0, pid = 0;

	if (!len)
		return -ENOTSUP;
	__builtin_memcpy(to.sun_path + 1, host->kick_name, len);      /* abstract: a NUL first */
	mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
	s = raw3(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return (int)s;
	/* Bound (autobind) and with SO_PASSCRED before we send: the reply
	 * needs an address, and says who sent it. */
	if ((n = raw5(SYS_setsockopt, s, SOL_SOCKET, SO_PASSCRED, (long)&one, sizeof(one))) < 0 ||
	    (n = raw3(SYS_bind, s, (long)&self, sizeof(self))) < 0 ||
	    (n = raw3(SYS_sendmsg, s, (long)&mh, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0)
		goto out;
	pfd.fd = (int)s;
	do
		n = raw5(SYS_ppoll, (long)&pfd, 1, (long)&ts, 0, 8);
	while (n == -EINTR);        /* ts keeps what is left; the launcher answers at once */
	if (n <= 0) {
		n = n ? n : -ETIMEDOUT;
		goto out;
	}
	mh = (struct msghdr){ .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf) };
	n = raw3(SYS_recvmsg, s, (long)&mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	for (off = 0; n >= 0 && off + sizeof(struct cmsghdr) <= mh.msg_controllen;) {
		struct cmsghdr *c = (struct cmsghdr *)(cb.buf + off);

		if (c->cmsg_len < sizeof(struct cmsghdr) || off + c->cmsg_len > mh.msg_controllen)
			break;
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			pid = ((struct ucred *)CMSG_DATA(c))->pid;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
				int got = ((int *)CMSG_DATA(c))[k];

				if (!nfds++)
					fd = got;
				else
					raw3(SYS_close, got, 0, 0);
			}
		}
		off += CMSG_ALIGN(c->cmsg_len);
	}
	if (n == (long)sizeof(m) && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && nfds == 1 && pid == host_pid &&
	    m.magic == RPAL_KICK_MAGIC && m.rcv == (uint64_t)(uintptr_t)r && !m.err && rpal_host_fd_is_eventfd(fd)) {
		raw3(SYS_close, s, 0, 0);
		return fd;
	}
	if (n >= 0)
		n = n == (long)sizeof(m) && m.err < 0 ? m.err : -EPROTO;
out:
	if (fd >= 0)
		raw3(SYS_close, fd, 0, 0);
	raw3(SYS_close, s, 0, 0);
	return (int)n;
}

/*
 * r's kick eventfd as a descriptor of ours, taken from its program on our
 * first kick and kept for the next ones (each program has its own descriptor
 * table).  The kernel refuses pidfd_getfd to a caller that may not ptrace the
 * target, as after a program of a host run as root changed its user id (the
 * shared memory is then no longer dumpable, and making it dumpable again
 * would hand the dropped privileges back); the launcher, which may, then
 * passes the descriptor on (kick_fd_ask).  Where neither works for a program
 * that has not ended, its receiver parked waits for a wake-up that never
 * comes, and calls to it may stall: that is said once, on stderr.  Raw
 * syscalls and writes, as this may run on a thread whose TLS a borrower uses.
 */
static int kick_fd_fetch(struct rpal_host_rcv *r)
{
	static _Atomic int said;
	int32_t fd = rpal_host_take_kick_fd(host, r), none = -1;
	const struct rpal_host_prog *p = &host->progs[r->prog];

	if (fd == -EPERM || fd == -EACCES)
		fd = kick_fd_ask(r);
	if (fd < 0 && !atomic_load(&p->ended) && !atomic_exchange(&said, 1)) {
		static const char a[] = "rpal: cannot wake a receiver of ",
			b[] = " (pidfd_getfd refused, and the launcher did not pass it on): "
			      "RPAL calls to it may stall\n";

		raw3(SYS_write, 2, (long)a, sizeof(a) - 1);
		raw3(SYS_write, 2, (long)p->name, (long)strnlen(p->name, sizeof(p->name)));
		raw3(SYS_write, 2, (long)b, sizeof(b) - 1);
	}
	if (fd >= 0 && !atomic_compare_exchange_strong(&r->kick_fds[host_prog], &none, fd)) {
		raw3(SYS_close, fd, 0, 0);
		fd = none;
	}
	return fd;
}

static void kick(struct rpal_host_rcv *r)
{
	int32_t fd = atomic_load_explicit(&r->kick_fds[host_prog], memory_order_acquire);
	uint64_t one = 1;

	if (unlikely(fd < 0) && (fd = kick_fd_fetch(r)) < 0)
		return;         /* its program has ended */
	raw3(SYS_write, fd, (long)&one, sizeof(one));
}

/* ------------------------------------------------------------ set-up */

/* At rpal_init: are we a program of `rpal run`?  Then use its region. */
int host_setup(struct rpal_config *cfg)
{
	const char *env = getenv(RPAL_HOST_ENV);
	unsigned long long addr = 0;
	unsigned prog = 0;
	long pid = 0;
	struct rpal_host *h;

	if (!env || !*env)
		return 0;
	if (sscanf(env, "%ld:%llx:%u", &pid, &addr, &prog) != 3)
		return rpal_fail(EINVAL, "%s=\"%s\" is not <pid>:<address>:<program>", RPAL_HOST_ENV, env);
	/* Our parent is the launcher; a program's own children inherit the
	 * variable but not the address space.  The pid is the launcher's own
	 * while it runs our constructors. */
	if (pid != getppid() && pid != getpid())
		return 0;
	/* A hosted program that calls execve() keeps its pid and its parent,
	 * and its environment names the block, but the new image has an
	 * address space of its own: it is an ordinary process.  Tell the two
	 * apart without touching the address: msync fails with ENOMEM where
	 * no mapping covers it.  Where one happens to, the block must still
	 * name this process as its program (or as the launcher). */
	if (!addr || msync((void *)(uintptr_t)(addr & ~(uint64_t)4095),
			   (addr & 4095) + sizeof(*h), MS_ASYNC) != 0)
		return 0;
	h = (struct rpal_host *)(uintptr_t)addr;
	if (h->magic != RPAL_HOST_MAGIC)
		return 0;
	if (h->version != RPAL_HOST_VERSION ||
	    h->size != sizeof(*h) || prog >= h->nprogs || prog >= RPAL_HOST_MAX_PROGS)
		return rpal_fail(EPROTO, "%s: the launcher's block does not match this librpal (version %u)",
				 RPAL_HOST_ENV, RPAL_HOST_VERSION);
	if (pid != getpid() && atomic_load(&h->progs[prog].pid) != getpid())
		return 0;
	cfg->region_base = h->region_base;
	cfg->slot_size = h->slot_size;
	cfg->nr_slots = h->nr_slots;
	if (cfg->arena_size > cfg->slot_size)
		cfg->arena_size = cfg->slot_size;
	host = h;
	host_prog = prog;
	host_pid = (int)pid;
	return 0;
}

/* In a forked child: the launcher's block is the parent's business. */
void host_forget_child(void)
{
	host = NULL;
}

bool host_active(void)
{
	return host != NULL;
}

/* The program of our host whose process is pid and whose arena is at slot,
 * or -1. */
int host_prog_of(pid_t pid, unsigned slot)
{
	unsigned i = host ? host->nprogs : 0;

	/* Newest first: an ended program keeps its entry, slot included, and
	 * both its slot and (once reaped) its pid may be a later program's. */
	if (i > RPAL_HOST_MAX_PROGS)
		i = RPAL_HOST_MAX_PROGS;
	while (i-- > 0) {
		if (atomic_load_explicit(&host->progs[i].pid, memory_order_relaxed) != pid)
			continue;
		return atomic_load(&host->progs[i].slot) == (int32_t)slot ? (int)i : -1;
	}
	return -1;
}

/*
 * A peer is another program of our host when its pid is a program's and
 * the slot its hello names is that program's.  A program that called
 * execve() keeps its pid (and its entry, until it ends) but runs in an
 * address space of its own, as an ordinary process whose arena lies at a
 * slot of its own choosing: reading it through our mapping of the region
 * would fault or read another arena.  kcmp(KCMP_VM) says whether the pid
 * still shares our memory; where it cannot answer (no CONFIG_KCMP, a
 * seccomp policy, another uid), the slot alone decides.
 */
bool pid_shares_our_memory(pid_t pid, unsigned slot)
{
	if (pid == getpid())
		return true;
	if (host_prog_of(pid, slot) < 0)
		return false;
	return syscall(SYS_kcmp, (long)getpid(), (long)pid, KCMP_VM, 0L, 0L) <= 0;
}

bool host_slot_held(unsigned slot, pid_t except)
{
	unsigned i;

	for (i = 0; host && i < host->nprogs && i < RPAL_HOST_MAX_PROGS; i++)
		if (atomic_load(&host->progs[i].slot) == (int32_t)slot &&
		    atomic_load_explicit(&host->progs[i].pid, memory_order_relaxed) != except &&
		    !atomic_load_explicit(&host->progs[i].ended, memory_order_relaxed))
			return true;
	return false;
}

void host_slot_claimed(unsigned slot)
{
	if (host)
		atomic_store(&host->progs[host_prog].slot, (int32_t)slot);
}

bool host_prog_failed(int prog)
{
	return host && prog >= 0 && (atomic_load_explicit(&host->progs[prog].failed, memory_order_relaxed) ||
				     atomic_load_explicit(&host->progs[prog].ended, memory_order_relaxed));
}

RPAL_EXPORT int rpal_hosted_stat(struct rpal_prog_stat *out, unsigned max)
{
	unsigned i;
	int ret = rpal_ensure_init();

	if (ret)
		return ret;
	if (!host)
		return 0;
	for (i = 0; i < host->nprogs && i < max; i++) {
		struct rpal_host_prog *p = &host->progs[i];

		memset(&out[i], 0, sizeof(out[i]));
		snprintf(out[i].name, sizeof(out[i].name), "%s", p->name);
		rpal_host_prog_calls(p, &out[i].calls, &out[i].call_cycles);
		out[i].handoffs = atomic_load(&p->handoffs);
		out[i].failed_signal = atomic_load(&p->failed);
		out[i].self = i == host_prog;
	}
	return (int)host->nprogs;
}

/* Raise *w to v, never lower it: two refreshes may race. */
static void store_max(_Atomic uint64_t *w, uint64_t v)
{
	uint64_t old = load_relaxed(w);

	while (old < v && !atomic_compare_exchange_weak_explicit(w, &old, v, memory_order_relaxed,
								   memory_order_relaxed))
		;
}

/* Program p's call counters into its statistics page (rpal stat). */
static void host_stat_refresh(struct rpal_host_prog *p)
{
	struct rpal_stat_hdr *h = (struct rpal_stat_hdr *)(uintptr_t)atomic_load_explicit(&p->stat, memory_order_acquire);
	uint64_t calls, tsc;

	if (!h)
		return;
	rpal_host_prog_calls(p, &calls, &tsc);
	store_max(&h->calls_in, calls);
	store_max(&h->callee_tsc, tsc);
	store_max(&h->calls_out, rpal_host_prog_calls_out(p));
	store_max(&h->handoffs, atomic_load_explicit(&p->handoffs, memory_order_relaxed));
}

/* At rpal_init, after the statistics page: where our program's counters go. */
void host_stat_attach(void)
{
	if (host)
		atomic_store_explicit(&host->progs[host_prog].stat, (uintptr_t)rpal_g.stat, memory_order_release);
}

/* ------------------------------------------------------------ sender */

static inline uintptr_t rdfsbase(void)
{
	uintptr_t v;

	__asm__ __volatile__("rdfsbase %0" : "=r"(v));
	return v;
}

static pthread_key_t sender_key;
static pthread_once_t sender_once = PTHREAD_ONCE_INIT;
static bool sender_key_ok;
static pthread_mutex_t sender_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rpal_host_sender *sender_pool;

/* At the end of a thread that made calls: its record goes back to the pool
 * (not to malloc: threads it created may still hold its address in their
 * gs base), after the dispatch whose selector byte the kernel reads in it. */
static void sender_free(void *p)
{
	struct rpal_host_sender *s = p;

	if (s->sud)
		prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
	if ((struct rpal_host_sender *)rpal_rdgsbase() == s)
		rpal_wrgsbase(0);
	s->owner_fs = 0;
	s->cur = NULL;
	pthread_mutex_lock(&sender_pool_lock);
	s->next_free = sender_pool;
	sender_pool = s;
	pthread_mutex_unlock(&sender_pool_lock);
}

static void sender_key_make(void)
{
	sender_key_ok = pthread_key_create(&sender_key, sender_free) == 0;
}

/*
 * Can this thread run a receiver?  A system call of the receiver's code
 * traps with a SIGSYS, and a fault with a SIGSEGV, SIGBUS, SIGFPE or SIGILL,
 * that the kernel forces on this thread: where the signal is blocked here
 * (a thread that blocks every signal and takes them with sigwait or a
 * signalfd), or SIGSYS is ignored or at its default in this process, the
 * kernel resets it to the default action and the whole process dies of it,
 * taking the receiver with it.  Such a thread makes no calls: its messages
 * wake the receiver's own thread, as in connected mode.  Asked when a
 * thread would make its first call, and again at each send while the
 * answer is no (two system calls; the wake-up costs more).
 */
static bool sender_may_call(void)
{
	static const int forced[] = { SIGSYS, SIGSEGV, SIGBUS, SIGFPE, SIGILL };
	struct sigaction sa;
	sigset_t mask;

	if (pthread_sigmask(SIG_SETMASK, NULL, &mask) != 0)
		return false;
	for (unsigned i = 0; i < sizeof(forced) / sizeof(forced[0]); i++)
		if (sigismember(&mask, forced[i]))
			return false;
	if (sigaction(SIGSYS, NULL, &sa) != 0)
		return false;
	return (sa.sa_flags & SA_SIGINFO) || (sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL);
}

/* This thread's record, made on its first call.  A thread inherits its
 * creator's gs base, so the record names the thread (its TCB) it belongs to.
 * s: what the gs base points at now; fs: our fs base. */
static struct rpal_host_sender *sender_get(struct rpal_host_sender *s, uintptr_t fs)
{
	if (likely(s && s->magic == RPAL_SENDER_MAGIC && s->owner_fs == fs))
		return s;
	if (!sender_may_call())
		return NULL;
	pthread_once(&sender_once, sender_key_make);
	if (!sender_key_ok)
		return NULL;
	pthread_mutex_lock(&sender_pool_lock);
	s = sender_pool;
	if (s)
		sender_pool = s->next_free;
	pthread_mutex_unlock(&sender_pool_lock);
	if (!s) {
		if (!(s = calloc(1, sizeof(*s))))
			return NULL;
		s->prog = host_prog;
		s->next_all = atomic_load(&host->progs[host_prog].senders);
		while (!atomic_compare_exchange_weak(&host->progs[host_prog].senders, &s->next_all, s))
			;
	}
	s->magic = 0;           /* while it is set up */
	s->sud = 0;
	s->cur = NULL;
	s->next_free = NULL;
	if (pthread_setspecific(sender_key, s)) {
		pthread_mutex_lock(&sender_pool_lock);
		s->next_free = sender_pool;
		sender_pool = s;
		pthread_mutex_unlock(&sender_pool_lock);
		return NULL;
	}
	s->owner_fs = fs;
	s->selector = SUD_ALLOW;
	s->magic = RPAL_SENDER_MAGIC;
	/* Our libc's system calls are never the receiver's: a signal handler
	 * of ours that the kernel runs during a call makes them as usual. */
	const struct rpal_host_prog *me = &host->progs[host_prog];
	uintptr_t start = me->sud_len ? me->sud_start : host->sud_start;
	uintptr_t len = me->sud_len ? me->sud_len : host->sud_len;
	if (host->sud && prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, start, len, &s->selector) == 0)
		s->sud = 1;
	rpal_wrgsbase((uintptr_t)s);
	return s;
}

/*
 * For a signal handler of librpal that is about to make system calls
 * (safety.c): inside an RPAL call Syscall User Dispatch hands those it does
 * not let through (all of them, where this program's libc is not its range,
 * sender_get) to the receiver's own thread, and leaves this thread with the
 * handler's signal mask.  Let them through for the rest of the call, as the
 * launcher's handlers do.  Async-signal-safe: no TLS, no system call.
 */
void call_signal_allow_syscalls(void)
{
	struct rpal_host_sender *s;

	if (!host || !host->fsgsbase)
		return;
	s = (struct rpal_host_sender *)rpal_rdgsbase();
	if (rpal_sender_in_call(s, rdfsbase()))
		s->selector = SUD_ALLOW;
}

/*
 * Is the n-th call into a receiver timed?  A clock read each side of the
 * switch costs a tenth of a call, so one call in CALL_TIME_EVERY is timed
 * and counts for that many.  Which ones follow a golden-ratio sequence on
 * n: spread evenly, and never in step with a caller whose calls alternate
 * in a short period (every 16th call of a client that alternates two
 * requests would always time the same one).
 */
#define CALL_TIME_EVERY 16u
static inline bool call_timed(uint64_t n)
{
	return (n * 0x9e3779b97f4a7c15ull) >> 60 == 0;
}

/* The next pass of a call: r runs on this thread from the switch that
 * call_deliver() (local.h) makes after this returns, until it parks, traps
 * or faults; then call_end(). */
static int call_pass(struct call_step *k)
{
	struct rpal_host_rcv *r = k->r;
	struct rpal_host_sender *s = k->s;

	r->sender = s;
	r->reason = RESUME_CALL;
	if (s->sud)
		s->selector = SUD_BLOCK;
	k->from = (struct hosted_ctx *)&s->ctx;
	k->to = (struct hosted_ctx *)&r->ctx;
	return CALL_SWITCH;
}

/* We hold r: run it here.  cookie: which of its connections the call is
 * for (a hint, 0 none). */
static int call_enter(struct rpal_conn *c, struct rpal_host_rcv *r, struct rpal_host_sender *s, uint64_t cookie,
		      struct call_step *k)
{
	k->c = c;
	k->r = r;
	k->s = s;
	/* PKRU must come back as it was.  A receiver that opens protection-key
	 * windows of its own program (protect_peers) may leave them open, and
	 * one that trapped or faulted comes back through a signal handler,
	 * which the kernel runs with its default PKRU.  The check after a
	 * clean park is for the first case only: a tenth of a call. */
	k->pkru = host->pku ? pkru_read() : 0;
	/* Nobody else writes r's counters while we hold it.  Each store in
	 * call_end is absolute, so a CAS that fails and stores again counts
	 * once. */
	k->calls = load_relaxed(&r->calls) + 1;
	k->tsc0 = load_relaxed(&r->call_tsc);
	k->ran = 0;
	s->cur = r;
	r->cookie = cookie;
	r->timed = call_timed(k->calls);
	store_relaxed(&s->calls, load_relaxed(&s->calls) + 1);
	return call_pass(k);
}

/* The receiver faulted or trapped in a call: we still hold it. */
static int call_failed(struct call_step *k)
{
	struct rpal_host_rcv *r = k->r;
	struct rpal_host_prog *prog = &host->progs[r->prog];
	uint32_t st;

	k->s->cur = NULL;
	if (host->pku && pkru_read() != k->pkru)
		pkru_write(k->pkru);
	store_relaxed(&r->calls, k->calls);
	store_relaxed(&r->call_tsc, k->tsc0 + k->ran);
	r->sender = NULL;
	r->cookie = 0;
	if (unlikely(r->fault_sig)) {
		int sig = r->fault_sig;

		atomic_store(&r->state, RCV_DEAD);
		kick(r);
		conn_mark_dead(k->c, false);
		return rpal_fail(ECONNRESET, "the receiving program (%s) faulted with signal %d in an RPAL call; "
				 "it is marked failed", prog->name, sig);
	}
	/* It made a syscall: its own thread resumes it from the frame, unless
	 * its process ended meanwhile (no thread is left to run it). */
	r->trapped = 0;
	st = load_relaxed(&r->state);
	do {
		if ((st & RCV_MASK) == RCV_DEAD) {
			conn_mark_dead(k->c, false);
			return rpal_fail(ECONNRESET, "the receiving program (%s) ended during an RPAL call",
					 prog->name);
		}
	} while (!atomic_compare_exchange_weak(&r->state, &st, RCV_HANDOFF | (st & RCV_PENDING)));
	atomic_fetch_add_explicit(&prog->handoffs, 1, memory_order_relaxed);
	kick(r);
	return 1;
}

/* After a switch back from the receiver: it parked, trapped or faulted.
 * Give it back, or CALL_SWITCH to run it again for what came meanwhile. */
int call_end(struct call_step *k)
{
	struct rpal_host_rcv *r = k->r;
	struct rpal_host_sender *s = k->s;
	struct rpal_host_prog *prog = &host->progs[r->prog];
	uint32_t st, want;
	bool wake;

	s->selector = SUD_ALLOW;
	/* r stamped run_tsc as it resumed (epoll.c's park): the clock read on
	 * the message's way in is the receiver's. */
	if (r->timed)
		k->ran += (__rdtsc() - r->run_tsc) * CALL_TIME_EVERY;
	if (unlikely(r->fault_sig | r->trapped))
		return call_failed(k);
	/* It parked: publish that, unless a message or its own thread is
	 * waiting for it.  A rescan looks at every connection. */
	r->sender = NULL;
	r->cookie = 0;
	st = load_relaxed(&r->state);
	do {
		if ((st & RCV_MASK) == RCV_DEAD)
			want = RCV_DEAD;        /* its process ended meanwhile */
		else if (st & RCV_WANT)
			want = RCV_OWNER | (st & RCV_PENDING);
		else if (st & RCV_PENDING)
			want = RCV_BORROWED;
		else
			want = RCV_PARKED;
		if (want != RCV_BORROWED) {
			/* Count while we still hold it: whoever claims it
			 * next sees the sums (the CAS releases). */
			store_relaxed(&r->calls, k->calls);
			store_relaxed(&r->call_tsc, k->tsc0 + k->ran);
		}
	} while (!atomic_compare_exchange_weak(&r->state, &st, want));
	if (want == RCV_BORROWED)
		return call_pass(k);    /* rescan on this thread */
	/* Its own thread sleeps with the deadline of an earlier wait: let it
	 * read this one. */
	wake = want != RCV_PARKED || r->deadline_ns != UINT64_MAX;
	s->cur = NULL;
	if (r->writes_pkru && pkru_read() != k->pkru)
		pkru_write(k->pkru);
	if (wake)
		kick(r);
	if (unlikely(!(k->calls & 63)))
		host_stat_refresh(prog);
	if (unlikely(!(load_relaxed(&s->calls) & 63)))
		host_stat_refresh(&host->progs[host_prog]);
	return 1;
}

/*
 * After publishing to a local peer.  CALL_SWITCH: we hold the receiver,
 * switch from k->from to k->to, then call_end(); 1: the receiver will
 * rescan without a wake-up; 0: use the connected-mode wake-up check too;
 * <0: the receiving program failed.
 */
int call_begin(struct rpal_conn *c, bool may_call, struct call_step *k)
{
	struct rpal_host_rcv *r = (struct rpal_host_rcv *)(uintptr_t)load_acquire(&c->pb->hosted_rcv);
	uint64_t cookie = load_relaxed(&c->pb->hosted_cookie);
	struct rpal_host_sender *s;
	uintptr_t fs;
	bool nested;
	uint32_t st;

	/* Without Syscall User Dispatch a system call in the receiver's code
	 * would run in our process, on our descriptors: no call then. */
	if (!r || !host->fsgsbase || !host->sud || !host->getfd)
		return 0;
	s = (struct rpal_host_sender *)rpal_rdgsbase();
	/* Inside a call already: no second borrow on this thread.  Otherwise
	 * our record first, so that a claim never has to be undone. */
	fs = rdfsbase();
	nested = !may_call || rpal_sender_in_call(s, fs);
	if (!nested && !(s = sender_get(s, fs)))
		nested = true;          /* no memory: its own thread runs it */
	st = load_relaxed(&r->state);
	for (;;) {
		switch (st & RCV_MASK) {
		case RCV_DEAD:
			conn_mark_dead(c, false);
			return rpal_fail(ECONNRESET, "peer pid %d is gone: the receiving program ended, or failed in an RPAL call",
					 (int)c->peer_pid);
		case RCV_PARKED:
			if (!nested && !(st & RCV_PENDING)) {
				if (!atomic_compare_exchange_weak(&r->state, &st, RCV_BORROWED))
					continue;
				return call_enter(c, r, s, cookie, k);
			}
			if (st & RCV_PENDING)
				return 0;
			if (atomic_compare_exchange_weak(&r->state, &st, st | RCV_PENDING)) {
				kick(r);        /* parked, and we may not borrow: wake its thread */
				return 0;
			}
			continue;
		default:
			/* Running somewhere: it rescans before it parks again. */
			if ((st & RCV_PENDING) || atomic_compare_exchange_weak(&r->state, &st, st | RCV_PENDING))
				return 0;
		}
	}
}

/* ------------------------------------------------------------ receiver */

struct rpal_host_rcv *call_rcv_create(int top)
{
	struct rcv_priv *p;
	sigset_t mask;

	if (!host || !host->fsgsbase)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->stack = mmap(NULL, IDLE_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	p->pub.kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->stack == MAP_FAILED || p->pub.kick_fd < 0) {
		if (p->stack != MAP_FAILED)
			munmap(p->stack, IDLE_STACK);
		if (p->pub.kick_fd >= 0)
			close(p->pub.kick_fd);
		free(p);
		return NULL;
	}
	p->top = top;
	for (unsigned i = 0; i < RPAL_HOST_MAX_PROGS; i++)
		p->pub.kick_fds[i] = i == host_prog ? p->pub.kick_fd : -1;
	p->pub.magic = RPAL_RCV_MAGIC;
	p->pub.prog = host_prog;
	p->pub.state = RCV_OWNER;
	/* Keys come at rpal_init, before any set (mpk_setup). */
	p->pub.writes_pkru = host->pku && load_relaxed(&mpk_on);
	/* Counted from now on (rpal_hosted_stat sums its program's list). */
	p->pub.next = atomic_load(&host->progs[host_prog].rcvs);
	while (!atomic_compare_exchange_weak(&host->progs[host_prog].rcvs, &p->pub.next, &p->pub))
		;
	/* What the thread that waits runs with; a hand-off's frame gets it. */
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	memcpy(&p->pub.sigmask, &mask, sizeof(p->pub.sigmask));
	sigaltstack(NULL, &p->pub.altstack);
	return &p->pub;
}

/*
 * The set is going away; its connections no longer name r.  r itself stays
 * (a sender may still hold its address) but never parks again.
 */
void call_rcv_retire(struct rpal_host_rcv *r)
{
	atomic_store(&r->state, RCV_DEAD);
}

/* The program failed in a call: hang up its connections, end its thread. */
static void __attribute__((noreturn)) idle_dead(struct rpal_host_rcv *r)
{
	conn_hangup_all();
	_exit(128 + (host->progs[r->prog].failed ? host->progs[r->prog].failed : SIGSEGV));
}

/* Sleep until a kick or a signal; with watch, also a descriptor of the set
 * or the deadline. */
static int idle_sleep(struct rcv_priv *p, bool watch)
{
	struct pollfd pfd[2] = {
		{ .fd = p->pub.kick_fd, .events = POLLIN },
		{ .fd = p->top, .events = POLLIN },
	};
	uint64_t buf, now, dl = p->pub.deadline_ns;
	struct timespec ts, *tsp = NULL;
	long n;

	if (watch && dl != UINT64_MAX) {
		now = now_ns();
		if (now >= dl)
			return RESUME_TIMEOUT;
		ts.tv_sec = (time_t)((dl - now) / 1000000000u);
		ts.tv_nsec = (long)((dl - now) % 1000000000u);
		tsp = &ts;
	}
	n = raw5(SYS_ppoll, (long)pfd, watch ? 2 : 1, (long)tsp, 0, 8);   /* no mask change */
	if (pfd[0].revents)
		raw3(SYS_read, p->pub.kick_fd, (long)&buf, sizeof(buf));
	if (n == -EINTR)
		return RESUME_EINTR;
	if (n == 0)
		return RESUME_TIMEOUT;
	if (n > 0 && watch && pfd[1].revents)
		return RESUME_KERNEL;
	return -1;      /* a kick: look at the state again */
}

/*
 * On the own thread, holding r (OWNER): sleep until r must run here.
 * Returns the reason, with r held; hand-offs are resumed inside.
 */
/* Holding r (OWNER): publish PARKED, unless a message came meanwhile; then
 * keep it and return true (it must scan again). */
static bool park_unless_pending(struct rpal_host_rcv *r)
{
	uint32_t st = load_relaxed(&r->state);

	for (;;) {
		if ((st & RCV_MASK) == RCV_DEAD)
			idle_dead(r);
		if (st & RCV_PENDING) {
			if (atomic_compare_exchange_weak(&r->state, &st, RCV_OWNER))
				return true;
			continue;
		}
		if (atomic_compare_exchange_weak(&r->state, &st, RCV_PARKED))
			return false;
	}
}

static int idle_wait(struct rcv_priv *p)
{
	struct rpal_host_rcv *r = &p->pub;
	int want = -1;          /* a reason we found while r was borrowed */
	uint32_t st;

	if (park_unless_pending(r))
		return RESUME_RESCAN;
	for (;;) {
		int why;

		st = load_acquire(&r->state);
		switch (st & RCV_MASK) {
		case RCV_DEAD:
			idle_dead(r);
		case RCV_OWNER:         /* a borrower gave it back (WANT) */
			atomic_store(&r->state, RCV_OWNER);
			return want >= 0 ? want : RESUME_RESCAN;
		case RCV_HANDOFF:
			if (!atomic_compare_exchange_strong(&r->state, &st, RCV_OWNER | (st & RCV_PENDING)))
				continue;
			/* The syscall runs here, then the receiver until it
			 * parks again (call_park_own switches back to r->idle). */
			hosted_lazy_resume((hosted_ctx *)&r->idle, r->uc);
			if (park_unless_pending(r))
				return RESUME_RESCAN;
			continue;
		case RCV_PARKED:
			if (st & RCV_PENDING) {
				if (atomic_compare_exchange_strong(&r->state, &st, RCV_OWNER))
					return RESUME_RESCAN;
				continue;
			}
			if (want < 0) {
				why = idle_sleep(p, true);
				if (why < 0)
					continue;
				want = why;
			}
			if (atomic_compare_exchange_strong(&r->state, &st, RCV_OWNER))
				return want;
			continue;
		default:                /* BORROWED: ask for it back when needed */
			if (want >= 0 && !(st & RCV_WANT)) {
				if (!atomic_compare_exchange_strong(&r->state, &st, st | RCV_WANT))
					continue;
			}
			why = idle_sleep(p, want < 0);
			if (why >= 0 && want < 0)
				want = why;
		}
	}
}

static void idle_main(void *arg)
{
	struct rcv_priv *p = arg;

	for (;;) {
		p->pub.reason = idle_wait(p);
		hosted_switch((hosted_ctx *)&p->pub.idle, (hosted_ctx *)&p->pub.ctx);
	}
}

/*
 * Park the receiver on its own thread (a borrower's thread switches back to
 * the sender: epoll.c's park); returns RESUME_* when something resumes it,
 * on this thread or on a borrower's.  r->deadline_ns is set.
 */
int call_park_own(struct rpal_host_rcv *r)
{
	struct rcv_priv *p = (struct rcv_priv *)r;

	if (!p->idle_made) {
		hosted_ctx_make((hosted_ctx *)&r->idle, p->stack, IDLE_STACK, idle_main, p);
		p->idle_made = true;
	}
	host_stat_refresh(&host->progs[host_prog]);     /* its own thread parks: calls since */
	r->ctx.fs = rdfsbase();         /* what a borrower loads: our TCB */
	hosted_switch((hosted_ctx *)&r->ctx, (hosted_ctx *)&r->idle);
	if (r->timed)
		r->run_tsc = __rdtsc(); /* maybe a borrower's call: see call_end */
	return r->reason;
}
