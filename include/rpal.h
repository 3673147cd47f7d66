/* SPDX-License-Identifier: MIT */
/*
 * rpal.h - Run Process As Library: user-space cross-process calls on stock Linux.
 *
 * NOTE: conventions for the whole header.
 *  - Calls return 0 or a count on success and -errno on failure; errno is not
 *    set.  rpal_strerror(ret) gives a sentence that says what went wrong,
 *    including the detail of the most recent failure on this thread.
 *  - The epoll replacements (rpal_epoll_create/ctl/wait) keep POSIX's own
 *    convention (-1 and errno) so that swapping them in changes nothing else.
 *  - A connection is named by an int: the descriptor of its Unix socket.  Do
 *    not read, write or close() it directly; close it with rpal_close().
 *  - One thread at a time may send on a connection, and one thread at a time
 *    may receive on it (a send and a receive may run concurrently).  The
 *    allocator and connection set-up are thread safe.
 *
 * Connected mode in one paragraph: rpal_init() reserves a fixed PROT_NONE
 * region, claims one slot of it and maps this process's arena (a sealed memfd)
 * there.  A connection's peer maps that arena read-only at the same address,
 * so pointers into it mean the same thing in both processes.  Messages move
 * through single-producer rings, each written only by its owner; a consumer
 * spins briefly, then advertises that it sleeps, and only then does the
 * producer make a system call to wake it.
 */
#ifndef RPAL_H
#define RPAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/epoll.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RPAL_VERSION_MAJOR 0
#define RPAL_VERSION_MINOR 1

/* ---------------------------------------------------------------- types */

/* Defaults; each can be overridden in struct rpal_config or the environment. */
#define RPAL_DEFAULT_REGION_BASE  0x680000000000ULL  /* RPAL_REGION_BASE: 104 TiB */
#define RPAL_DEFAULT_SLOT_SIZE    (64ULL << 30)      /* RPAL_SLOT_SIZE: 64 GiB */
#define RPAL_DEFAULT_NR_SLOTS     256u               /* RPAL_NR_SLOTS */
#define RPAL_DEFAULT_ARENA_SIZE   (64ULL << 20)      /* RPAL_ARENA_SIZE: 64 MiB */
#define RPAL_DEFAULT_RING_ENTRIES 256u               /* RPAL_RING_ENTRIES */
#define RPAL_DEFAULT_SPIN_US      50u                /* RPAL_SPIN_US */
#define RPAL_DEFAULT_HANDSHAKE_MS 1000u              /* RPAL_HANDSHAKE_MS */

/* Largest payload carried inside a ring slot, with no buffer and no ack. */
#define RPAL_INLINE_MAX 40u

/*
 * Process-wide settings, read once by rpal_init().  Fill with
 * rpal_config_default() (defaults, then RPAL_* environment overrides) and
 * change what you need.
 */
struct rpal_config {
	uint64_t region_base;     /* start of the reserved region, slot-aligned */
	uint64_t slot_size;       /* bytes per slot; a power of two >= 1 MiB */
	unsigned nr_slots;        /* slots in the region, 2..4096 */
	uint64_t arena_size;      /* this process's arena, <= slot_size, page multiple */
	unsigned ring_entries;    /* slots per ring direction, power of two 8..65536 */
	unsigned spin_us;         /* longest spin before a waiter sleeps; 0 = never spin */
	unsigned handshake_ms;    /* bound on each handshake step */
	char runtime_dir[108];    /* sockets and locks; "" = $XDG_RUNTIME_DIR/rpal, else
	                             /tmp/rpal-<euid> (rpal_config_default() copies
	                             $RPAL_RUNTIME_DIR here) */
	unsigned protect_peers;   /* RPAL_PROTECT_*; RPAL_PROTECT_PEERS */
	uint64_t conn_budget;     /* bytes of our arena one peer may hold, 64 KiB..arena_size;
	                             0 = arena_size / 4; RPAL_CONN_BUDGET (see rpal(7)) */
	unsigned wait_policy;     /* RPAL_WAIT_POLICY_*; RPAL_WAIT=adaptive|spin|sleep */
};

