/* SPDX-License-Identifier: MIT */
/*
 * conn.c - set-up and tear-down: init, listen, accept, connect, close, and
 * what happens when a peer goes away.
 *
 * A connection is named by its SOCK_SEQPACKET Unix socket.  After the
 * handshake the socket carries nothing; it stays open so that the peer's
 * exit or close shows as a hang-up.  A pidfd catches a peer that died while
 * a child of it still holds the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83   /* Linux 6.16; glibc defines it later */
#endif

/* ------------------------------------------------------------ objects */
void *_Atomic obj_top[OBJ_TOP];

/* Caller holds rpal_g.lock. */
int obj_set(int fd, void *obj)
{
	void *_Atomic *chunk;

	if (fd < 0 || fd >= OBJ_CHUNK * OBJ_TOP)
		return -EMFILE;
	chunk = atomic_load_explicit(&obj_top[fd / OBJ_CHUNK], memory_order_acquire);
	if (!chunk) {
		chunk = calloc(OBJ_CHUNK, sizeof(*chunk));
		if (!chunk)
			return -ENOMEM;
		atomic_store_explicit(&obj_top[fd / OBJ_CHUNK], chunk, memory_order_release);
	}
	atomic_store_explicit(&chunk[fd % OBJ_CHUNK], obj, memory_order_release);
	return 0;
}

void obj_clear(int fd)
{
	void *_Atomic *chunk;

	if (fd < 0 || fd >= OBJ_CHUNK * OBJ_TOP)
		return;
	chunk = atomic_load_explicit(&obj_top[fd / OBJ_CHUNK], memory_order_acquire);
	if (chunk)
		atomic_store_explicit(&chunk[fd % OBJ_CHUNK], NULL, memory_order_release);
}

int conn_get_failed(int fd)
{
	return rpal_fail(ENOTCONN, "descriptor %d is not an rpal connection", fd);
}

/* ------------------------------------------------------------ init */

static void atfork_child(void);

static int init_locked(const struct rpal_config *cfg)
{
	static bool atfork_done;
	int ret;

	if (cfg)
		rpal_g.cfg = *cfg;
	else
		rpal_config_default(&rpal_g.cfg);
	/* Under `rpal run`: the launcher's region, shared by all programs. */
	ret = host_setup(&rpal_g.cfg);
	if (ret)
		return ret;
	ret = rpal_config_check(&rpal_g.cfg);
	if (ret)
		return ret;
	ret = mpk_setup(rpal_g.cfg.protect_peers);
	if (ret)
		return ret;
	ret = region_setup();
	if (ret) {
		mpk_teardown();
		return ret;
	}
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, atfork_child);
		/* A hosted program's exit does not end the process: hang up
		 * its connections then, as a process exit would. */
		if (host_active())
			atexit(rpal_fini);
		atfork_done = true;
	}
	rpal_g.inited = true;
	return 0;
}

RPAL_EXPORT int rpal_init(const struct rpal_config *cfg)
{
	int ret;

	pthread_mutex_lock(&rpal_g.lock);
	ret = rpal_g.inited ? rpal_fail(EALREADY, "rpal_init: already initialised") : init_locked(cfg);
	pthread_mutex_unlock(&rpal_g.lock);
	return ret;
}

int rpal_ensure_init(void)
{
	int ret = 0;

	if (likely(rpal_g.inited))
		return 0;
	pthread_mutex_lock(&rpal_g.lock);
	if (!rpal_g.inited)
		ret = init_locked(NULL);
	pthread_mutex_unlock(&rpal_g.lock);
	return ret;
}

/* Call fn for every object in the table: its descriptor and table slot. */
static void obj_walk(void (*fn)(int fd, void *_Atomic *slot))
{
	int top, i;

	for (top = 0; top < OBJ_TOP; top++) {
		void *_Atomic *chunk = atomic_load(&obj_top[top]);
		if (!chunk)
			continue;
		for (i = 0; i < OBJ_CHUNK; i++)
			if (atomic_load(&chunk[i]))
				fn(top * OBJ_CHUNK + i, &chunk[i]);
	}
}

static void close_one(int fd, void *_Atomic *slot)
{
	(void)slot;
	rpal_close(fd);
}

/* Close every rpal object we know of. */
static void close_all(void)
{
	obj_walk(close_one);
}

/*
 * Hosted mode: this program failed inside an RPAL call and its thread is
 * about to end.  Hang up every connection so that peers see it at once;
 * nothing else is touched (the failed code may have left locks held).
 */
static void hang_up_one(int fd, void *_Atomic *slot)
{
	int *obj = atomic_load(slot);

	if (*obj == OBJ_CONN || *obj == OBJ_LISTENER)
		shutdown(*obj == OBJ_CONN ? fd : ((struct rpal_listener *)obj)->sock, SHUT_RDWR);
}

void conn_hangup_all(void)
{
	obj_walk(hang_up_one);
}

RPAL_EXPORT void rpal_fini(void)
{
	if (!rpal_g.inited)
		return;
	close_all();
	watch_stop();
	linger_sweep(true);
	pthread_mutex_lock(&rpal_g.lock);
	region_teardown();
	rpal_g.inited = false;
	pthread_mutex_unlock(&rpal_g.lock);
}

