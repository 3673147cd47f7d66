/* SPDX-License-Identifier: MIT */
/*
 * msg.c - sending and receiving.  Small payloads ride in the ring slot; the
 * rest live in a buffer of the sender's arena that the receiver reads in
 * place and acknowledges through its own ack ring.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "internal.h"

/* Why we cannot send: -EPROTO, -EPIPE (peer closed), -ECONNRESET (died).
 * Inline: every small send starts with it, and its failures are cold. */
static inline int send_error(struct rpal_conn *c)
{
	if (conn_err(c))
		return -conn_err(c);
	if (load_relaxed(&c->shut_wr))
		return rpal_fail(EPIPE, "connection was shut down for writing");
	if (peer_update(c) & RPAL_STATE_CLOSED)
		return rpal_fail(EPIPE, "peer pid %d closed the connection or shut down reading", (int)c->peer_pid);
	if (conn_dead(c))
		return rpal_fail(ECONNRESET, "peer pid %d is gone", (int)c->peer_pid);
	return 0;
}

/* Wait for a free slot (and, for a buffer of size bytes, quota) or fail. */
static RPAL_WARM int send_prepare(struct rpal_conn *c, uint32_t what, int flags, uint64_t size, bool allocated)
{
	bool full = false;

	for (;;) {
		int ret = send_error(c);

		if (ret)
			return ret;
		if (!ring_reserve(c)) {
			if (!(what & WANT_QUOTA))
				return 0;
			acks_drain(c);
			if (quota_ok(c, size, allocated)) {
				store_relaxed(&c->want_bytes, 0);
				return 0;
			}
			/* What a waiter, or EPOLLOUT, must see room for. */
			store_relaxed(&c->want_bytes, size);
		}
		/* Backpressure: counted once per send that meets it. */
		if (!full) {
			full = true;
			stat_inc(&c->st->tx.ring_full);
		}
		/* The consumer may be waiting on messages we deferred. */
		if (c->published != c->tail)
			notify_peer_rx(c);
		ret = conn_wait(c, what, flags);
		/* A non-blocking sender never sleeps where a hang-up shows. */
		if (ret == -EAGAIN && conn_poll_peer_if_idle(c, flags))
			continue;
		if (ret)
			return ret;
	}
}

/* Publish a claimed buffer of ours, whose block is size bytes.  The
 * caller has reserved slot and quota. */
static RPAL_WARM void publish_buf(struct rpal_conn *c, void *buf, size_t len, uint64_t size)
{
	lock_take(&c->out_lock);
	bufset_add(&c->out, (uintptr_t)buf);   /* cannot fail: quota checked */
	store_relaxed(&c->out_bytes, load_relaxed(&c->out_bytes) + size);
	store_relaxed(&c->st->tx.bufs_out, c->out.count);     /* under out_lock: one writer */
	lock_give(&c->out_lock);
	ring_publish(c, NULL, (uint32_t)len, (uintptr_t)buf, RPAL_SLOT_BUF);
}

/* A block of size bytes for a len-byte message that does not fit a slot,
 * beside the last of the arena, which is kept for connection blocks. */
static RPAL_WARM void *arena_alloc_msg(size_t len, uint64_t size)
{
	for (bool reaped = false;; reaped = true) {
		void *p = arena_free_bytes() >= size + arena_reserve() ? arena_alloc(len) : NULL;

		if (p || reaped || !conns_reap_acks())
			return p;
	}
}

/* A message too large for a slot: copied into a buffer of our arena. */
static RPAL_WARM ssize_t send_large(struct rpal_conn *c, const void *buf, size_t len, int flags)
{
	uint64_t size;
	void *copy;
	int ret;

	if (len > UINT32_MAX || len > rpal_g.cfg.arena_size / 2)
		return rpal_fail(EMSGSIZE, "message of %zu bytes is larger than half the arena", len);
	size = alloc_block_size(len);
	ret = send_prepare(c, WANT_SLOT | WANT_QUOTA, flags, size, false);
	if (ret)
		return ret;
	copy = arena_alloc_msg(len, size);
	if (!copy)
		return rpal_fail(ENOMEM, "arena exhausted: no room for a %zu-byte message beside the %" PRIu64
				 " bytes kept for new connections (do peers release what they receive?)",
				 len, arena_reserve());
	memcpy(copy, buf, len);
	arena_claim(copy, len);
	publish_buf(c, copy, len, size);
	return (ssize_t)len;
}

