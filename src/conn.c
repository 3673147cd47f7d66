/* SPDX-License-Identifier: MIT */
/*
 * conn.c - a connection's life: the handshake's common half (our block and
 * doorbell, the peer's hello checked and mapped), peer death, close.
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
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "setup.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83   /* Linux 6.16; glibc defines it later */
#endif

/* ------------------------------------------------------------ connections */

/* The wake page (RPAL_FEAT_WAKE_PAGE), mapped read-write; NULL on failure. */
struct rpal_wake_page *wake_page_map(int fd)
{
	void *p = mmap(NULL, RPAL_WAKE_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The accepting side makes it: sealed so that neither side can shrink it
 * under the other's mapping.  NULL (no wake page) if the kernel says no. */
struct rpal_wake_page *wake_page_create(int *fd)
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

/* Our statistics entry for c (service: the name served or connected to). */
static int conn_stat_open(struct rpal_conn *c, const char *service, bool accepted)
{
	struct rpal_stat_conn id = {
		.state = RPAL_STAT_OPEN,
		.fd = c->fd,
		.peer_pid = (uint32_t)c->peer_pid,
		.peer_uid = (uint32_t)c->peer_uid,
		.peer_gid = (uint32_t)c->peer_gid,
		.peer_slot = c->peer->slot,
		.flags = (accepted ? RPAL_STAT_ACCEPTED : 0) | (c->local ? RPAL_STAT_LOCAL : 0),
		.pair = (uintptr_t)c->me < (uintptr_t)c->pb ? (uintptr_t)c->me : (uintptr_t)c->pb,
	};

	if (service)
		snprintf(id.service, sizeof(id.service), "%s", service_label(service));
	c->st = stat_conn_open(&id);
	return c->st ? 0 : -ENOMEM;
}

#define CONN_ALIGN 1024

/* Build a connection from a checked hello; the caller holds rpal_g.lock.
 * On success takes ownership of sock, bell (ours), ring (theirs) and the
 * wake page, if any (side: 0 we connected, 1 we accepted). */
static int conn_create(int sock, struct rpal_block *me, int bell, int ring, const struct rpal_hello *h,
		       const struct ucred *uc, int memfd, struct rpal_wake_page *page, int side,
		       const char *service, struct rpal_conn **out, char *why, size_t whylen)
{
	/* Aligned to a power of two at least its size: every message reads
	 * the connection, which then spans no more cache lines and pages than
	 * its size needs. */
	_Static_assert(sizeof(struct rpal_conn) <= CONN_ALIGN, "struct rpal_conn outgrew CONN_ALIGN");
	struct rpal_conn *c = aligned_alloc(CONN_ALIGN, CONN_ALIGN);
	uint64_t w;
	int ret;

	if (!c)
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->obj.kind = OBJ_CONN;
	c->fd = sock;
	c->pidfd = -1;
	c->shut_kick = -1;
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
	if (conn_sleeps_in_poll(c)) {
		c->shut_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (c->shut_kick < 0) {
			ret = errno ? -errno : -ENOMEM;
			snprintf(why, whylen, "cannot create an eventfd: %s", strerror(errno));
			goto fail;
		}
	}
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
	lock_init(&c->out_lock);
	c->peer_pid = uc->pid;
	/* Calls only into another program: a receiver of our own would run
	 * its system calls natively on the caller's thread, where our libc is
	 * let through (call.c, sender_get), as its caller's. */
	c->local = host_active() && c->peer->local && h->slot != rpal_g.slot;
	c->peer_prog = c->local ? host_prog_of(uc->pid, h->slot) : -1;
	c->peer_uid = uc->uid;
	c->peer_gid = uc->gid;
	spin_init(&c->rx_spin, rpal_g.cfg.spin_us, rpal_g.cfg.wait_policy);
	spin_init(&c->tx_spin, rpal_g.cfg.spin_us, rpal_g.cfg.wait_policy);
	ret = conn_stat_open(c, service, side);
	if (ret) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	c->wake_page = page;    /* the watcher finds it from here on (obj_set) */
	ret = obj_set(sock, &c->obj);
	if (ret)
		goto fail;
	rpal_g.nr_conns++;
	*out = c;
	return 0;
fail:
	if (c->st)
		stat_conn_close(c->st);
	if (c->pidfd >= 0)
		close(c->pidfd);
	if (c->shut_kick >= 0)
		close(c->shut_kick);
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
	lock_take(&c->out_lock);
	bufset_reclaim(&c->out);
	store_relaxed(&c->out_bytes, 0);
	store_relaxed(&c->st->tx.bufs_out, 0);
	lock_give(&c->out_lock);
}

/* Unlink-time part of freeing a lingering block: the memory, unless at
 * teardown (see linger_sweep()).  Holding rpal_g.lock. */
static void linger_free(struct rpal_linger *l, bool teardown)
{
	if (!teardown) {
		block_retire(l->me);    /* before the peer's buffers can be handed out again */
		bufset_reclaim(&l->out);
		block_destroy(l->me);
	}
	bufset_free(&l->out);
	peer_put(l->peer);
	if (!teardown)
		watch_del(l->sock);
	if (l->sock_empty)
		close(l->sock);
	else
		peer_fd_close(l->sock);
	free(l);
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
		linger_free(l, teardown);
	}
	more = rpal_g.lingering != NULL;
	pthread_mutex_unlock(&rpal_g.lock);
	return more;
}

/*
 * The arena has no room for a connection block: free the oldest lingering
 * one before its time.  Its peer, which has not closed its end, then finds
 * the block gone (what it had not read with it); without this, a peer that
 * never closes could keep every new connection out for the linger time.
 * False if none lingers.  Takes rpal_g.lock.
 */
static bool linger_evict_oldest(void)
{
	struct rpal_linger **pp = &rpal_g.lingering, *l = NULL;

	pthread_mutex_lock(&rpal_g.lock);
	if (*pp) {
		while ((*pp)->next)     /* newest first: the oldest is last */
			pp = &(*pp)->next;
		l = *pp;
		*pp = NULL;
		linger_free(l, false);
	}
	pthread_mutex_unlock(&rpal_g.lock);
	return l != NULL;
}

static void reap_one(int fd, struct rpal_obj *_Atomic *slot)
{
	struct rpal_obj *o = atomic_load(slot);

	(void)fd;
	if (o && o->kind == OBJ_CONN) {
		struct rpal_conn *c = (struct rpal_conn *)o;
		uint64_t keys = mpk_open(c->pkru_bits);    /* the acks are in the peer's arena */

		acks_drain(c);
		mpk_close(keys);
	}
}

/*
 * Take back what the peers of every connection have acknowledged: an
 * allocation that found the arena short may fit then, though the
 * acknowledgements came on connections nobody sends on.  No system call
 * (closed connections' blocks are freed by the watcher when their peers
 * let go).  Returns whether anything came back.  A connection in the
 * table stays allocated while rpal_g.lock is held (rpal_close() clears its
 * entry under the lock before freeing it).
 */
bool conns_reap_acks(void)
{
	uint64_t used = load_relaxed(&rpal_g.arena_used);

	pthread_mutex_lock(&rpal_g.lock);
	obj_walk(reap_one);
	pthread_mutex_unlock(&rpal_g.lock);
	return load_relaxed(&rpal_g.arena_used) < used;
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
	atomic_fetch_or_explicit(&c->st->status, RPAL_STAT_PEER_GONE, memory_order_relaxed);
	/* A peer whose socket hung up may still run and read what it holds. */
	block_retire(c->me);
	conn_reclaim(c);
}

/* Does c's socket show a hang-up (1), or its pidfd an exit (2), now?
 * One poll(), no waiting, nothing marked (the watcher thread asks too:
 * its event may concern an earlier connection on the same descriptor). */
int conn_hung_up(const struct rpal_conn *c)
{
	struct pollfd pfd[2] = {
		{ .fd = c->fd, .events = POLLRDHUP },
		{ .fd = c->pidfd, .events = POLLIN },
	};

	if (poll(pfd, 2, 0) <= 0)
		return 0;
	if (pfd[1].revents & POLLIN)
		return 2;
	return (pfd[0].revents & (POLLHUP | POLLRDHUP | POLLERR)) ? 1 : 0;
}

/* Has the peer hung up or exited?  One poll(), no waiting. */
int conn_poll_peer(struct rpal_conn *c)
{
	int gone;

	if (conn_dead(c))
		return 1;
	if (unlikely(c->local)) {
		/* Same address space: no poll() (a syscall would end an RPAL
		 * call we may be running in).  The watcher thread saw its
		 * hang-up or death, or the launcher marked its program ended
		 * or failed. */
		bool ended = host_prog_failed(c->peer_prog);

		if (!load_acquire(&c->local_gone) && !ended)
			return 0;
		conn_mark_dead(c, ended);
		return 1;
	}
	gone = conn_hung_up(c);
	if (gone)
		conn_mark_dead(c, gone == 2);
	return gone != 0;
}

/*
 * A non-blocking caller that keeps finding nothing never sleeps where a
 * hang-up shows, so look for one ourselves: when the watcher thread has seen
 * an event since we last looked, and once a second regardless (the clock is
 * read every 256 calls only: it would cost a fifth of the call).
 */
RPAL_HOT bool conn_poll_peer_if_idle(struct rpal_conn *c, int flags)
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
_Atomic bool bells_refuse_fds;

int side_create(struct rpal_block **blk, int *bell, int *ring)
{
	int p[2], no = 0;

	linger_sweep(false);
	while (!(*blk = block_create(rpal_g.cfg.ring_entries, rpal_g.cfg.ring_entries)))
		if (!linger_evict_oldest())
			return rpal_fail(ENOMEM, "arena exhausted: no room for a connection block");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p) < 0) {
		int e = errno;
		block_destroy(*blk);
		return rpal_fail(e, "cannot create a doorbell");
	}
	/* ENOPROTOOPT before 6.16 */
	store_relaxed(&bells_refuse_fds, setsockopt(p[0], SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no)) == 0);
	*bell = p[0];
	*ring = p[1];
	return 0;
}