/*
 * A forked child inherits none of the region (MADV_DONTFORK) and must not
 * use, or keep open, the parent's connections: close our descriptors, free
 * our private copies of the bookkeeping (never touching arena memory, which
 * the child does not map), and let it rpal_init() afresh.  The slot lock's
 * open file description stays the parent's (closing our copy keeps it).
 */
static void forget_one(int fd, void *_Atomic *slot)
{
	int *obj = atomic_load(slot);

	atomic_store(slot, NULL);
	if (*obj == OBJ_CONN) {
		struct rpal_conn *c = (struct rpal_conn *)obj;
		close(c->doorbell);
		close(c->peer_doorbell);
		close(c->pidfd);
		bufset_free(&c->out);
		bufset_free(&c->held);
		if (c->wake_page)
			munmap(c->wake_page, RPAL_WAKE_PAGE_SIZE);
		free(c);
	} else if (*obj == OBJ_LISTENER) {
		struct rpal_listener *l = (struct rpal_listener *)obj;
		close(l->sock);
		close(l->timer);
		if (l->lockfd >= 0)
			close(l->lockfd);
		for (unsigned k = 0; k < l->nr_pending; k++)
			close(l->pending[k].fd);
		free(l->uids);
		free(l->gids);
		free(l);
	} else if (*obj == OBJ_EPOLL) {
		epoll_forget_child(obj);
	}
	close(fd);
}

static void atfork_child(void)
{
	pthread_mutex_init(&rpal_g.lock, NULL);
	pthread_mutex_init(&rpal_g.alloc_lock, NULL);
	watch_forget_child();
	host_forget_child();    /* not one of the launcher's programs any more */
	obj_walk(forget_one);
	while (rpal_g.lingering) {
		struct rpal_linger *l = rpal_g.lingering;
		rpal_g.lingering = l->next;
		close(l->sock);
		bufset_free(&l->out);
		free(l);
	}
	/* The region is not mapped here (MADV_DONTFORK): unmapping it is a no-op. */
	region_teardown();
	memset(&rpal_g.cfg, 0, sizeof(rpal_g.cfg));
	rpal_g.inited = false;
	rpal_g.nr_conns = 0;
}

/* ------------------------------------------------------------ policy */

static int policy_copy(struct rpal_listener *l, const struct rpal_policy *p)
{
	l->policy.allow_same_uid = 1;
	if (!p)
		return 0;
	l->policy = *p;
	l->uids = NULL;
	l->gids = NULL;
	if (p->nr_uids) {
		l->uids = malloc(p->nr_uids * sizeof(uid_t));
		if (!l->uids)
			return -ENOMEM;
		memcpy(l->uids, p->uids, p->nr_uids * sizeof(uid_t));
	}
	if (p->nr_gids) {
		l->gids = malloc(p->nr_gids * sizeof(gid_t));
		if (!l->gids)
			return -ENOMEM;
		memcpy(l->gids, p->gids, p->nr_gids * sizeof(gid_t));
	}
	l->policy.uids = l->uids;
	l->policy.gids = l->gids;
	return 0;
}

/* Check SO_PEERCRED of sock against policy (NULL: same uid). */
static int cred_check(int sock, const struct rpal_policy *p, struct ucred *uc, char *why, size_t whylen)
{
	socklen_t len = sizeof(*uc);
	unsigned i;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, uc, &len) < 0) {
		snprintf(why, whylen, "cannot read peer credentials");
		return -errno;
	}
	if ((!p || p->allow_same_uid) && uc->uid == geteuid())
		return 0;
	for (i = 0; p && i < p->nr_uids; i++)
		if (p->uids[i] == uc->uid)
			return 0;
	for (i = 0; p && i < p->nr_gids; i++)
		if (p->gids[i] == uc->gid)
			return 0;
	snprintf(why, whylen, "peer pid %d uid %u gid %u is not allowed by policy",
		 (int)uc->pid, (unsigned)uc->uid, (unsigned)uc->gid);
	return -EACCES;
}

/* ------------------------------------------------------------ names */

static int service_addr(const char *service, struct sockaddr_un *sa, socklen_t *len, char *lockpath, size_t lplen)
{
	size_t n;
	int w;

	if (!service || !*service)
		return rpal_fail(EINVAL, "empty service name");
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	lockpath[0] = 0;
	if (service[0] == '@') {
		n = strlen(service);
		if (n > sizeof(sa->sun_path))
			return rpal_fail(ENAMETOOLONG, "service name %s is too long", service);
		memcpy(sa->sun_path + 1, service + 1, n - 1);
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
		return 0;
	}
	if (service[0] == '/')
		w = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", service);
	else if (strchr(service, '/'))
		return rpal_fail(EINVAL, "service name %s contains '/' (use an absolute path)", service);
	else
		w = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s.sock", rpal_g.rundir, service);
	if (w < 0 || (size_t)w >= sizeof(sa->sun_path))
		return rpal_fail(ENAMETOOLONG, "socket path for service %s is too long", service);
	snprintf(lockpath, lplen, "%s.lock", sa->sun_path);
	*len = sizeof(*sa);
	return 0;
}

/* ------------------------------------------------------------ connections */