/* Inline: a small message into a free slot is the path to keep short. */
static inline ssize_t send_one(struct rpal_conn *c, const void *buf, size_t len, int flags)
{
	int ret;

	if (len == 0)   /* would read as end of stream */
		return rpal_fail(EINVAL, "empty messages are not allowed");
	if (len > RPAL_INLINE_MAX)
		return send_large(c, buf, len, flags);
	/* send_prepare() waits for a slot; most sends find one free. */
	ret = send_error(c);
	if (!ret && ring_reserve(c))
		ret = send_prepare(c, WANT_SLOT, flags, 0, false);
	if (ret)
		return ret;
	ring_publish(c, buf, (uint32_t)len, 0, RPAL_SLOT_INLINE);
	return (ssize_t)len;
}

/*
 * After publishing: wake (or, hosted, call) the consumer unless RPAL_MORE,
 * then say which CPU we send from.  A consumer spins only for a producer on
 * another CPU; one we never told spins for us even on our own CPU, until
 * the scheduler's tick.  0, or <0 if a hosted receiver failed in the call.
 */
static inline __attribute__((always_inline)) int sent(struct rpal_conn *c, int flags)
{
	int ret = flags & RPAL_MORE ? 0 : notify_peer_rx(c);

	cpu_note(&c->me->tx_cpu);
	return ret;
}

RPAL_EXPORT RPAL_HOT ssize_t rpal_send(int fd, const void *buf, size_t len, int flags)
{
	struct rpal_conn *c;
	ssize_t ret;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_send(fd, buf, len, flags));
	if (!buf && len)
		return rpal_fail(EINVAL, "rpal_send: buf is NULL");
	if ((err = flags_check("rpal_send", flags, RPAL_NONBLOCK | RPAL_MORE)))
		return err;
	ret = send_one(c, buf, len, flags);
	if (ret >= 0) {
		int e = sent(c, flags);
		if (e)
			ret = e;        /* hosted: the receiver failed in the call */
	}
	return ret;
}

RPAL_EXPORT RPAL_WARM int rpal_send_batch(int fd, const struct iovec *msgs, unsigned n, int flags)
{
	struct rpal_conn *c;
	unsigned i;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_send_batch(fd, msgs, n, flags));
	if (!msgs && n)
		return rpal_fail(EINVAL, "rpal_send_batch: msgs is NULL");
	if ((err = flags_check("rpal_send_batch", flags, RPAL_NONBLOCK | RPAL_MORE)))
		return err;
	/* A bad entry fails the batch before anything is sent. */
	for (i = 0; i < n; i++) {
		if (!msgs[i].iov_len)
			return rpal_fail(EINVAL, "rpal_send_batch: message %u is empty", i);
		if (!msgs[i].iov_base)
			return rpal_fail(EINVAL, "rpal_send_batch: message %u has a NULL base", i);
	}
	for (i = 0; i < n; i++) {
		/* Only the first may wait; later ones stop at a full ring. */
		ssize_t ret = send_one(c, msgs[i].iov_base, msgs[i].iov_len, i ? flags | RPAL_NONBLOCK : flags);
		if (ret < 0) {
			if (i == 0)
				return (int)ret;
			break;
		}
	}
	err = sent(c, flags);
	return err ? err : (int)i;
}

RPAL_EXPORT int rpal_flush(int fd)
{
	struct rpal_conn *c;
	int err;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_flush(fd));
	if (!conn_dead(c))
		return notify_peer_rx(c);
	return 0;
}

RPAL_EXPORT void *rpal_buf_alloc(size_t len)
{
	void *p;

	if (len == 0 || rpal_ensure_init() || len > rpal_g.cfg.arena_size / 2)
		return NULL;
	p = arena_alloc(len);
	/* Buffers the peers released come back when some connection looks:
	 * look at them all before saying there is no room. */
	if (!p && conns_reap_acks())
		p = arena_alloc(len);
	return p;
}