/*
 * wait_policy: what a waiter does before it sleeps (see rpal(7), "Wake-ups
 * and spinning").  ADAPTIVE spins only while that costs less CPU than a
 * sleep and its wake-up, judged from how soon recent waits ended and from
 * what sleeps and wake-ups cost this process, never longer than spin_us;
 * where the peer's gaps are shorter than a wake-up takes, the wake-up's
 * latency counts as CPU too (a sleeper would fall behind); and before
 * that, through the wake-up of a peer it has just woken (up to spin_us)
 * while that keeps the two from waking each other on every wait.
 */
#define RPAL_WAIT_POLICY_ADAPTIVE 0u  /* the default */
#define RPAL_WAIT_POLICY_SPIN     1u  /* spin up to spin_us every time, then sleep */
#define RPAL_WAIT_POLICY_SLEEP    2u  /* sleep at once */

/*
 * protect_peers: keep peer arenas unreadable outside windows with memory
 * protection keys (x86 PKU), one key per peer while keys last.  Off by
 * default; see rpal_peer_window_open() and rpal(7).
 */
#define RPAL_PROTECT_OFF     0u   /* every thread may read peer arenas at any time */
#define RPAL_PROTECT_AUTO    1u   /* protect where the CPU and kernel have PKU */
#define RPAL_PROTECT_REQUIRE 2u   /* protect, or rpal_init() fails with -ENOTSUP */

/*
 * Who may connect.  A peer is accepted if allow_same_uid is set and its uid
 * equals ours, or its uid is in uids[], or its gid is in gids[].  A NULL
 * policy means "same uid only".  Both ends check the other.
 */
struct rpal_policy {
	int allow_same_uid;
	const uid_t *uids;
	unsigned nr_uids;
	const gid_t *gids;
	unsigned nr_gids;
};

/* Flags for rpal_accept(), rpal_send*() and rpal_recv*() (RPAL_MORE: sends
 * only); a bit a call does not take fails it with -EINVAL. */
#define RPAL_NONBLOCK 0x1   /* fail with -EAGAIN instead of waiting */
#define RPAL_MORE     0x2   /* send: more follows; defer the wake-up check */

/*
 * A received message.  data points either into the sender's arena (zero
 * copy; valid until rpal_msg_release()) or, for payloads of at most
 * RPAL_INLINE_MAX bytes, into inline_copy.
 */
struct rpal_msg {
	const void *data;
	uint32_t len;
	uint32_t flags;                          /* RPAL_MSG_* */
	uint64_t token;                          /* private: what release acks */
	unsigned char inline_copy[RPAL_INLINE_MAX];
};
#define RPAL_MSG_BUF 0x1   /* data is a buffer in the peer's arena */

/* ------------------------------------------------------- setup, teardown */

/* Fill *cfg with the defaults, then apply RPAL_* environment overrides. */
void rpal_config_default(struct rpal_config *cfg);

/*
 * Reserve the region, claim a slot and create this process's arena.  cfg may
 * be NULL (rpal_config_default()).  Calling it twice returns -EALREADY.
 * Other calls initialise with defaults on first use.  Errors: -EINVAL (a bad
 * field or RPAL_* variable, named by rpal_strerror), -EEXIST (something is
 * already mapped in the region), -EBUSY (no free slot), -EPERM (the runtime
 * directory is another user's or writable by anyone), -ENOTDIR,
 * -ENAMETOOLONG, -ENOMEM, -ENOTSUP or -ENOSPC (RPAL_PROTECT_REQUIRE without
 * PKU, or with every protection key taken), or the errno of a failed
 * system call.
 */
int rpal_init(const struct rpal_config *cfg);

/* Close every connection, release the slot, unmap the region. */
void rpal_fini(void);

/* This process's slot index, arena base and size; -ENOTCONN before init. */
int rpal_self(unsigned *slot, void **arena_base, size_t *arena_size);

/* --------------------------------------------------------- connections */

/*
 * Listen for connections on a service name.  A name maps to a Unix socket
 * "<runtime_dir>/<name>.sock"; a name starting with '/' is used as a path,
 * one starting with '@' is in the abstract namespace.  Returns a listening
 * descriptor that becomes readable when rpal_accept() has work, or -errno:
 * -EADDRINUSE when a live process already serves the name (a stale socket
 * left by a dead one is removed).
 */