/* The wake page (RPAL_FEAT_WAKE_PAGE), mapped read-write; NULL on failure. */
static struct rpal_wake_page *wake_page_map(int fd)
{
	void *p = mmap(NULL, RPAL_WAKE_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The accepting side makes it: sealed so that neither side can shrink it
 * under the other's mapping.  NULL (no wake page) if the kernel says no. */
static struct rpal_wake_page *wake_page_create(int *fd)
{
	struct rpal_wake_page *p;

	*fd = memfd_create("rpal-wake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0)
		return NULL;
	if (ftruncate(*fd, RPAL_WAKE_PAGE_SIZE) < 0 ||
	    fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 || !(p = wake_page_map(*fd))) {
		close(*fd);
		*fd = -1;
		return NULL;
	}
	return p;
}

/* Build a connection from a checked hello; the caller holds rpal_g.lock.
 * On success takes ownership of sock, bell (ours), ring (theirs) and the
 * wake page, if any (side: 0 we connected, 1 we accepted). */
static int conn_create(int sock, struct rpal_block *me, int bell, int ring, const struct rpal_hello *h,
		       const struct ucred *uc, int memfd, struct rpal_wake_page *page, int side,
		       struct rpal_conn **out, char *why, size_t whylen)
{
	struct rpal_conn *c = calloc(1, sizeof(*c));
	uint64_t w;
	int ret;

	if (!c)
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	c->kind = OBJ_CONN;
	c->fd = sock;
	c->pidfd = -1;
	if (page) {
		c->wake_mine = &page->word[side][0];
		c->wake_peer = &page->word[!side][0];
	}
	ret = peer_map(memfd, h, uc->pid, &c->peer);
	if (ret) {
		snprintf(why, whylen, "%s", rpal_strerror(ret));
		free(c);
		return ret;
	}
	c->pb = (const struct rpal_block *)(uintptr_t)h->block;
	c->pkru_bits = c->peer->pkru_bits;
	w = mpk_open(c->pkru_bits);
	ret = block_check(c->pb, h, c->peer->base, c->peer->size, why, whylen);
	mpk_close(w);
	if (ret)
		goto fail;
	ret = bufset_init(&c->out, h->ack_entries);
	if (!ret)
		ret = bufset_init(&c->held, me->ack_entries);
	if (ret) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	c->pidfd = (int)syscall(SYS_pidfd_open, uc->pid, 0);
	if (c->pidfd < 0) {
		ret = -errno;
		snprintf(why, whylen, "cannot open a pidfd for peer pid %d", (int)uc->pid);
		goto fail;
	}
	fcntl(c->pidfd, F_SETFD, FD_CLOEXEC);
	/* Hang-up or death wakes futex sleepers through the watcher thread;
	 * a bump from here on makes a sleeper poll this peer (conn_wait). */
	store_relaxed(&c->watch_seen, load_acquire(&watch_seq));
	ret = watch_add(sock, EPOLLRDHUP, WATCH_CONN | (uint32_t)sock);
	if (!ret)
		ret = watch_add(c->pidfd, EPOLLIN, WATCH_CONN | (uint32_t)sock);
	if (ret) {
		watch_del(sock);
		snprintf(why, whylen, "%s", rpal_strerror(ret));
		goto fail;
	}
	c->me = me;
	c->ring = (struct rpal_slot *)((char *)me + me->ring_off);
	c->ring_mask = me->ring_entries - 1;
	c->acks = (struct rpal_ack *)((char *)me + me->ack_off);
	c->ack_mask = me->ack_entries - 1;
	c->pring = (const struct rpal_slot *)(uintptr_t)(h->block + sizeof(struct rpal_block));
	c->pring_mask = h->ring_entries - 1;
	c->packs = (const struct rpal_ack *)(uintptr_t)(h->block + sizeof(struct rpal_block) +
							  (uint64_t)h->ring_entries * sizeof(struct rpal_slot));
	c->pack_mask = h->ack_entries - 1;
	c->pnonce = h->block_nonce;
	c->out_limit = h->ack_entries;
	c->doorbell = bell;
	c->peer_doorbell = ring;
	c->last_rung_rx = c->last_rung_tx = UINT64_MAX;
	pthread_mutex_init(&c->out_lock, NULL);
	c->peer_pid = uc->pid;
	c->local = host_active() && uc->pid == getpid();
	c->peer_prog = c->local ? host_prog_of_slot(h->slot) : -1;
	c->peer_uid = uc->uid;
	c->peer_gid = uc->gid;
	spin_init(&c->rx_spin, rpal_g.cfg.spin_us);
	spin_init(&c->tx_spin, rpal_g.cfg.spin_us);
	c->wake_page = page;    /* the watcher finds it from here on (obj_set) */
	ret = obj_set(sock, c);
	if (ret)
		goto fail;
	rpal_g.nr_conns++;
	*out = c;
	return 0;
fail:
	if (c->pidfd >= 0)
		close(c->pidfd);
	bufset_free(&c->out);
	bufset_free(&c->held);
	peer_put(c->peer);
	free(c);
	return ret;
}

static void bufset_reclaim(struct bufset *out)
{
	unsigned i;

	for (i = 0; i < out->cap; i++) {
		if (out->keys[i] > 1) {
			arena_free((void *)(uintptr_t)out->keys[i]);
			out->keys[i] = 1;
		}
	}
	out->count = 0;
}

/* The peer is gone: hand back every buffer it held.  Idempotent. */
void conn_reclaim(struct rpal_conn *c)
{
	pthread_mutex_lock(&c->out_lock);
	bufset_reclaim(&c->out);
	store_relaxed(&c->out_bytes, 0);
	pthread_mutex_unlock(&c->out_lock);
}

/*
 * Free lingering blocks whose peer let go.  At teardown, forget them all
 * without touching their memory: the peer's mapping of our arena outlives
 * us, and what it has not read yet stays readable.  Takes rpal_g.lock.
 */
bool linger_sweep(bool teardown)
{
	struct rpal_linger **pp, *l;
	uint64_t now = now_ns();
	bool more;

	pthread_mutex_lock(&rpal_g.lock);
	for (pp = &rpal_g.lingering; (l = *pp);) {
		struct pollfd p = { .fd = l->sock, .events = POLLRDHUP };
		bool done = teardown || now >= l->deadline_ns || l->peer->dead;

		if (!done && poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)))
			done = true;
		if (!done) {
			pp = &l->next;
			continue;
		}
		*pp = l->next;
		if (!teardown) {
			bufset_reclaim(&l->out);
			block_destroy(l->me);
		}
		bufset_free(&l->out);
		peer_put(l->peer);
		if (!teardown)
			watch_del(l->sock);
		close(l->sock);
		free(l);
	}
	more = rpal_g.lingering != NULL;
	pthread_mutex_unlock(&rpal_g.lock);
	return more;
}

/*
 * This connection's peer is gone: it closed (hang-up) or its process exited
 * (pidfd: then the whole mapping is a dead incarnation, which a newcomer
 * may replace; a hang-up alone says nothing about the process's other
 * connections).
 */
void conn_mark_dead(struct rpal_conn *c, bool process_exited)
{
	if (process_exited) {
		pthread_mutex_lock(&rpal_g.lock);
		c->peer->dead = 1;
		pthread_mutex_unlock(&rpal_g.lock);
	}
	/* First take every ack it managed to publish, then the rest back. */
	acks_drain(c);
	if (atomic_exchange(&c->dead, true))
		return;
	conn_reclaim(c);
}

/* Has the peer hung up or exited?  One poll(), no waiting. */
int conn_poll_peer(struct rpal_conn *c)
{
	struct pollfd pfd[2] = {
		{ .fd = c->fd, .events = POLLRDHUP },
		{ .fd = c->pidfd, .events = POLLIN },
	};

	if (conn_dead(c))
		return 1;
	if (unlikely(c->local)) {
		/* Same process: no poll() (a syscall would end an RPAL call we
		 * may be running in); a program that ends closes its connections
		 * (rpal_fini at exit), one that fails in a call is marked so. */
		if (!host_prog_failed(c->peer_prog))
			return 0;
		conn_mark_dead(c, false);
		return 1;
	}
	if (poll(pfd, 2, 0) > 0 &&
	    ((pfd[0].revents & (POLLHUP | POLLRDHUP | POLLERR)) || (pfd[1].revents & POLLIN))) {
		conn_mark_dead(c, pfd[1].revents & POLLIN);
		return 1;
	}
	return 0;
}

/*
 * A non-blocking caller that keeps finding nothing never sleeps where a
 * hang-up shows, so look for one ourselves: when the watcher thread has seen
 * an event since we last looked, and once a second regardless (the clock is
 * read every 256 calls only: it would cost a fifth of the call).
 */
bool conn_poll_peer_if_idle(struct rpal_conn *c, int flags)
{
	uint64_t now;

	if (conn_dead(c))
		return true;
	if (!(flags & RPAL_NONBLOCK))
		return false;
	/* A local peer is checked without a syscall: no need to ration it. */
	if (c->local)
		return conn_poll_peer(c);
	/* The watcher thread bumps watch_seq on any hang-up or death: with
	 * none since we last looked, a poll would find nothing. */
	if (load_acquire(&watch_seq) == load_relaxed(&c->watch_seen)) {
		stat_inc(&c->idle_polls);
		if (load_relaxed(&c->idle_polls) & 255)
			return false;
		now = now_ns();
		if (now - load_relaxed(&c->last_peer_poll) < 1000000000)
			return false;
	}
	store_relaxed(&c->watch_seen, load_acquire(&watch_seq));
	store_relaxed(&c->last_peer_poll, now_ns());
	return conn_poll_peer(c);
}

/*
 * Our half of a handshake: a fresh block and doorbell pair.  The doorbell
 * is a stream socket pair (see doorbell_write()): we sleep on one end and
 * hand the other to the peer.  Where the kernel can (Linux 6.16 on), our
 * end refuses passed descriptors: a peer could otherwise make our drain
 * the last holder of a file whose release blocks.
 */
static int side_create(struct rpal_block **blk, int *bell, int *ring)
{
	int p[2], no = 0;

	linger_sweep(false);
	*blk = block_create(rpal_g.cfg.ring_entries, rpal_g.cfg.ring_entries);
	if (!*blk)
		return rpal_fail(ENOMEM, "arena exhausted: no room for a connection block");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p) < 0) {
		int e = errno;
		block_destroy(*blk);
		return rpal_fail(e, "cannot create a doorbell");
	}
	setsockopt(p[0], SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no));   /* ENOPROTOOPT before 6.16 */
	*bell = p[0];
	*ring = p[1];
	return 0;
}

