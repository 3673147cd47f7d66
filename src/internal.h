/* SPDX-License-Identifier: MIT */
/*
 * internal.h - librpal's private state.  Do not include from applications.
 *
 * Map of src/, by layer; each file uses only its own layer and those above
 * it in this list (src/CMakeLists.txt checks it at link time):
 *  base
 *   error.c      per-thread error detail, rpal_strerror
 *   config.c     defaults, environment overrides, validation
 *   cpu.c        which CPU the thread runs on, from glibc's rseq area
 *   lock.c       the mutex of the message paths: sleeping and waking
 *  mem
 *   region.c     the reserved region, slot claim, own arena, peer mappings
 *   stat.c       the statistics page: per-connection counters observers read
 *   alloc.c      the buffer allocator of our own arena
 *   mpk.c        protection keys: peer arenas unreadable outside windows
 *   safety.c     rpal_access_safely: recovery points for faults on peer memory
 *  wire
 *   ring.c       data and ack rings: produce, consume, validate
 *   handshake.c  hello encoding and checks (pure; fuzzed)
 *  core
 *   notify.c     spinning, sleeping and waking
 *   watch.c      the watcher thread: hang-ups and deaths wake futex sleepers
 *   init.c       the object table, init, fini, fork, rpal_close, stats
 *   policy.c     credential policies, service names
 *   conn.c       the handshake's common half, peer death, linger, close
 *   listen.c     rpal_listen, rpal_accept (the server's half)
 *   connect.c    rpal_connect (the client's half)
 *   msg.c        send and receive APIs
 *   epoll_set.c  rpal_epoll_create, rpal_epoll_ctl: a set and its registrations
 *   epoll.c      rpal_epoll_wait (epoll_park.h: its hosted park path)
 *  hosted
 *   call.c       RPAL calls into a parked receiver of our own process; the
 *                core sees it only through local.h (hosted_off.c stands in
 *                for it in a connected-only build, RPAL_HOSTED=OFF)
 */
#ifndef RPAL_INTERNAL_H
#define RPAL_INTERNAL_H

#include <errno.h>

#include "base.h"
#include "alloc.h"
#include "statpage.h"

/* ----------------------------------------------------- peer mappings */
struct rpal_peer {
	struct rpal_peer *next;
	unsigned slot;
	pid_t pid;
	bool local;         /* a program of our host: its arena is its own mapping, not ours */
	uint64_t arena_nonce;
	uintptr_t base;
	size_t size;
	int refs;           /* connections using this mapping */
	int dead;           /* pidfd or hang-up said so */
	int pkey;           /* protection key of the mapping, if pkru_bits */
	uint32_t pkru_bits; /* its PKRU access-disable bit; 0: not protected */
	/* Pages of the arena known written (one bit each), and the arena's
	 * memfd to look up the others (see peer_pages_known()); NULL and
	 * -1 where the peer shares our memory. */
	_Atomic uint64_t *written;
	int memfd;
};


/* --------------------------------------------------------- adaptive spin */
#define RPAL_SPIN_BUCKETS 10
struct rpal_spin {
	uint32_t max_ns;    /* ceiling: spin_us */
	uint8_t policy;     /* RPAL_WAIT_POLICY_* */
	/* Adaptive (spin.c): */
	bool probing;       /* this wait spins up to a sleep's cost */
	uint16_t probe_gap; /* one wait in probe_gap probes */
	uint16_t probe_left;
	uint16_t since_choice;
	uint32_t budget_ns; /* the spin of waits that do not probe; UINT32_MAX: the cap */
	uint32_t this_ns;   /* this wait's budget */
	uint16_t caught_share; /* of waits that spun the whole cap, those it caught (/65536) */
	uint16_t waking_pays; /* of recent spin-outs of a waking peer, those that paid (/65536) */
	uint16_t waking_left;   /* waits with one to go before such a spin-out regardless */
	uint8_t since_spun_out; /* waits since the last one, up to WAKING_RUN (spin.c) */
	uint16_t untimed;   /* waits counted but not timed while the cap pays */
	/* Of recent waits, per bucket of length: those that reached it, ended in it. */
	uint16_t reached[RPAL_SPIN_BUCKETS], ended[RPAL_SPIN_BUCKETS];
	/* Messages handled per wait (x256, recent average), after a wait its
	 * spin caught and after one that slept; the count at the last wait
	 * (marked: there is one). */
	uint16_t per_catch, per_sleep;
	bool slept, marked;
	uint64_t mark;
	/* How long this waiter's wake-ups take, from the peer's ring to our
	 * running (recent average, ns; 0: not measured), and the share of
	 * recent waits that ended sooner than that (/65536). */
	uint32_t wake_lat_ns;
	uint16_t short_share;
	/* When this wait and the one before ended, where timed (0: not). */
	uint64_t end_ns, last_end_ns;
	/* At the last sleep the wake page timed, the peer ran on a CPU the
	 * waiter may not run on. */
	bool apart;
};
void spin_init(struct rpal_spin *s, unsigned max_us, unsigned policy);
/* This wait's spin budget, ns (0: sleep at once).  msgs: the waiter's
 * count of messages handled so far (received, or sent for a wait for
 * room), which tells how many each kind of wait brings. */