int rpal_listen(const char *service, const struct rpal_policy *policy);

/*
 * Accept one connection: check the peer's credentials, exchange arenas and
 * doorbells, map the peer's arena read-only at its slot address.  Returns a
 * connection descriptor, -EAGAIN with RPAL_NONBLOCK when no handshake is
 * complete, or the error of a refused handshake (the refused peer is told
 * why; nothing stays mapped or open).  A peer that stalls is dropped after
 * handshake_ms without blocking other peers.
 */
int rpal_accept(int lfd, int flags);

/*
 * Connect to a service; blocks for at most handshake_ms (a full backlog
 * included).  flags must be 0.  Returns a connection descriptor or -errno:
 * -ENOENT/-ECONNREFUSED (no such service), -EACCES (credentials refused, by
 * either side), -EPROTO (the peer spoke garbage), -ETIMEDOUT, -EADDRINUSE
 * (the peer claims our slot), -EINVAL (flags).
 */
int rpal_connect(const char *service, const struct rpal_policy *policy, int flags);

/*
 * SHUT_WR: stop sending; after draining, the peer reads end-of-stream
 * (rpal_recv returns 0) and sees EPOLLRDHUP.  SHUT_RD: stop receiving; our
 * threads blocked on fd wake, receives return what was queued then 0, and
 * the peer's sends fail with -EPIPE.  SHUT_RDWR: both.  Others: -EINVAL.
 */
int rpal_shutdown(int fd, int how);

/*
 * Close a connection, listener or rpal epoll descriptor; any other
 * descriptor is passed to close().  The descriptor is free at once.  A live
 * peer still reads what we sent, then end of stream: our connection block
 * and the buffers it holds are kept until it closes too (or dies, or 10 s
 * pass), then return to the allocator.  The peer's arena is unmapped once
 * no connection to that peer remains.
 */
int rpal_close(int fd);

/* What we know about a connection. */
struct rpal_conn_info {
	pid_t peer_pid;
	uid_t peer_uid;
	gid_t peer_gid;
	unsigned peer_slot;
	int peer_alive;             /* 0 once hang-up or death was seen */
	uint64_t tx_msgs, rx_msgs;  /* messages sent and received */
	uint64_t wakeups;           /* wake-up syscalls made for the peer */
	uint64_t sleeps;            /* times we slept waiting on this connection */
	unsigned bufs_outstanding;  /* our buffers the peer holds, not yet acked */
	uint64_t bytes_outstanding; /* their size in our arena (allocator blocks) */
	uint64_t budget;            /* the most it may hold (rpal_config.conn_budget) */
};
int rpal_conn_info(int fd, struct rpal_conn_info *info);

/*
 * A connection's counters since it was made, as `rpal stat` shows them to
 * other processes (see rpal_conn_stats(3)).  Each is written by one thread
 * (the sending or the receiving one) without locks: read while they run,
 * each value is whole but they are not a snapshot of one instant.
 */
struct rpal_conn_stats {
	uint64_t id;                /* this process's connection number, from 1 */
	int64_t since;              /* CLOCK_REALTIME seconds at the handshake */
	uint64_t msgs_sent, msgs_received;
	uint64_t bytes_sent, bytes_received;      /* payload bytes */
	uint64_t wakeups_sent;      /* wake-up syscalls for the peer's receiver */
	uint64_t wakeups_avoided;   /* wake-up checks that found it awake */
	uint64_t room_wakeups;      /* wake-up syscalls for the peer's sender (room) */
	uint64_t tx_sleeps, rx_sleeps;            /* sleeps for room, for messages */
	uint64_t ring_full;         /* sends that found the ring or the quota full */
	uint64_t tx_spin_ns, rx_spin_ns;          /* ns spent spinning before waits ended */
	uint64_t bufs_out;          /* our buffers the peer holds, not yet acked */
	uint64_t bufs_held;         /* its buffers we hold (rpal_recv_msg), not released */
	uint64_t violations;        /* protocol violations of the peer seen */
};
int rpal_conn_stats(int fd, struct rpal_conn_stats *st);