static void send_refuse(int sock, int err, const char *why)
{
	struct rpal_refuse r;

	refuse_fill(&r, err, why);
	hs_sendmsg(sock, &r, sizeof(r), NULL, 0);
}

/*
 * Check a received hello with its fds (memfd, doorbell) and build the
 * connection.  On failure everything received is closed and why says why.
 */
static int hello_accept(int sock, const void *buf, int len, int *fds, int nfds, uint16_t type,
			const struct ucred *uc, struct rpal_block *me, int bell, struct rpal_wake_page *page,
			struct rpal_conn **out, char *why, size_t whylen)
{
	struct rpal_hello h;
	bool mapped = false;    /* the page is the WELCOME's, mapped here */
	int ret, i, want = 2;

	ret = hello_check(buf, (size_t)len, type, &h, why, whylen);
	if (!ret && h.pid != (uint32_t)uc->pid)
		ret = (snprintf(why, whylen, "hello says pid %u, the socket says %d", h.pid, (int)uc->pid), -EPROTO);
	/* A WELCOME with a wake page answers our HELLO's offer (we always
	 * make it); a HELLO never carries one. */
	if (!ret && type == RPAL_HS_WELCOME && (h.features & RPAL_FEAT_WAKE_PAGE))
		want = 3;
	if (!ret && nfds != want)
		ret = (snprintf(why, whylen, "hello carried %d descriptors, expected %d", nfds, want), -EPROTO);
	if (!ret && want == 3) {
		ret = wake_page_check(fds[2], why, whylen);
		if (!ret && !(page = wake_page_map(fds[2])))
			ret = (snprintf(why, whylen, "cannot map the wake page"), -ENOMEM);
		mapped = !ret;
	}
	if (!ret)
		ret = hello_check_peer(&h, why, whylen);
	if (!ret)
		ret = memfd_check(fds[0], h.arena_size, why, whylen);
	if (!ret)
		ret = doorbell_check(fds[1], why, whylen);
	if (!ret) {
		pthread_mutex_lock(&rpal_g.lock);
		ret = conn_create(sock, me, bell, fds[1], &h, uc, fds[0], page, type == RPAL_HS_HELLO, out,
				  why, whylen);
		pthread_mutex_unlock(&rpal_g.lock);
		if (!ret) {
			close(fds[0]);    /* the mapping keeps the memory */
			if (want == 3)
				close(fds[2]);
			return 0;
		}
	}
	if (mapped)
		munmap(page, RPAL_WAKE_PAGE_SIZE);
	for (i = 0; i < nfds; i++)
		peer_fd_close(fds[i]);
	return ret;
}