void send_refuse(int sock, int err, const char *why)
{
	struct rpal_refuse r;

	refuse_fill(&r, err, why);
	hs_sendmsg(sock, &r, sizeof(r), NULL, 0);
}

/*
 * Check a received hello with its fds (memfd, doorbell) and build the
 * connection.  On failure everything received is closed and why says why.
 */
int hello_accept(int sock, const void *buf, int len, int *fds, int nfds, uint16_t type,
			const struct ucred *uc, struct rpal_block *me, int bell, struct rpal_wake_page *page,
			const char *service, struct rpal_conn **out, char *why, size_t whylen)
{
	struct rpal_hello h;
	bool mapped = false;    /* the page is the WELCOME's, mapped here */
	int ret, want = 2;

	ret = hello_check(buf, (size_t)len, type, &h, why, whylen);
	if (!ret && h.pid != (uint32_t)uc->pid)
		ret = (snprintf(why, whylen, "hello says pid %u, the socket says %d", h.pid, (int)uc->pid), -EPROTO);
	/* A WELCOME with a wake page answers our HELLO's offer (we always
	 * make it); a HELLO never carries one. */
	if (!ret && type == RPAL_HS_WELCOME && (h.features & RPAL_FEAT_WAKE_PAGE))
		want = 3;
	if (!ret && nfds != want)
		ret = (snprintf(why, whylen, "%s carried %d descriptors, expected %d", type == RPAL_HS_HELLO ? "hello" : "welcome",
				nfds, want), -EPROTO);
	if (!ret && want == 3)
		ret = wake_page_check(fds[2], why, whylen);
	if (!ret) {
		struct rpal_geom g;

		geom_self(&g);
		ret = hello_check_peer(&h, &g, why, whylen);
	}
	if (!ret)
		ret = memfd_check(fds[0], h.arena_size, why, whylen);
	if (!ret)
		ret = doorbell_check(fds[1], why, whylen);
	/* Mapped only once everything the peer sent has passed. */
	if (!ret && want == 3) {
		if (!(page = wake_page_map(fds[2]))) {
			char note[96];

			ret = errno ? -errno : -ENOMEM;
			snprintf(why, whylen, "cannot map the wake page%s", map_count_note(-ret, note, sizeof(note)));
		}
		mapped = !ret;
	}
	if (!ret) {
		pthread_mutex_lock(&rpal_g.lock);
		ret = conn_create(sock, me, bell, fds[1], &h, uc, fds[0], page, type == RPAL_HS_HELLO, service,
				  out, why, whylen);
		pthread_mutex_unlock(&rpal_g.lock);
		if (!ret) {
			/* The socket carries nothing after the handshake:
			 * refuse descriptors on it where the kernel can. */
			int no = 0;

			/* ENOPROTOOPT before 6.16: then emptied at the close. */
			(*out)->sock_empty = setsockopt(sock, SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no)) == 0 &&
					     peer_fd_take_queued(sock);
			close(fds[0]);    /* the mapping keeps the memory */
			if (want == 3)
				close(fds[2]);
			return 0;
		}
	}
	if (mapped)
		munmap(page, RPAL_WAKE_PAGE_SIZE);
	peer_fds_drop(fds, nfds);
	return ret;
}