RPAL_EXPORT void rpal_buf_free(void *buf)
{
	/* A buffer in flight belongs to the peer until it acks; freeing it
	 * here would hand it out twice. */
	if (!buf || !rpal_g.inited || arena_in_flight(buf))
		return;
	arena_free(buf);
}

/* Every page of a buffer we publish exists in our memfd: a peer refuses a
 * buffer over pages nobody wrote (peer_pages_known()), and a caller need
 * not have written all of its buffer.  A read of a page of our memfd that
 * is not there allocates it; one that is there costs a load. */
static RPAL_WARM void pages_touch(const void *buf, size_t len)
{
	uintptr_t p = (uintptr_t)buf, end = p + len;

	for (; p < end; p = (p | (RPAL_PAGE - 1)) + 1)
		(void)*(const volatile char *)p;
}

RPAL_EXPORT RPAL_WARM int rpal_send_buf(int fd, void *buf, size_t len, int flags)
{
	struct rpal_conn *c;
	long size;
	int err, ret;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_send_buf(fd, buf, len, flags));
	if ((err = flags_check("rpal_send_buf", flags, RPAL_NONBLOCK | RPAL_MORE)))
		return err;
	if (len == 0 || len > UINT32_MAX)
		return rpal_fail(EINVAL, "rpal_send_buf: length %zu out of range", len);
	/* Validate before waiting: a bad pointer fails at once. */
	size = arena_claim(buf, len);
	if (size == -EBUSY)
		return rpal_fail(EBUSY, "rpal_send_buf: buffer %p is already in flight", buf);
	if (size < 0)
		return rpal_fail(EINVAL, "rpal_send_buf: %p is not a live rpal_buf_alloc() buffer of >= %zu bytes",
				 buf, len);
	ret = send_prepare(c, WANT_SLOT | WANT_QUOTA, flags, (uint64_t)size, true);
	if (ret) {
		arena_unclaim(buf);     /* still the caller's */
		return ret;
	}
	pages_touch(buf, len);
	publish_buf(c, buf, len, (uint64_t)size);
	return sent(c, flags);
}

/* ---------------------------------------------------------------- receive */

/* Nothing queued: end of stream, error, or wait.  0 means "look again". */
static RPAL_HOT int recv_empty(struct rpal_conn *c, int flags, bool *eof)
{
	*eof = false;
	if (conn_err(c))
		return -conn_err(c);
	if (peer_update(c) & RPAL_STATE_SHUT_WR) {
		/* A3: state was stored after the last slot (R3); look once more. */
		if (ring_readable(c))
			return 0;
		*eof = true;
	} else if (load_acquire(&c->shut_rd) && !ring_readable(c)) {
		/* We shut down reading: what was queued has been read. */
		*eof = true;
	}
	if (*eof) {
		store_relaxed(&c->rx_eof, true);
		return 0;
	}
	if (conn_poll_peer_if_idle(c, flags)) {
		if (!ring_readable(c))
			return rpal_fail(ECONNRESET, "peer pid %d is gone", (int)c->peer_pid);
		return 0;
	}
	/* Not waiting: the ring was empty when we looked, which is all a poll
	 * can say (and all the RFC server's read-until-EAGAIN loop needs). */
	if (flags & RPAL_NONBLOCK)
		return -EAGAIN;
	return conn_wait(c, WANT_RX, flags);
}