/* ------------------------------------------------------------ listen */

RPAL_EXPORT int rpal_listen(const char *service, const struct rpal_policy *policy)
{
	struct rpal_listener *l;
	struct sockaddr_un sa;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t salen;
	char lockpath[128];
	int ret;

	ret = rpal_ensure_init();
	if (ret)
		return ret;
	ret = service_addr(service, &sa, &salen, lockpath, sizeof(lockpath));
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rpal_fail(ENOMEM, "out of memory");
	l->kind = OBJ_LISTENER;
	l->fd = l->sock = l->lockfd = l->timer = -1;
	ret = policy_copy(l, policy);
	if (ret)
		goto fail;

	if (lockpath[0]) {
		/* Holding the lock proves any socket file there is stale. */
		l->lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (l->lockfd < 0) {
			ret = rpal_fail(errno, "cannot open %s", lockpath);
			goto fail;
		}
		if (flock(l->lockfd, LOCK_EX | LOCK_NB) < 0) {
			ret = rpal_fail(EADDRINUSE, "service %s is already served by a live process", service);
			goto fail;
		}
		unlink(sa.sun_path);
		snprintf(l->path, sizeof(l->path), "%s", sa.sun_path);
	}
	l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->sock < 0) {
		ret = rpal_fail(errno, "socket() failed");
		goto fail;
	}
	if (bind(l->sock, (struct sockaddr *)&sa, salen) < 0) {
		ret = rpal_fail(errno == EADDRINUSE ? EADDRINUSE : errno, "cannot bind service %s", service);
		goto fail;
	}
	/* Other uids can reach the socket only if the policy may let them in;
	 * SO_PEERCRED is the real gate either way. */
	if (l->path[0])
		chmod(l->path, (policy && (policy->nr_uids || policy->nr_gids)) ? 0666 : 0600);
	if (listen(l->sock, 128) < 0) {
		ret = rpal_fail(errno, "listen() failed");
		goto fail;
	}
	l->fd = epoll_create1(EPOLL_CLOEXEC);
	if (l->fd < 0) {
		ret = rpal_fail(errno, "epoll_create1() failed");
		goto fail;
	}
	ev.data.fd = l->sock;
	if (epoll_ctl(l->fd, EPOLL_CTL_ADD, l->sock, &ev) < 0) {
		ret = rpal_fail(errno, "epoll_ctl() failed");
		goto fail;
	}
	/* A client that connects and says nothing makes the listener readable
	 * at its deadline, so that an event loop's next rpal_accept drops it. */
	l->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ev.data.fd = l->timer;
	if (l->timer < 0 || epoll_ctl(l->fd, EPOLL_CTL_ADD, l->timer, &ev) < 0) {
		ret = rpal_fail(errno, "cannot create the listener's handshake timer");
		goto fail;
	}
	pthread_mutex_lock(&rpal_g.lock);
	ret = obj_set(l->fd, l);
	pthread_mutex_unlock(&rpal_g.lock);
	if (ret)
		goto fail;
	return l->fd;