/* ------------------------------------------------------------ close */

void conn_close(struct rpal_conn *c)
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
			l->sock_empty = c->sock_empty;
			if (l->sock < 0) {
				free(l);
				l = NULL;
			}
		}
	}
	pthread_mutex_lock(&rpal_g.lock);
	obj_clear(c->fd);
	rpal_g.nr_conns--;
	stat_conn_close(c->st);
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
		block_retire(c->me);    /* a live peer may still copy what it holds */
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
	/* Before 6.16 a peer can pass descriptors into our doorbell. */
	peer_fd_close(c->doorbell);
	close(c->peer_doorbell);
	close(c->pidfd);
	if (c->shut_kick >= 0)
		close(c->shut_kick);
	/* What an older kernel let the peer pass on it is released with the
	 * socket's last descriptor: the lingering copy's, if there is one (a
	 * shutdown here would end the linger at once). */
	if (l || c->sock_empty)
		close(c->fd);
	else
		peer_fd_close(c->fd);
	free(c);
	linger_sweep(false);
}

/*
 * What a shutdown changes for our own threads, under rpal_g.lock: once
 * shut_rd shows, a receiver of ours returns end of stream and may close
 * the connection at once, but a close frees nothing before it takes the
 * lock (obj_clear), so c stays ours until we let go.
 */