uint64_t spin_budget(struct rpal_spin *s, uint64_t msgs);
/* This wait, of budget ns (spin_budget), began with the peer still waking
 * from a sleep we woke it from (waking) or not: whether to spin that
 * wake-up out before the budget. */
bool spin_waking(struct rpal_spin *s, bool waking, uint64_t budget);
/* The waiter's count of messages now means something else (an epoll set
 * gained or lost a connection): the next wait starts counting afresh. */
void spin_recount(struct rpal_spin *s);
/* What a wait's length says (spin.c, "wake-up latency"): the gap the peer
 * left; the peer's wake-up from a sleep we woke it from; or nothing of
 * either (it yielded to a peer on our CPU). */
enum wait_pace { PACE_PEER, PACE_WAKING, PACE_OURS };
/* After a wait that began at t0 (now_ns()) and a spin caught; or one that
 * ended after waited_ns, caught or not. */
void spin_caught(struct rpal_spin *s, uint64_t t0, enum wait_pace pace);
/* After a wait the first yield to a peer on our CPU ended: it cost this
 * thread one system call, whatever the peer ran meanwhile, and is learnt
 * as a wait of no length. */
void spin_caught_at_once(struct rpal_spin *s);
void spin_update(struct rpal_spin *s, uint64_t waited_ns);
/* Samples of what sleeping costs this process: a sleeper's CPU time, a
 * waker's FUTEX_WAKE or doorbell write. */
void spin_note_sleep_cpu(uint64_t ns);
void spin_note_wake(uint64_t ns);
uint64_t thread_cpu_ns(void);
/* The wake page's ring time beside a word (RPAL_WAKE_RUNG_OFF). */
static inline _Atomic uint64_t *wake_rung(const _Atomic uint32_t *word)
{
	return (_Atomic uint64_t *)(uintptr_t)((uintptr_t)word + RPAL_WAKE_RUNG_OFF);
}
/* Before a sleep on a wake page word: ask the waker for its ring time. */
static inline void rung_ask(const _Atomic uint32_t *word)
{
	store_relaxed(wake_rung(word), 0);
}
/* After it, for a wait that began at t0 and ended at now (now_ns()): when
 * the waker rang, or 0 if not within the wait (the peer wrote nothing, or
 * nonsense). */
static inline uint64_t rung_within(const _Atomic uint32_t *word, uint64_t t0, uint64_t now)
{
	uint64_t r = load_relaxed(wake_rung(word));

	return r > t0 && r <= now ? r : 0;
}
/* A sleep of the waiter s in a wait that began at t0, rung at rung, and
 * running again at now (now_ns()); apart: the peer runs on a CPU this
 * thread may not run on. */
void spin_note_wake_lat(struct rpal_spin *s, uint64_t t0, uint64_t rung, uint64_t now, enum wait_pace pace,
			bool apart);
/*
 * Is the n-th sleep or wake-up one to time?  One in 256: the sleeper's
 * CPU clock is a system call each side of the sleep, so sampling more
 * often shows in the wake-up latency, and the costs move slowly.
 */
static inline bool spin_cost_sample(uint64_t n) { return (n & 255) == 0; }

/* --------------------------------------------------------- objects */
/*
 * Every rpal object (connection, listener, epoll set) begins with a struct
 * rpal_obj; the table (init.c) maps descriptors to them, and what the
 * process does to all its objects at once goes through its kind's ops.
 */
enum rpal_kind { OBJ_CONN = 1, OBJ_LISTENER, OBJ_EPOLL, OBJ_NR_KINDS };

struct rpal_obj {
	enum rpal_kind kind;
};

struct rpal_obj_ops {
	void (*close)(struct rpal_obj *o);         /* rpal_close() */
	/* In a forked child: free our copy of the bookkeeping, touching no
	 * memory shared with the parent or a peer; the caller closes fd. */
	void (*forget_child)(struct rpal_obj *o);
	/* A hosted program failed in a call: let its peers see it now,
	 * touching nothing else (its code may have left locks held).  NULL:
	 * nothing to hang up. */
	void (*hang_up)(struct rpal_obj *o, int fd);
};
extern const struct rpal_obj_ops conn_ops, listener_ops, epoll_ops;

struct rpal_ep_reg;

struct rpal_conn {
	struct rpal_obj obj;          /* OBJ_CONN */
	int fd;                       /* the Unix socket: the user's handle */
	uint32_t pkru_bits;           /* = peer->pkru_bits, next to what conn_get reads */

	/* My side: in my arena. */
	struct rpal_block *me;
	struct rpal_slot *ring;       /* my data ring */
	uint32_t ring_mask;
	struct rpal_ack *acks;        /* my ack ring */
	uint32_t ack_mask;

	/* Peer side: read-only mapping; geometry copied from the hello,
	 * never re-read from shared memory. */
	struct rpal_peer *peer;
	const struct rpal_block *pb;
	const struct rpal_slot *pring;
	uint32_t pring_mask;
	const struct rpal_ack *packs;
	uint32_t pack_mask;
	uint64_t pnonce;