/* ------------------------------------------------------ send and receive */

/*
 * One-copy send of one message.  Payloads up to RPAL_INLINE_MAX bytes travel
 * in the ring slot; larger ones are copied into a buffer of our arena that
 * the receiver acknowledges.  Blocks while the ring or the buffer quota is
 * full, unless RPAL_NONBLOCK.  RPAL_MORE publishes the message but defers
 * waking the peer to a later send without it or rpal_flush().  Returns len,
 * -EAGAIN (RPAL_NONBLOCK, ring or quota full), -ENOMEM (arena exhausted: at
 * once, even when blocking), -EPIPE (we shut down, or the peer closed),
 * -ECONNRESET (peer gone), -EMSGSIZE (more than half the arena), -EINVAL
 * (len 0), -EPROTO (the peer broke the protocol).
 */
ssize_t rpal_send(int fd, const void *buf, size_t len, int flags);

/*
 * Send n messages, msgs[i] each, with one wake-up check.  Only the first may
 * wait; the batch stops early at a full ring.  Returns the number sent (an
 * error only if the first could not be sent).
 */
int rpal_send_batch(int fd, const struct iovec *msgs, unsigned n, int flags);

/*
 * One-copy receive of one message into buf.  Returns its length, 0 at end of
 * stream, -EAGAIN (RPAL_NONBLOCK, nothing there), -EMSGSIZE (buf too small;
 * the message stays queued), -ECONNRESET (peer gone, queue drained), -EPROTO
 * (the peer broke the protocol; the connection is closed for I/O).
 */
ssize_t rpal_recv(int fd, void *buf, size_t len, int flags);

/*
 * Zero-copy receive of up to n (>= 1) messages.  Returns the count, 0 at end
 * of stream, or -errno as rpal_recv().  Each message must be given back with
 * rpal_msg_release(), exactly once, on the same connection (in any order);
 * msgs[i].data may point into msgs[i] itself, so do not copy the struct.
 */
int rpal_recv_msg(int fd, struct rpal_msg *msgs, unsigned n, int flags);

/* Acknowledge messages from rpal_recv_msg(); the sender's buffers are freed. */
int rpal_msg_release(int fd, struct rpal_msg *msgs, unsigned n);

/*
 * Zero-copy send.  rpal_buf_alloc() returns len bytes (at most half the
 * arena) in our own arena, 64-byte aligned and visible to every peer at the
 * same address, or NULL when the arena is exhausted.  rpal_send_buf() passes
 * ownership to the peer and returns 0; the buffer returns to the allocator
 * when the peer releases it or is gone.  It fails at once with -EINVAL (not
 * a live buffer of >= len bytes) or -EBUSY (already in flight), otherwise as
 * rpal_send(); on error the caller still owns the buffer.  rpal_buf_free()
 * frees a buffer that was never sent (one in flight is left alone).
 */
void *rpal_buf_alloc(size_t len);
void rpal_buf_free(void *buf);
int rpal_send_buf(int fd, void *buf, size_t len, int flags);

/* Wake the peer, if it sleeps, for messages sent with RPAL_MORE. */
int rpal_flush(int fd);

/* ------------------------------------------------------------------ epoll */

/* Extra event bits, as in the RPAL RFC: a user-space readable/writable. */
#define EPOLLRPALIN  0x00020000u
#define EPOLLRPALOUT 0x00040000u

/*
 * An epoll instance that also waits on rpal connections.  Ordinary
 * descriptors behave as with epoll(7) (plain epoll_ctl() on the returned fd
 * works for them too).  For an rpal connection, EPOLLIN/EPOLLRPALIN,
 * EPOLLOUT/EPOLLRPALOUT, EPOLLRDHUP, EPOLLHUP, EPOLLERR, EPOLLET and
 * EPOLLONESHOT mean what they mean for a socket.  rpal connection events are
 * found in user space, with no system call, when they are ready; ordinary
 * descriptors are still polled at least every 16 calls.  A connection can
 * be in one rpal epoll set at a time (rpal_epoll_ctl: EBUSY).  A signal ends
 * a sleeping rpal_epoll_wait() with EINTR.
 */
int rpal_epoll_create(int flags);
int rpal_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
int rpal_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);