static void shut_wake(int fd, struct rpal_conn *c, int how)
{
	pthread_mutex_lock(&rpal_g.lock);
	if (obj_get(fd) == &c->obj) {
		if (how != SHUT_WR && !atomic_exchange(&c->shut_rd, true)) {
			/* The peer's sends fail from now on, as on a socket
			 * whose peer shut down reading; what it sent before
			 * stays readable. */
			atomic_fetch_or_explicit(&c->me->state, RPAL_STATE_CLOSED, memory_order_release);
			if (!conn_dead(c))
				notify_peer_tx_closed(c);
			/* Our threads blocked in a receive or a set return. */
			watch_wake_conn(c);
		} else if (how != SHUT_RD && load_acquire(&c->set)) {
			/* Our set's waiter for EPOLLOUT: a send fails at once. */
			ep_kick(load_acquire(&c->set));
		}
	}
	pthread_mutex_unlock(&rpal_g.lock);
}

RPAL_EXPORT int rpal_shutdown(int fd, int how)
{
	struct rpal_conn *c;
	int err;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rpal_fail(EINVAL, "rpal_shutdown: how is %d, not SHUT_RD, SHUT_WR or SHUT_RDWR", how);
	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_shutdown(fd, how));
	if (how != SHUT_RD) {
		store_relaxed(&c->shut_wr, true);
		/* R3: after our last slot.  An RMW: SHUT_RD may be stored at once. */
		atomic_fetch_or_explicit(&c->me->state, RPAL_STATE_SHUT_WR, memory_order_release);
		if (!conn_dead(c))
			notify_peer_rx_nocall(c);
	}
	shut_wake(fd, c, how);
	return 0;
}

/* ------------------------------------------------------------ ops */

static void conn_close_obj(struct rpal_obj *o)
{
	struct rpal_conn *c = (struct rpal_conn *)o;
	uint64_t w = mpk_open(c->pkru_bits);    /* close reads the peer's block */

	conn_close(c);
	mpk_close(w);
}