	/*
	 * Thread model: the producer side (fields marked P) belongs to the
	 * sending thread, the consumer side (C) to the receiving thread.
	 * Either may notice a death or a violation: those flags are atomic.
	 * The outstanding set is also touched by death handling and by epoll's
	 * EPOLLOUT check, so it has a lock of its own.
	 */
	_Atomic bool dead;            /* peer gone: hang-up or exit */
	_Atomic int err;              /* sticky: EPROTO after a violation */
	_Atomic uint32_t peer_state;  /* RPAL_STATE_* seen in its block */

	/* Producer state (mirrors of what I publish). */
	uint64_t tail;                /* P */
	uint64_t head_cache;          /* P: last peer rx_head seen */
	uint64_t published;           /* P: tail at the last wake-up check */
	_Atomic uint64_t last_rung_rx; /* P: peer's waiting word when I last woke it */

	/* Consumer state. */
	uint64_t rx_head;             /* C */
	uint64_t rx_checked;          /* C: rx_head at the last TX-waiter check */
	uint64_t ack_tail;            /* C: acks I have produced */
	_Atomic uint64_t last_rung_tx; /* C: peer's waiting word when I last woke it */

	struct rpal_lock out_lock;    /* ack_head, out, out_bytes */
	_Atomic uint64_t ack_head;    /* peer acks I have consumed (written under out_lock) */
	struct bufset out;            /* my buffers the peer holds */
	_Atomic uint64_t out_bytes;   /* their allocator blocks' size (written under out_lock) */
	_Atomic uint64_t want_bytes;  /* P: block size of the buffer send waiting for quota (epoll reads) */
	unsigned out_limit;           /* = peer's ack_entries */
	struct bufset held;           /* C: the peer's buffers rpal_recv_msg gave out, not released */

	/* RPAL_FEAT_WAKE_PAGE: the shared page, my word (I sleep on it) and
	 * the peer's (I wake it there); NULL: wake_seq and futex_waitv. */
	struct rpal_wake_page *wake_page;
	_Atomic uint32_t *wake_mine, *wake_peer;
	/* conn_wait()'s sleepers on wake_mine, RX and TX: the peer can put
	 * that word back after we bump it, so a wake-up they must not miss
	 * is repeated until they are out (conn_wake_locked()). */
	_Atomic uint32_t asleep_mine[2];
	/* The watcher saw the peer hang up or exit: sleepers leave at once
	 * and poll it themselves, outside the count above. */
	_Atomic bool hung_up;

	int doorbell;                 /* mine: the peer rings it; I sleep on it */
	int peer_doorbell;            /* the peer's: I ring it */
	_Atomic bool bell_dirty;      /* my doorbell has bytes to drain (any of our sleepers) */
	_Atomic bool bell_eof;        /* the peer shut its end down: stays readable, rings no more */
	/* Our sleepers on this connection, 16 bits per kind (notify.c). */
	_Atomic uint64_t wait_count;
	int pidfd;

	/* Liveness polls, by a sender or a receiver that finds nothing (both
	 * may at once: relaxed atomics; a lost update costs one poll more). */
	_Atomic uint64_t last_peer_poll;  /* now_ns() of the last poll */
	_Atomic uint32_t idle_polls;      /* empty non-blocking calls, to ration clock reads */
	_Atomic uint32_t watch_seen;      /* watch_seq when we last polled the peer */
	_Atomic bool shut_wr;         /* P: we shut down writing (a set's waiter reads it) */
	/* We shut down reading (any thread): receives end once the ring is
	 * empty, and our sleepers look again. */
	_Atomic bool shut_rd;
	/* C: a receive returned end of stream.  It stays there: a slot the
	 * peer publishes after its SHUT_WR was read is not delivered. */
	_Atomic bool rx_eof;
	/* Written when reading is shut down, for sleepers in poll() (no wake
	 * page, no futex_waitv); -1 where none sleeps there. */
	int shut_kick;
	bool sock_empty;              /* fd refuses descriptors and held none: a plain close is safe */

	struct rpal_ep_reg *reg;      /* at most one rpal epoll set */
	/* That set, for the watcher thread (read under rpal_g.lock). */
	struct rpal_ep *_Atomic set;
	struct rpal_spin rx_spin, tx_spin;

	bool local;                   /* hosted mode: the peer shares our address space */
	int peer_prog;                /* hosted mode: its program index, else -1 */
	_Atomic bool local_gone;      /* local peer hung up or its process ended (watcher) */
	pid_t peer_pid;
	uid_t peer_uid;
	gid_t peer_gid;
	/* Counters: our entry of the statistics page (stat.c), or a private
	 * one.  Its tx line is P's, its rx line C's (statpage.h). */
	struct rpal_stat_conn *st;
};

/* Handshakes a listener keeps in progress at once (see accept_new()). */
#define RPAL_PENDING_MAX 64
struct rpal_pending {             /* an accepted socket mid-handshake */
	int fd;
	uint64_t deadline_ns;
};