/* ---- safety ---- */

/*
 * Run fn(arg); if fn faults with SIGSEGV or SIGBUS (a garbage pointer, a
 * write into a peer's read-only arena, a peer arena already unmapped), return
 * -EFAULT instead of dying.  Otherwise return what fn returned, unchanged:
 * make fn return >= 0 on success, and no -EFAULT of its own, so the caller
 * can tell.  Calls nest; each thread has its own windows.  A fault outside
 * any window behaves as without rpal (the previous handler, or death by the
 * signal).  fn must not take locks, allocate or otherwise leave state
 * behind that a fault would abandon.  -EINVAL if fn is NULL.  With
 * protect_peers on, fn also runs with the window of every peer open, and
 * the caller's windows are as they were when the call returns (a fault
 * included).
 */
int rpal_access_safely(int (*fn)(void *arg), void *arg);

/*
 * Peer windows (protect_peers on): outside a window, this thread faults
 * (SIGSEGV, si_code SEGV_PKUERR) on any read of a peer's arena, zero-copy
 * messages from rpal_recv_msg() included.  rpal's own calls open what they
 * need.  rpal_peer_window_open() lets this thread read fd's peer's arena
 * (only that peer's, and those that share its key once keys run out) and
 * returns a cookie >= 0; rpal_peer_window_close() puts this thread's
 * windows back as they were before that open.  Pairs nest and must close
 * in reverse order on the thread that opened them.  With protection off,
 * or for a peer without a key, open returns 0 and close does nothing.
 * Errors: -ENOTCONN (fd is not a connection).  Not a security boundary:
 * code in this process can always open a window (WRPKRU is unprivileged);
 * it catches stray reads, such as of a message after its release.
 */
long rpal_peer_window_open(int fd);
void rpal_peer_window_close(long cookie);

/* ---- hosted mode ---- */

/*
 * Under `rpal run` several programs share one process.  A connection whose
 * peer is another program of the same process upgrades itself: a message to
 * a receiver parked in rpal_epoll_wait() is delivered by switching into it
 * on the sender's thread (the RPAL call).  These counters tell, per program,
 * how much of its code ran on other programs' threads.
 */
struct rpal_prog_stat {
	char name[64];              /* the program's path ("..." and its end when longer) */
	uint64_t calls;             /* RPAL calls into it */
	uint64_t call_cycles;       /* TSC cycles it ran on other programs' threads (estimated) */
	uint64_t handoffs;          /* syscalls in calls, handed to its own thread */
	int failed_signal;          /* a fault inside a call marked it failed; 0 none */
	int self;                   /* 1 for the calling program */
};

/*
 * Fill out[0..max) with one entry per program of this process's `rpal run`,
 * in launch order.  Returns the number of programs (which may exceed max),
 * 0 when the caller is not hosted, or -errno from rpal_init().
 */
int rpal_hosted_stat(struct rpal_prog_stat *out, unsigned max);

/* ------------------------------------------------------------ diagnostics */

/* Process-wide counters. */
struct rpal_stats {
	unsigned slot;
	void *arena_base;
	size_t arena_size;
	size_t arena_used;          /* bytes handed out by the allocator */
	uint64_t bufs_in_use;       /* live allocations: buffers, and one block
	                               per open or lingering connection */
	unsigned nr_conns;          /* open connections */
	unsigned nr_peers_mapped;   /* peer arenas currently mapped */
	char runtime_dir[108];      /* where this process's sockets and the slot lock live */
};
int rpal_stats(struct rpal_stats *st);

/*
 * Write to out the runtime directory that cfg names (NULL: the defaults and
 * the environment, as rpal_init(NULL) would use): where services' sockets,
 * slot locks and `rpal host` sockets live.  Does not initialise the library.
 * 0, or -ENAMETOOLONG when it does not fit in len bytes.
 */
int rpal_runtime_dir(const struct rpal_config *cfg, char *out, size_t len);

/*
 * A sentence for err, a call's negative result or a positive errno: the
 * detail of this thread's most recent rpal failure if it ended with that
 * errno, else strerror().  Never NULL.
 */
const char *rpal_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* RPAL_H */