fail:
	if (l->fd >= 0)
		close(l->fd);
	if (l->timer >= 0)
		close(l->timer);
	if (l->sock >= 0)
		close(l->sock);
	if (l->path[0])
		unlink(l->path);
	if (l->lockfd >= 0)
		close(l->lockfd);
	free(l->uids);
	free(l->gids);
	free(l);
	return ret;
}

static void pending_drop(struct rpal_listener *l, unsigned i)
{
	epoll_ctl(l->fd, EPOLL_CTL_DEL, l->pending[i].fd, NULL);
	close(l->pending[i].fd);
	l->pending[i] = l->pending[--l->nr_pending];
}

/* Try to finish pending handshake i.  1: done (*out set), 0: not yet, <0: failed (dropped). */
static int pending_step(struct rpal_listener *l, unsigned i, int *out)
{
	int sock = l->pending[i].fd, fds[3], nfds, n, ret, bell, ring, pagefd = -1;
	unsigned char buf[sizeof(struct rpal_hello) + 16];
	struct rpal_wake_page *page = NULL;
	struct rpal_conn *c;
	struct rpal_block *me;
	struct rpal_hello w, offer = { 0 };
	struct ucred uc;
	char why[160];

	n = hs_recvmsg(sock, buf, sizeof(buf), fds, 2, &nfds);
	if (n == -E2BIG) {
		send_refuse(sock, EPROTO, "hello carried more than 2 descriptors");
		pending_drop(l, i);
		return rpal_fail(EPROTO, "refused a client: its hello carried more than 2 descriptors");
	}
	if (n == -EAGAIN) {
		if (now_ns() < l->pending[i].deadline_ns)
			return 0;
		pending_drop(l, i);
		return rpal_fail(ETIMEDOUT, "a client connected but sent no hello within %u ms",
				 rpal_g.cfg.handshake_ms);
	}
	if (n < 0) {
		pending_drop(l, i);
		return rpal_fail(-n, "a client hung up during the handshake");
	}
	ret = cred_check(sock, &l->policy, &uc, why, sizeof(why));
	if (ret) {
		while (nfds)
			peer_fd_close(fds[--nfds]);
		send_refuse(sock, -ret, why);
		pending_drop(l, i);
		return rpal_fail(-ret, "refused a client: %s", why);
	}
	ret = side_create(&me, &bell, &ring);
	if (ret) {
		while (nfds)
			peer_fd_close(fds[--nfds]);
		send_refuse(sock, -ret, "server cannot create a connection");
		pending_drop(l, i);
		return ret;
	}
	epoll_ctl(l->fd, EPOLL_CTL_DEL, sock, NULL);
	/* The client offers a wake page (hello_accept checks the rest). */
	memcpy(&offer, buf, (size_t)n < sizeof(offer) ? (size_t)n : sizeof(offer));
	if (offer.features & RPAL_FEAT_WAKE_PAGE)
		page = wake_page_create(&pagefd);
	ret = hello_accept(sock, buf, n, fds, nfds, RPAL_HS_HELLO, &uc, me, bell, page, &c, why, sizeof(why));
	if (ret) {
		if (page) {
			munmap(page, RPAL_WAKE_PAGE_SIZE);
			close(pagefd);
		}
		send_refuse(sock, -ret, why);
		close(bell);
		close(ring);
		block_destroy(me);
		close(sock);
		l->pending[i] = l->pending[--l->nr_pending];
		return rpal_fail(-ret, "refused client pid %d: %s", (int)uc.pid, why);
	}
	hello_fill(&w, RPAL_HS_WELCOME, me, NULL, page ? RPAL_FEAT_WAKE_PAGE : 0);
	fds[0] = rpal_g.memfd;
	fds[1] = ring;
	fds[2] = pagefd;
	ret = hs_sendmsg(sock, &w, sizeof(w), fds, page ? 3 : 2);
	close(ring);            /* the peer holds its copy now */
	if (pagefd >= 0)
		close(pagefd);
	l->pending[i] = l->pending[--l->nr_pending];
	if (ret) {
		rpal_close(sock);
		return rpal_fail(-ret, "client pid %d went away during the handshake", (int)uc.pid);
	}
	*out = sock;
	return 1;
}

/* Arm the listener's timer for deadline (UINT64_MAX: disarm), after
 * consuming a past expiry, which would keep the listener readable. */