struct rpal_listener {
	struct rpal_obj obj;          /* OBJ_LISTENER */
	int fd;                       /* the user's handle: an epoll of sock + pending + timer */
	int sock;
	int timer;                    /* fires at the first pending deadline */
	int lockfd;                   /* held while we serve the name */
	char path[108];
	char service[64];             /* the name served, for the statistics page */
	struct rpal_stat_conn *st;    /* its entry there (NULL: none, out of memory) */
	struct rpal_policy policy;
	uid_t *uids;
	gid_t *gids;
	struct rpal_pending pending[RPAL_PENDING_MAX];
	unsigned nr_pending;
};

/*
 * A closed connection whose peer may still read our block: messages it has
 * not consumed, our end-of-stream, buffers it holds.  Freed when the peer
 * closes too (hang-up on our private dup of the socket), dies, or after
 * RPAL_LINGER_MS.
 */
struct rpal_linger {
	struct rpal_linger *next;
	int sock;
	bool sock_empty;              /* as the connection's */
	struct rpal_block *me;
	struct rpal_peer *peer;
	struct bufset out;
	uint64_t deadline_ns;
};
#define RPAL_LINGER_MS 10000

/* ----------------------------------------------------------- globals */
struct rpal_global {
	pthread_mutex_t lock;         /* object table, peers, init */
	_Atomic bool inited;    /* stored last, after all the rest: read unlocked */
	struct rpal_config cfg;
	char rundir[108];
	uintptr_t region;             /* reserved region base */
	size_t region_size;
	unsigned slot;
	int slot_lockfd;
	int memfd;
	struct rpal_arena_hdr *arena;
	struct rpal_alloc *alloc;
	struct rpal_lock alloc_lock;
	_Atomic uint64_t arena_used;  /* the allocator's count, for quota checks that take no lock */
	struct rpal_peer *peers;
	struct rpal_linger *lingering;
	unsigned nr_conns;
	uint64_t tsc_dummy;
	/* The statistics page (stat.c); stat NULL: none. */
	struct rpal_stat_hdr *stat;
	int statfd;
	uint32_t stat_free;           /* no free entry below this one */
	uint64_t stat_ids;            /* connections numbered so far */
	uint64_t stat_ns0, stat_tsc0; /* the clock and the TSC at one instant (spin_tsc to ns) */
	char statpath[128];
};
extern struct rpal_global rpal_g;

int rpal_ensure_init(void);

/* region.c */
int region_setup(void);
void region_teardown(void);
uintptr_t slot_base(unsigned slot);
int peer_map(int memfd, const struct rpal_hello *h, pid_t pid, struct rpal_peer **out);
void peer_put(struct rpal_peer *p);
bool peer_pages_check(struct rpal_peer *p, uintptr_t addr, size_t len);
const char *map_count_note(int err, char *buf, size_t len);

/*
 * Has the peer written every page of [addr, addr + len) of its arena (a
 * range inside it, len > 0), as far as we know already?  Reading a page of
 * a memory file that nobody wrote allocates it, and charges it to the
 * reader: a peer that published buffers over its untouched pages would
 * fill our memory cgroup at no cost of its own.  Pages once written stay
 * so (the arena's future-write seal forbids punching holes), so each is
 * looked up once (peer_pages_check(), also for a range of more than 64
 * pages, which this inline look leaves to it).
 */
static inline bool peer_pages_known(const struct rpal_peer *p, uintptr_t addr, size_t len)
{
	size_t first, last;
	uint64_t want;

	if (!p->written)
		return true;
	first = (addr - p->base) / RPAL_PAGE;
	last = (addr + len - 1 - p->base) / RPAL_PAGE;
	if (first / 64 != last / 64)
		return false;
	want = (~0ull << (first % 64)) & (~0ull >> (63 - last % 64));
	return (load_relaxed(&p->written[first / 64]) & want) == want;
}
void *arena_alloc(size_t len);
long arena_free(void *p);
long arena_claim(void *p, size_t len);
void arena_unclaim(void *p);
bool arena_in_flight(void *p);

/* stat.c: the statistics page. */
void stat_setup(void);
void stat_teardown(void);
void stat_forget_child(void);
struct rpal_stat_conn *stat_conn_open(const struct rpal_stat_conn *id);
void stat_conn_close(struct rpal_stat_conn *e);
void stat_conn_forget(struct rpal_stat_conn *e);
uint64_t stat_spin_ns(uint64_t cycles);
void stat_note_cost(bool wake, uint32_t ns);
void stat_note_wake_lat(uint32_t ns);

/* Inline: a quota check runs on every buffer send. */
/* Unallocated bytes of our arena's heap. */
static inline uint64_t arena_free_bytes(void)
{
	uint64_t heap = rpal_g.cfg.arena_size - RPAL_PAGE, used = load_relaxed(&rpal_g.arena_used);

	return used < heap ? heap - used : 0;
}

/* rpal_config.conn_budget, 0 resolved. */
static inline uint64_t conn_budget(void)
{
	return rpal_g.cfg.conn_budget ? rpal_g.cfg.conn_budget : rpal_g.cfg.arena_size / 4;
}