/* In a forked child: the parent's connection is not ours to close. */
static void conn_forget_child(struct rpal_obj *o)
{
	struct rpal_conn *c = (struct rpal_conn *)o;

	close(c->doorbell);
	close(c->peer_doorbell);
	close(c->pidfd);
	if (c->shut_kick >= 0)
		close(c->shut_kick);
	bufset_free(&c->out);
	bufset_free(&c->held);
	if (c->wake_page)
		munmap(c->wake_page, RPAL_WAKE_PAGE_SIZE);
	stat_conn_forget(c->st);
	free(c);
}

static void conn_hang_up(struct rpal_obj *o, int fd)
{
	(void)o;
	shutdown(fd, SHUT_RDWR);
}

const struct rpal_obj_ops conn_ops = {
	.close = conn_close_obj,
	.forget_child = conn_forget_child,
	.hang_up = conn_hang_up,
};

/* ------------------------------------------------------------ info */

RPAL_EXPORT int rpal_conn_info(int fd, struct rpal_conn_info *info)
{
	struct rpal_conn *c;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	if (!info)
		return rpal_fail(EINVAL, "rpal_conn_info: info is NULL");
	MPK_REENTER(c, rpal_conn_info(fd, info));
	acks_drain(c);
	conn_poll_peer(c);
	memset(info, 0, sizeof(*info));
	info->peer_pid = c->peer_pid;
	info->peer_uid = c->peer_uid;
	info->peer_gid = c->peer_gid;
	info->peer_slot = c->peer->slot;
	info->peer_alive = !conn_dead(c);
	info->tx_msgs = load_relaxed(&c->st->tx.msgs);
	info->rx_msgs = load_relaxed(&c->st->rx.msgs);
	info->wakeups = load_relaxed(&c->st->tx.wakeups) + load_relaxed(&c->st->rx.wakeups);
	info->sleeps = load_relaxed(&c->st->tx.sleeps) + load_relaxed(&c->st->rx.sleeps);
	info->bufs_outstanding = c->out.count;
	info->bytes_outstanding = load_relaxed(&c->out_bytes);
	info->budget = conn_budget();
	return 0;
}

RPAL_EXPORT int rpal_conn_stats(int fd, struct rpal_conn_stats *st)
{
	const struct rpal_stat_conn *e;
	struct rpal_conn *c;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	if (!st)
		return rpal_fail(EINVAL, "rpal_conn_stats: st is NULL");
	/* Acks the peer pushed count as taken: bufs_out is what it holds. */
	MPK_REENTER(c, rpal_conn_stats(fd, st));
	acks_drain(c);
	e = c->st;
	memset(st, 0, sizeof(*st));
	st->id = e->id;
	st->since = e->since;
	st->msgs_sent = load_relaxed(&e->tx.msgs);
	st->msgs_received = load_relaxed(&e->rx.msgs);
	st->bytes_sent = load_relaxed(&e->tx.bytes);
	st->bytes_received = load_relaxed(&e->rx.bytes);
	st->wakeups_sent = load_relaxed(&e->tx.wakeups);
	st->wakeups_avoided = load_relaxed(&e->tx.wakeups_avoided);
	st->room_wakeups = load_relaxed(&e->rx.wakeups);
	st->tx_sleeps = load_relaxed(&e->tx.sleeps);
	st->rx_sleeps = load_relaxed(&e->rx.sleeps);
	st->ring_full = load_relaxed(&e->tx.ring_full);
	st->tx_spin_ns = stat_spin_ns(load_relaxed(&e->tx.spin_tsc));
	st->rx_spin_ns = stat_spin_ns(load_relaxed(&e->rx.spin_tsc));
	st->bufs_out = load_relaxed(&e->tx.bufs_out);
	st->bufs_held = load_relaxed(&e->rx.bufs_held);
	st->violations = load_relaxed(&e->rx.violations);
	return 0;
}

/* ------------------------------------------------------------ protection-key windows */

RPAL_EXPORT long rpal_peer_window_open(int fd)
{
	struct rpal_conn *c;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	return (long)mpk_open(c->pkru_bits);
}

RPAL_EXPORT void rpal_peer_window_close(long cookie)
{
	/* Only what rpal_peer_window_open() returned: a non-zero cookie means
	 * it wrote PKRU, so the CPU has it. */
	if ((uint64_t)cookie >> 32 == 1)
		pkru_write((uint32_t)cookie);
}