RPAL_EXPORT RPAL_HOT ssize_t rpal_recv(int fd, void *buf, size_t len, int flags)
{
	struct rpal_conn *c;
	struct rpal_slot s;
	int err, r;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_recv(fd, buf, len, flags));
	if (!buf && len)
		return rpal_fail(EINVAL, "rpal_recv: buf is NULL");
	if ((err = flags_check("rpal_recv", flags, RPAL_NONBLOCK)))
		return err;
	if (load_relaxed(&c->rx_eof))
		return 0;
	for (;;) {
		bool eof;

		r = ring_peek(c, &s, buf, len);
		if (r < 0)
			return r;
		if (r == 1)
			break;
		r = recv_empty(c, flags, &eof);
		if (r < 0)
			return r;
		if (eof)
			return 0;
	}
	if (s.len > len)
		return rpal_fail(EMSGSIZE, "message of %u bytes does not fit in %zu", s.len, len);
	if (s.flags == RPAL_SLOT_INLINE) {
		ring_consume(c, s.len);
		notify_peer_tx(c, false);
	} else {
		memcpy(buf, (const void *)(uintptr_t)s.addr, s.len);
		r = ring_check_buf_copy(c);
		if (r)
			return r;
		ring_consume(c, s.len);
		r = ack_push(c, s.addr);
		if (r)
			return r;
		notify_peer_tx(c, true);
	}
	return s.len;
}

RPAL_EXPORT RPAL_WARM int rpal_recv_msg(int fd, struct rpal_msg *msgs, unsigned n, int flags)
{
	struct rpal_conn *c;
	struct rpal_slot s;
	unsigned got = 0;
	int err, r;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_recv_msg(fd, msgs, n, flags));
	if (n == 0 || !msgs)
		return rpal_fail(EINVAL, "rpal_recv_msg: %s", n ? "msgs is NULL" : "n is 0");
	if ((err = flags_check("rpal_recv_msg", flags, RPAL_NONBLOCK)))
		return err;
	if (load_relaxed(&c->rx_eof))
		return 0;
	for (;;) {
		bool eof;

		while (got < n) {
			struct rpal_msg *m = &msgs[got];

			r = ring_peek(c, &s, m->inline_copy, sizeof(m->inline_copy));
			if (r < 0)
				return got ? (int)got : r;   /* the error stays for the next call */
			if (r == 0)
				break;
			m->len = s.len;
			if (s.flags == RPAL_SLOT_INLINE) {
				m->data = m->inline_copy;
				m->flags = 0;
				m->token = 0;
			} else {
				/* Remembered, so that only a real release is acked. */
				if (bufset_add(&c->held, s.addr)) {
					conn_violation(c);
					r = rpal_fail(EPROTO, "peer pid %d exceeded its buffer quota",
						      (int)c->peer_pid);
					return got ? (int)got : r;
				}
				m->data = (const void *)(uintptr_t)s.addr;
				m->flags = RPAL_MSG_BUF;
				m->token = s.addr;
				store_relaxed(&c->st->rx.bufs_held, c->held.count);
			}
			ring_consume(c, s.len);
			got++;
		}
		if (got) {
			notify_peer_tx(c, false);
			return (int)got;
		}
		r = recv_empty(c, flags, &eof);
		if (r < 0)
			return r;
		if (eof)
			return 0;
	}
}

RPAL_EXPORT RPAL_WARM int rpal_msg_release(int fd, struct rpal_msg *msgs, unsigned n)
{
	struct rpal_conn *c;
	unsigned i;
	int err, ret = 0;
	bool acked = false;

	c = conn_get(fd, &err);
	if (!c)
		return err;
	MPK_REENTER(c, rpal_msg_release(fd, msgs, n));
	if (!msgs && n)
		return rpal_fail(EINVAL, "rpal_msg_release: msgs is NULL");
	for (i = 0; i < n; i++) {
		uint64_t tok = msgs[i].token;

		if (!tok)
			continue;       /* inline, or this struct was released */
		/* A forged token, a copy released twice or another connection's
		 * message would make the peer see an ack it cannot match and
		 * close the connection: refuse it here instead. */
		if (!bufset_del(&c->held, tok)) {
			ret = rpal_fail(EINVAL, "rpal_msg_release: message %u (token %#llx) was not received on "
					"connection %d, or was released already", i, (unsigned long long)tok, fd);
			break;
		}
		msgs[i].token = 0;      /* a second release of this struct is a no-op */
		store_relaxed(&c->st->rx.bufs_held, c->held.count);
		if (conn_dead(c) || conn_err(c))
			continue;
		ret = ack_push(c, tok);
		if (ret)
			break;
		acked = true;
	}
	if (acked)
		notify_peer_tx(c, true);
	return ret;
}