/* What data buffers leave free, for connection blocks. */
static inline uint64_t arena_reserve(void)
{
	uint64_t r = rpal_g.cfg.arena_size / 64;

	return r < (1u << 20) ? r : (1u << 20);
}

/* init.c: the object table, indexed by descriptor. */
/* Two-level table indexed by descriptor; lookups take no lock. */
#define OBJ_CHUNK 1024
#define OBJ_TOP   1024
extern struct rpal_obj *_Atomic *_Atomic obj_top[OBJ_TOP];

static inline struct rpal_obj *obj_get(int fd)
{
	struct rpal_obj *_Atomic *chunk;

	if (fd < 0 || fd >= OBJ_CHUNK * OBJ_TOP)
		return NULL;
	chunk = atomic_load_explicit(&obj_top[fd / OBJ_CHUNK], memory_order_acquire);
	return chunk ? atomic_load_explicit(&chunk[fd % OBJ_CHUNK], memory_order_acquire) : NULL;
}

int obj_set(int fd, struct rpal_obj *obj);
/* The object of kind k named by fd, or NULL. */
static inline struct rpal_obj *obj_get_kind(int fd, enum rpal_kind k)
{
	struct rpal_obj *o = obj_get(fd);

	return o && o->kind == k ? o : NULL;
}
void obj_clear(int fd);
void obj_walk(void (*fn)(int fd, struct rpal_obj *_Atomic *slot));
int conn_get_failed(int fd);

/* The name a service shows in the statistics: a path's last component. */
static inline const char *service_label(const char *service)
{
	const char *slash = service[0] == '/' ? strrchr(service, '/') : NULL;

	return slash && slash[1] ? slash + 1 : service;
}

/* The connection named by fd, or NULL. */
static inline struct rpal_conn *conn_of(int fd)
{
	return (struct rpal_conn *)obj_get_kind(fd, OBJ_CONN);   /* obj is its first member */
}

/* The connection named by fd, or NULL with *err set.  Inline, as are the
 * few helpers below that every message runs: a hosted call is a few
 * hundred cycles, and each call instruction is a visible part of it. */
static inline struct rpal_conn *conn_get(int fd, int *err)
{
	struct rpal_conn *c = conn_of(fd);

	if (unlikely(!c))
		*err = conn_get_failed(fd);
	return c;
}
void conn_mark_dead(struct rpal_conn *c, bool process_exited);
int conn_poll_peer(struct rpal_conn *c);
int conn_hung_up(const struct rpal_conn *c);
/* Acquire: a reader that finds the peer dead then looks at the ring for
 * what it published before it died, which whoever marked it saw first. */
static inline bool conn_dead(const struct rpal_conn *c) { return load_acquire(&c->dead); }
static inline int conn_err(const struct rpal_conn *c) { return load_relaxed(&c->err); }

/* The peer broke the protocol: the connection is closed for I/O (sticky),
 * and our block says so, so that the peer's sends fail and its receives
 * end instead of waiting on us.  The sender (acks) and the receiver
 * (slots) may both find one at once: the count is an atomic add, off the
 * message path. */
static inline void conn_violation(struct rpal_conn *c)
{
	store_relaxed(&c->err, EPROTO);
	atomic_fetch_or_explicit(&c->me->state, RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED, memory_order_release);
	atomic_fetch_add_explicit(&c->st->rx.violations, 1, memory_order_relaxed);
	atomic_fetch_or_explicit(&c->st->status, RPAL_STAT_ERROR, memory_order_relaxed);
}
bool conn_poll_peer_if_idle(struct rpal_conn *c, int flags);
void conn_reclaim(struct rpal_conn *c);
bool linger_sweep(bool teardown);      /* true while some still linger */
bool conns_reap_acks(void);

/* handshake.c: pure functions of their arguments (fuzzed). */
/* Our place in the address map: what our hellos say, and what a peer's
 * must fit (region.c fills it from the process's state). */
struct rpal_geom {
	uint64_t region_base, slot_size, arena_size, arena_nonce;
	unsigned nr_slots, slot;
	pid_t pid;
};
void geom_self(struct rpal_geom *g);
void hello_fill(struct rpal_hello *h, const struct rpal_geom *g, uint16_t type, const struct rpal_block *blk,
		const char *service, uint32_t features);
int wake_page_check(int fd, char *why, size_t whylen);
int hello_check(const void *buf, size_t len, uint16_t want_type, struct rpal_hello *out,
		char *why, size_t whylen);
int hello_check_peer(const struct rpal_hello *h, const struct rpal_geom *g, char *why, size_t whylen);
void refuse_fill(struct rpal_refuse *r, int err, const char *reason);
int refuse_parse(const void *buf, size_t len, int *err, char *reason, size_t rlen);
int block_check(const struct rpal_block *pb, const struct rpal_hello *h, uintptr_t pbase,
		size_t psize, char *why, size_t whylen);