static void pending_timer_arm(struct rpal_listener *l, uint64_t deadline)
{
	struct itimerspec its = { 0 };
	uint64_t expiries;

	(void)!read(l->timer, &expiries, sizeof(expiries));
	if (deadline != UINT64_MAX) {
		its.it_value.tv_sec = (time_t)(deadline / 1000000000);
		its.it_value.tv_nsec = (long)(deadline % 1000000000);
	}
	timerfd_settime(l->timer, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Move every connection waiting in the backlog to the pending list. */
static void accept_new(struct rpal_listener *l)
{
	uint64_t deadline = now_ns() + (uint64_t)rpal_g.cfg.handshake_ms * 1000000;

	for (;;) {
		struct epoll_event ev = { .events = EPOLLIN };
		int s = accept4(l->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (s < 0)
			return;
		if (l->nr_pending == sizeof(l->pending) / sizeof(l->pending[0]))
			pending_drop(l, 0);   /* the oldest loses: bounded state under a flood */
		ev.data.fd = s;
		epoll_ctl(l->fd, EPOLL_CTL_ADD, s, &ev);
		l->pending[l->nr_pending].fd = s;
		l->pending[l->nr_pending].deadline_ns = deadline;
		l->nr_pending++;
	}
}

RPAL_EXPORT int rpal_accept(int lfd, int flags)
{
	struct rpal_listener *l = obj_get(lfd);
	int last_err = 0;

	if (!l || l->kind != OBJ_LISTENER)
		return rpal_fail(EBADF, "descriptor %d is not an rpal listener", lfd);
	for (;;) {
		uint64_t next = UINT64_MAX, now;
		struct epoll_event evs[8];
		unsigned i;
		int out, ret, timeout;

		accept_new(l);
		for (i = 0; i < l->nr_pending;) {
			unsigned before = l->nr_pending;
			ret = pending_step(l, i, &out);
			if (ret == 1)
				return out;
			if (ret < 0)
				last_err = ret;
			if (l->nr_pending == before)
				i++;
		}
		for (i = 0; i < l->nr_pending; i++)
			if (l->pending[i].deadline_ns < next)
				next = l->pending[i].deadline_ns;
		pending_timer_arm(l, next);
		/* A refused or failed handshake is reported, as a failed accept(). */
		if (last_err)
			return last_err;
		if (flags & RPAL_NONBLOCK)
			return -EAGAIN;
		now = now_ns();
		timeout = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)((next - now) / 1000000 + 1);
		if (epoll_wait(l->fd, evs, 8, timeout) < 0 && errno != EINTR)
			return rpal_fail(errno, "epoll_wait() on the listener failed");
	}
}

/* ------------------------------------------------------------ connect */

static int wait_readable(int fd, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = now_ns();
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

RPAL_EXPORT int rpal_connect(const char *service, const struct rpal_policy *policy, int flags)
{
	unsigned char buf[sizeof(struct rpal_hello) + 16];
	struct sockaddr_un sa;
	struct rpal_hello h;
	struct rpal_block *me = NULL;
	struct rpal_conn *c;
	struct ucred uc;
	socklen_t salen;
	char lockpath[128], why[160];
	uint64_t deadline;
	int sock = -1, bell = -1, ring = -1, fds[3], nfds = 0, n, ret;

	if (flags)
		return rpal_fail(EINVAL, "rpal_connect: flags %#x not supported (pass 0)", (unsigned)flags);
	ret = rpal_ensure_init();
	if (ret)
		return ret;
	ret = service_addr(service, &sa, &salen, lockpath, sizeof(lockpath));
	if (ret)
		return ret;
	deadline = now_ns() + (uint64_t)rpal_g.cfg.handshake_ms * 1000000;
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return rpal_fail(errno, "socket() failed");
	/* A full backlog answers EAGAIN: retry until the handshake deadline. */
	while (connect(sock, (struct sockaddr *)&sa, salen) < 0) {
		if (errno == EAGAIN && now_ns() < deadline) {
			usleep(1000);
			continue;
		}
		ret = rpal_fail(errno == EAGAIN ? ETIMEDOUT : errno, "cannot connect to service %s", service);
		goto fail;
	}
	ret = cred_check(sock, policy, &uc, why, sizeof(why));
	if (ret) {
		send_refuse(sock, -ret, why);
		ret = rpal_fail(-ret, "refused server of %s: %s", service, why);
		goto fail;
	}
	ret = side_create(&me, &bell, &ring);
	if (ret)
		goto fail;
	hello_fill(&h, RPAL_HS_HELLO, me, service[0] == '/' ? NULL : service, RPAL_FEAT_WAKE_PAGE);
	fds[0] = rpal_g.memfd;
	fds[1] = ring;
	ret = hs_sendmsg(sock, &h, sizeof(h), fds, 2);
	close(ring);
	if (ret) {
		ret = rpal_fail(-ret, "cannot send hello to %s", service);
		goto fail;
	}
	ret = wait_readable(sock, deadline);
	if (ret) {
		ret = rpal_fail(-ret, "no answer from %s within %u ms", service, rpal_g.cfg.handshake_ms);
		goto fail;
	}
	n = hs_recvmsg(sock, buf, sizeof(buf), fds, 3, &nfds);
	if (n == -E2BIG) {
		ret = rpal_fail(EPROTO, "%s answered with more than 3 descriptors", service);
		goto fail;
	}
	if (n < 0) {
		ret = rpal_fail(n == -ECONNRESET ? ECONNREFUSED : -n, "%s closed the connection during the handshake", service);
		goto fail;
	}
	if (refuse_parse(buf, (size_t)n, &ret, why, sizeof(why)) == 0) {
		while (nfds)
			peer_fd_close(fds[--nfds]);
		ret = rpal_fail(ret, "%s refused us: %s", service, why);
		goto fail;
	}
	ret = hello_accept(sock, buf, n, fds, nfds, RPAL_HS_WELCOME, &uc, me, bell, NULL, &c, why, sizeof(why));
	if (ret) {
		send_refuse(sock, -ret, why);
		ret = rpal_fail(-ret, "bad welcome from %s: %s", service, why);
		goto fail;
	}
	return sock;
fail:
	if (bell >= 0)
		close(bell);
	if (me)
		block_destroy(me);
	close(sock);
	return ret;
}

/* ------------------------------------------------------------ close */

static void conn_close(struct rpal_conn *c)
{
	struct rpal_linger *l = NULL;
	uint32_t st;

	epoll_conn_gone(c);
	/* Tell a live peer we are done: end of stream after what is queued. */
	st = load_relaxed(&c->me->state);
	store_release(&c->me->state, st | RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED);
	if (!conn_dead(c)) {
		notify_peer_rx_nocall(c);
		acks_drain(c);
		/* It may still be reading our block and our buffers: keep them
		 * until it closes too, on a private copy of the socket. */
		l = calloc(1, sizeof(*l));
		if (l) {
			l->sock = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
			if (l->sock < 0) {
				free(l);
				l = NULL;
			}
		}
	}
	pthread_mutex_lock(&rpal_g.lock);
	obj_clear(c->fd);
	rpal_g.nr_conns--;
	if (l) {
		shutdown(l->sock, SHUT_WR);     /* the peer sees a hang-up now */
		l->me = c->me;
		l->peer = c->peer;
		l->out = c->out;
		l->deadline_ns = now_ns() + (uint64_t)RPAL_LINGER_MS * 1000000;
		l->next = rpal_g.lingering;
		rpal_g.lingering = l;
		watch_linger(l->sock);  /* under the lock: a sweep may free l after it */
	} else {
		conn_reclaim(c);
		bufset_free(&c->out);
		block_destroy(c->me);
		peer_put(c->peer);
	}
	pthread_mutex_unlock(&rpal_g.lock);
	bufset_free(&c->held);
	watch_del(c->fd);
	watch_del(c->pidfd);
	/* The watcher no longer finds c (obj_clear under rpal_g.lock). */
	if (c->wake_page)
		munmap(c->wake_page, RPAL_WAKE_PAGE_SIZE);
	close(c->doorbell);
	close(c->peer_doorbell);
	close(c->pidfd);
	close(c->fd);
	free(c);
	linger_sweep(false);
}

static void listener_close(struct rpal_listener *l)
{
	pthread_mutex_lock(&rpal_g.lock);
	obj_clear(l->fd);
	pthread_mutex_unlock(&rpal_g.lock);
	while (l->nr_pending)
		pending_drop(l, 0);
	if (l->path[0])
		unlink(l->path);
	close(l->sock);
	close(l->timer);
	close(l->fd);
	if (l->lockfd >= 0)
		close(l->lockfd);
	free(l->uids);
	free(l->gids);
	free(l);
}

RPAL_EXPORT int rpal_close(int fd)
{
	int *obj = obj_get(fd);

	if (!obj)
		return close(fd) < 0 ? -errno : 0;
	switch (*obj) {
	case OBJ_CONN:
		MPK_REENTER((struct rpal_conn *)obj, rpal_close(fd));
		conn_close((struct rpal_conn *)obj);
		return 0;
	case OBJ_LISTENER:
		listener_close((struct rpal_listener *)obj);
		return 0;
	case OBJ_EPOLL:
		epoll_destroy(obj);
		return 0;
	}
	return -EBADF;
}

RPAL_EXPORT int rpal_shutdown(int fd, int how)
{
	struct rpal_conn *c;
	int err;

	if (how != SHUT_WR)
		return rpal_fail(EINVAL, "rpal_shutdown: only SHUT_WR is supported");
	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_shutdown(fd, how));
	c->shut_wr = true;
	store_release(&c->me->state, load_relaxed(&c->me->state) | RPAL_STATE_SHUT_WR);
	if (!conn_dead(c))
		notify_peer_rx_nocall(c);
	return 0;
}

/* ------------------------------------------------------------ info */

RPAL_EXPORT int rpal_conn_info(int fd, struct rpal_conn_info *info)
{
	struct rpal_conn *c;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_conn_info(fd, info));
	acks_drain(c);
	conn_poll_peer(c);
	memset(info, 0, sizeof(*info));
	info->peer_pid = c->peer_pid;
	info->peer_uid = c->peer_uid;
	info->peer_gid = c->peer_gid;
	info->peer_slot = c->peer->slot;
	info->peer_alive = !conn_dead(c);
	info->tx_msgs = c->tx_msgs;
	info->rx_msgs = c->rx_msgs;
	info->wakeups = c->tx_wakeups + c->rx_wakeups;
	info->sleeps = load_relaxed(&c->tx_sleeps) + load_relaxed(&c->rx_sleeps);
	info->bufs_outstanding = c->out.count;
	info->bytes_outstanding = load_relaxed(&c->out_bytes);
	info->budget = conn_budget();
	return 0;
}

RPAL_EXPORT int rpal_stats(struct rpal_stats *st)
{
	struct rpal_peer *p;

	if (!rpal_g.inited)
		return -ENOTCONN;
	linger_sweep(false);
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&rpal_g.lock);
	st->slot = rpal_g.slot;
	st->arena_base = rpal_g.arena;
	st->arena_size = rpal_g.cfg.arena_size;
	st->nr_conns = rpal_g.nr_conns;
	for (p = rpal_g.peers; p; p = p->next)
		st->nr_peers_mapped++;
	pthread_mutex_unlock(&rpal_g.lock);
	pthread_mutex_lock(&rpal_g.alloc_lock);
	st->arena_used = alloc_used(rpal_g.alloc);
	st->bufs_in_use = alloc_nr_blocks(rpal_g.alloc);
	pthread_mutex_unlock(&rpal_g.alloc_lock);
	return 0;
}