int hs_sendmsg(int sock, const void *msg, size_t len, const int *fds, int nfds);
int hs_recvmsg(int sock, void *buf, size_t cap, int *fds, int maxfds, int *nfds);
int memfd_check(int fd, uint64_t size, char *why, size_t whylen);
int doorbell_check(int fd, char *why, size_t whylen);
/* peerfd.c: descriptors a peer passed us, closed without blocking. */
/* The most descriptors one message can carry (the kernel's SCM_MAX_FD): a
 * control buffer this large is never truncated, so the kernel never
 * releases a peer's descriptor on our thread. */
#define SCM_MAX_FDS 253
/* recvmsg(2) of one message, non-blocking, with room for every descriptor
 * it can carry: they land in fds, their count in *nfds.  The byte count or
 * -errno; *flags are the message's. */
ssize_t peer_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int *flags);
/* Close, without blocking: what the peer passed us (its Unix sockets are
 * emptied by librpal's closer thread), or a socket of ours (emptied here). */
void peer_fds_drop(const int *fds, int n);
void peer_fd_close(int fd);
bool peer_fd_take_queued(int sock);
/* read(2) of a socket a peer writes to, non-blocking: the descriptors that
 * come with the bytes are closed without blocking (peer_fds_drop). */
ssize_t peer_recv(int fd, void *buf, size_t len);
/* Our doorbell ends refuse passed descriptors (SO_PASSRIGHTS, Linux 6.16). */
extern _Atomic bool bells_refuse_fds;

/*
 * Copy an inline payload (n <= RPAL_INLINE_MAX) with at most three pairs of
 * fixed-size moves, overlapping where n is not a multiple: the libc memcpy
 * costs a PLT jump and its size dispatch on every small message.
 */
_Static_assert(RPAL_INLINE_MAX <= 48, "copy_inline moves at most three 16-byte blocks");
static inline void copy_inline(void *dst, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;

	if (n >= 16) {
		memcpy(d, s, 16);
		if (n > 32)
			memcpy(d + 16, s + 16, 16);
		memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		memcpy(d, s, 8);
		memcpy(d + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		memcpy(d, s, 4);
		memcpy(d + n - 4, s + n - 4, 4);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/* ring.c */
struct rpal_block *block_create(unsigned ring_entries, unsigned ack_entries);
void block_retire(struct rpal_block *b);   /* a reading peer sees it is no longer its block */
void block_destroy(struct rpal_block *b);
int ring_reserve_slow(struct rpal_conn *c);
void ring_publish(struct rpal_conn *c, const void *data, uint32_t len, uint64_t addr, uint32_t flags);
int ring_peek(struct rpal_conn *c, struct rpal_slot *out, void *dst, size_t room); /* 1 ready, 0 empty, <0 violation */
int ring_check_buf_copy(struct rpal_conn *c);                /* after copying a buffer: 0 or -EPROTO */
bool ring_published(struct rpal_conn *c, uint64_t idx);
bool ring_writable(const struct rpal_conn *c, uint64_t *head);
int acks_drain(struct rpal_conn *c);             /* consume the peer's acks */
int ack_push(struct rpal_conn *c, uint64_t addr);

/* The only values an unwritten slot at index idx may hold: the previous
 * lap's seq, or 0 in the first lap.  Anything else is a message or a lie. */
static inline bool slot_empty(const struct rpal_conn *c, uint64_t idx, uint32_t seq)
{
	return seq == (uint32_t)(idx + 1 - (c->pring_mask + 1)) || (seq == 0 && idx <= c->pring_mask);
}

/* Where the consumer is, for any thread: epoll waiters look while another
 * thread receives, so they read the copy in our block, not c->rx_head. */
static inline uint64_t ring_head(const struct rpal_conn *c)
{
	return load_relaxed(&c->me->rx_head);
}

/* 0 if a slot is free, -EAGAIN if the ring is full.  Inline: our copy of
 * the peer's head answers nearly every send. */
static inline int ring_reserve(struct rpal_conn *c)
{
	if (likely(c->tail - c->head_cache <= c->ring_mask))
		return 0;
	return ring_reserve_slow(c);
}

/* Done with the slot ring_peek() copied: hand it back to the producer. */
static inline void ring_consume(struct rpal_conn *c, uint32_t len)
{
	c->rx_head++;
	/* R1: our reads of the slot happened before the producer may reuse it. */
	store_release(&c->me->rx_head, c->rx_head);
	stat_inc(&c->st->rx.msgs);
	stat_add(&c->st->rx.bytes, len);
}

/* Is there something to look at: a message, or a violation to report? */
static inline bool ring_readable(struct rpal_conn *c)
{
	uint64_t head = ring_head(c);

	if (conn_err(c))
		return true;
	return !slot_empty(c, head, load_relaxed(&c->pring[head & c->pring_mask].seq));
}

/*
 * The per-connection share of our arena (rpal(7), "Memory").  One arena
 * serves every connection, so a peer that stops releasing must not fill it:
 * what a peer holds stays under the connection's budget and under what is
 * left free once the new buffer is out, so a peer that stops takes at most
 * half of what the others left (rpal(7) says what that leaves after many).
 * A connection whose peer holds nothing may always send, arena permitting:
 * it then waits for nobody but its own peer.  allocated: the block is
 * already counted as used (rpal_send_buf).
 */
static inline bool quota_ok(const struct rpal_conn *c, uint64_t size, bool allocated)
{
	uint64_t held = load_relaxed(&c->out_bytes), avail = arena_free_bytes();

	if (c->out.count >= c->out_limit)
		return false;
	if (held == 0)
		return true;
	if (!allocated)
		avail = avail > size ? avail - size : 0;
	return held + size <= conn_budget() && held + size <= avail;
}

/* EPOLLOUT: a slot is free and the buffer a send last waited for fits
 * (with none waiting, any small one), so a woken writer does not spin. */
static inline bool send_ready(const struct rpal_conn *c, uint64_t *head)
{
	return ring_writable(c, head) && quota_ok(c, load_relaxed(&c->want_bytes), false);
}

/* notify.c */
enum { WANT_RX = 1, WANT_SLOT = 2, WANT_QUOTA = 4 };
void notify_wake_rx(struct rpal_conn *c, uint64_t w);
void notify_peer_tx_now(struct rpal_conn *c);
bool peer_waking(const struct rpal_conn *c);
void notify_peer_tx_closed(struct rpal_conn *c);
bool conn_sleeps_in_poll(const struct rpal_conn *c);

/*
 * After consuming or acking: wake a producer waiting for room.  It sleeps
 * for a slot only after it found the ring full with its flag already
 * advertised (W0).  If our last check missed the flag, that look saw our
 * head as of that check or later, so a whole ring was queued beyond it: we
 * consume a quarter of it before we can run empty, and the check there sees
 * the flag (W1).  So checking every quarter ring, and after every ack
 * (force), loses no wake-up and keeps the barrier off the per-message path,
 * also for a consumer that runs the ring empty after each message.
 */
static inline void notify_peer_tx(struct rpal_conn *c, bool force)
{
	if (force || c->rx_head - c->rx_checked >= (c->pring_mask + 1) / 4)
		notify_peer_tx_now(c);
}
int conn_wait(struct rpal_conn *c, uint32_t what, int flags);
void doorbell_drain(struct rpal_conn *c);
void wait_begin(struct rpal_conn *c, uint32_t bits);
void wait_end(struct rpal_conn *c, uint32_t bits);

/*
 * The peer's lifecycle bits (RPAL_STATE_*), cached once seen.  A3: the
 * acquire pairs with the release that stored them after its last slot (R3),
 * so a ring found empty after SHUT_WR is empty for good.  The cache passes
 * that order on (release in, acquire out): a thread that finds the bits
 * there, stored by another, must not read the ring as it was before them.
 */
static inline uint32_t peer_update(struct rpal_conn *c)
{
	uint32_t st = load_acquire(&c->peer_state);

	if (st != (RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED)) {
		uint32_t now = load_acquire(&c->pb->state) & (RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED);
		if (unlikely(now & ~st))
			st = atomic_fetch_or_explicit(&c->peer_state, now, memory_order_release) | now;
	}
	return st;
}

/* watch.c */
extern _Atomic uint32_t watch_seq;      /* bumped when any peer hangs up or dies */
/* Whom an event on a watched descriptor concerns: a connection or a set
 * (its descriptor below the tag). */
#define WATCH_CONN (1ull << 32)
#define WATCH_SET  (2ull << 32)
int watch_add(int fd, uint32_t events, uint64_t who);
void watch_del(int fd);
void watch_linger(int sock);
void watch_stop(void);
void watch_forget_child(void);
void watch_wake_conn(struct rpal_conn *c);

/* futex_waitv(2) (Linux 5.16); -1 with errno ENOSYS before that. */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
static inline long futex_waitv(struct futex_waitv *w, unsigned n, const struct timespec *abs_mono)
{
	return syscall(SYS_futex_waitv, w, n, 0, abs_mono, CLOCK_MONOTONIC);
}
static inline struct futex_waitv fwv(const _Atomic uint32_t *word, uint32_t val, bool shared)
{
	return (struct futex_waitv){ .val = val, .uaddr = (uintptr_t)word,
				     .flags = FUTEX_32 | (shared ? 0 : FUTEX_PRIVATE_FLAG) };
}

/* ------------------------------------------------------ protection keys
 * mpk.c.  With protect_peers on, each peer arena carries a protection key
 * whose access every thread's PKRU denies, except inside a window.  Every
 * call that reads a peer arena opens its window first; with protection off
 * that costs one well-predicted branch on a field of the connection. */
extern _Atomic bool mpk_on;
extern _Atomic uint32_t mpk_all_bits;   /* the bits of every key we hold */
int mpk_setup(unsigned mode);
void mpk_teardown(void);
int mpk_peer_attach(struct rpal_peer *p);
void mpk_peer_detach(struct rpal_peer *p);
uint64_t mpk_all_open(void);

/* rpal_epoll_wait: open every peer's window for the scan (protect_peers);
 * returns what mpk_all_end() needs, 0 when protection is off. */
static inline uint64_t mpk_all_begin(void)
{
	return likely(!load_relaxed(&mpk_on)) ? 0 : mpk_all_open();
}

#if defined(__x86_64__)
/* rdpkru and wrpkru by their encodings: no -mpku needed.  Only called once
 * a key exists, which proves the CPU and the kernel have PKU.  The memory
 * clobber keeps the compiler from moving peer accesses across a write; the
 * CPU does not run them early either (WRPKRU never executes transiently). */
static inline uint32_t pkru_read(void)
{
	uint32_t eax, edx;

	__asm__ __volatile__(".byte 0x0f,0x01,0xee" : "=a"(eax), "=d"(edx) : "c"(0));
	return eax;
}

static inline void pkru_write(uint32_t v)
{
	__asm__ __volatile__(".byte 0x0f,0x01,0xef" : : "a"(v), "c"(0), "d"(0) : "memory");
}
#else
/* No PKU (mpk.c never makes a key here): every key stays open. */
static inline uint32_t pkru_read(void) { return 0; }
static inline void pkru_write(uint32_t v) { (void)v; }
#endif

/*
 * Open the window of the keys whose access-disable bits are in bits.
 * Returns 0 when nothing had to change (no key, or already open: windows
 * nest), else a cookie with which mpk_close() puts PKRU back as it was.
 */
static inline uint64_t mpk_open(uint32_t bits)
{
	uint32_t old;

	if (likely(!bits))
		return 0;
	old = pkru_read();
	if (!(old & bits))
		return 0;
	pkru_write(old & ~bits);
	return (1ull << 32) | old;
}

static inline void mpk_close(uint64_t cookie)
{
	if (cookie)
		pkru_write((uint32_t)cookie);
}

/* The end of what mpk_all_begin() opened: a write only if PKRU changed. */
static inline void mpk_all_end(uint64_t cookie)
{
	if (cookie && pkru_read() != (uint32_t)cookie)
		pkru_write((uint32_t)cookie);
}

/* rpal_epoll_wait: a connection added while ep->lock was dropped may have a
 * key opened after mpk_all_begin(); call after retaking the lock. */
static inline void mpk_all_sync(void)
{
	if (unlikely(load_relaxed(&mpk_on)))
		mpk_open(load_relaxed(&mpk_all_bits));
}

/*
 * First thing in a public call on connection c, after conn_get(): if c's
 * peer is behind a key that this thread has shut, run call (the same public
 * call again, which then finds the window open) inside a window and return
 * its result.  Off, one well-predicted branch; on, the window opens once
 * per call, not per access: two PKRU writes (about 70 cycles) and reads.
 */
#define MPK_REENTER(c, call) do {						\
	uint32_t mpk_b_ = (c)->pkru_bits, mpk_o_;				\
	if (unlikely(mpk_b_) && ((mpk_o_ = pkru_read()) & mpk_b_)) {		\
		__typeof__(call) mpk_r_;					\
		pkru_write(mpk_o_ & ~mpk_b_);					\
		mpk_r_ = (call);						\
		pkru_write(mpk_o_);						\
		return mpk_r_;							\
	}									\
} while (0)

/* Hosted mode, as far as the core sees it. */
#include "local.h"

/*
 * After publishing: wake the consumer if it advertised sleep; in hosted
 * mode, first try to run it here (call.c) if may_call.  <0: the receiving
 * program failed in the call.  Inline: every frame between the public call
 * and the switch into the receiver costs a mispredicted return on each side
 * of the call (the switch leaves the other stack's return addresses in the
 * CPU's return stack buffer).
 */
static inline __attribute__((always_inline)) int notify_rx(struct rpal_conn *c, bool may_call)
{
	bool parker = false;
	uint64_t w;
	int ret;

	c->published = c->tail;
	if (unlikely(c->local)) {
		parker = load_relaxed(&c->pb->hosted_rcv) != 0;
		ret = call_deliver(c, may_call);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	smp_mb();       /* W1: our seq stores before the load of its flag (pairs with W0) */
	/* A local receiver that joined a set after our first look parks without
	 * advertising sleep; the set's lock release orders its store before its
	 * scan, and W1 ours: now one of us sees the other. */
	if (unlikely(c->local) && !parker && load_acquire(&c->pb->hosted_rcv)) {
		ret = call_deliver(c, may_call);
		if (ret)
			return ret < 0 ? ret : 0;
	}
	w = load_relaxed(&c->pb->waiting);
	if (unlikely(w & RPAL_WAIT_RX))
		notify_wake_rx(c, w);
	else
		stat_inc(&c->st->tx.wakeups_avoided);
	return 0;
}

static inline __attribute__((always_inline)) int notify_peer_rx(struct rpal_conn *c)
{
	return notify_rx(c, true);
}

/* For callers that hold locks a receiver run here could need (close). */
static inline void notify_peer_rx_nocall(struct rpal_conn *c)
{
	notify_rx(c, false);
}

/* epoll.c */
void epoll_conn_gone(struct rpal_conn *c);
void epoll_wake_futex(struct rpal_ep *ep);
void ep_kick(struct rpal_ep *ep);       /* wake a thread asleep in the set */

#endif /* RPAL_INTERNAL_H */
