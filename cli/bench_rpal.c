/* SPDX-License-Identifier: MIT */
/*
 * bench_rpal.c - "rpal-connected": two processes over librpal, written as a
 * user would port the RFC's sample: the server adds the connection to an
 * rpal epoll set with EPOLLIN, waits in rpal_epoll_wait(), reads with
 * rpal_recv() and echoes with rpal_send(); the client rpal_send()s and
 * blocks in rpal_recv().  --wait spin sets spin_us to --spin-us (1 s: a
 * waiter never sleeps, the consumer is awake); --wait sleep and adaptive
 * set the wait policy and keep the default spin_us.
 * Zero copy uses rpal_buf_alloc/rpal_send_buf and rpal_recv_msg/release.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "rpal.h"

struct rp {
	char service[64];
	int lfd, fd, ep;
	int readable;			/* server: the last rpal_epoll_wait said so */
	unsigned char *priv_tx, *priv_rx;
	struct rpal_msg msg;		/* zero copy: the message held */
	int hosted;			/* rpal-hosted: rpal_fini is the program's, at exit */
};

static int rp_setup(struct bt_ctx *c)
{
	static unsigned seq;
	struct rp *p = calloc(1, sizeof(*p));

	if (!p)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = p;
	p->lfd = p->fd = p->ep = -1;
	/* Abstract namespace: nothing left on disk if a run is killed. */
	snprintf(p->service, sizeof(p->service), "@rpal-bench-%d-%u", (int)getpid(), seq++);
	return 0;
}

static int rp_err(struct bt_ctx *c, const char *what, int ret)
{
	return bt_fail(c, -ret, "%s: %s: %s", c->role ? "client" : "server", what,
		       rpal_strerror(-ret));
}

static int rp_open(struct bt_ctx *c)
{
	struct rp *p = c->priv;
	struct rpal_config cfg;
	int ret;

	rpal_config_default(&cfg);
	if (c->spec->wait == WAIT_SPIN) {
		cfg.wait_policy = RPAL_WAIT_POLICY_SPIN;
		cfg.spin_us = c->spec->spin_us;
	} else {
		cfg.wait_policy = c->spec->wait == WAIT_SLEEP ? RPAL_WAIT_POLICY_SLEEP : RPAL_WAIT_POLICY_ADAPTIVE;
	}
	ret = rpal_init(&cfg);
	if (ret < 0)
		return rp_err(c, "rpal_init", ret);
	p->priv_tx = malloc(c->spec->size);
	p->priv_rx = malloc(c->spec->size);
	if (!p->priv_tx || !p->priv_rx)
		return bt_fail(c, ENOMEM, "out of memory");
	if (c->role == ROLE_SERVER) {
		p->lfd = rpal_listen(p->service, NULL);
		if (p->lfd < 0)
			return rp_err(c, "rpal_listen", p->lfd);
		return 0;
	}
	p->fd = rpal_connect(p->service, NULL, 0);
	if (p->fd < 0)
		return rp_err(c, "rpal_connect", p->fd);
	return 0;
}

static int rp_accept(struct bt_ctx *c)
{
	struct rp *p = c->priv;
	struct epoll_event ev = { .events = EPOLLIN };

	p->fd = rpal_accept(p->lfd, 0);
	if (p->fd < 0)
		return rp_err(c, "rpal_accept", p->fd);
	p->ep = rpal_epoll_create(0);
	if (p->ep < 0)
		return rp_err(c, "rpal_epoll_create", -errno);
	ev.data.fd = p->fd;
	if (rpal_epoll_ctl(p->ep, EPOLL_CTL_ADD, p->fd, &ev))
		return rp_err(c, "rpal_epoll_ctl", -errno);
	return 0;
}

static void *rp_tx_buf(struct bt_ctx *c)
{
	struct rp *p = c->priv;
	void *b;

	if (!c->spec->zerocopy)
		return p->priv_tx;
	b = rpal_buf_alloc(c->spec->size);
	if (!b)
		bt_fail(c, ENOMEM, "%s: rpal_buf_alloc(%zu) failed: arena exhausted",
			c->role ? "client" : "server", c->spec->size);
	return b;
}

static int rp_send(struct bt_ctx *c, void *buf, int more)
{
	struct rp *p = c->priv;
	int flags = more ? RPAL_MORE : 0;
	ssize_t ret;

	if (c->spec->zerocopy) {
		ret = rpal_send_buf(p->fd, buf, c->spec->size, flags);
		if (ret < 0) {
			rpal_buf_free(buf);
			return rp_err(c, "rpal_send_buf", (int)ret);
		}
		return 0;
	}
	ret = rpal_send(p->fd, buf, c->spec->size, flags);
	if (ret < 0)
		return rp_err(c, "rpal_send", (int)ret);
	if ((size_t)ret != c->spec->size)
		return bt_fail(c, EIO, "rpal_send sent %zd of %zu bytes", ret, c->spec->size);
	return 0;
}

/* One message, in place (zero copy) or copied into priv_rx. */
static int rp_take(struct bt_ctx *c, int flags, const void **out)
{
	struct rp *p = c->priv;
	ssize_t n;

	if (c->spec->zerocopy) {
		n = rpal_recv_msg(p->fd, &p->msg, 1, flags);
		if (n == 1 && p->msg.len != c->spec->size) {
			rpal_msg_release(p->fd, &p->msg, 1);
			return bt_fail(c, EBADMSG, "rpal_recv_msg: %u bytes, expected %zu",
				       p->msg.len, c->spec->size);
		}
		*out = n == 1 ? p->msg.data : NULL;
	} else {
		n = rpal_recv(p->fd, p->priv_rx, c->spec->size, flags);
		if (n > 0 && (size_t)n != c->spec->size)
			return bt_fail(c, EBADMSG, "rpal_recv: %zd bytes, expected %zu", n,
				       c->spec->size);
		*out = p->priv_rx;
	}
	if (n == 0)
		return bt_fail(c, EPIPE, "%s: peer closed the connection", c->role ? "client" : "server");
	return n < 0 ? (int)n : 0;
}

static const void *rp_recv(struct bt_ctx *c)
{
	struct rp *p = c->priv;
	const void *m = NULL;
	int ret;

	if (c->role == ROLE_CLIENT) {
		ret = rp_take(c, 0, &m);
		if (ret < 0) {
			rp_err(c, c->spec->zerocopy ? "rpal_recv_msg" : "rpal_recv", ret);
			return NULL;
		}
		return m;
	}
	/* The server reads until EAGAIN, then waits: the RFC server's loop. */
	for (;;) {
		struct epoll_event ev[4];
		int n;

		if (p->readable) {
			ret = rp_take(c, RPAL_NONBLOCK, &m);
			if (!ret)
				return m;
			if (ret != -EAGAIN) {
				rp_err(c, c->spec->zerocopy ? "rpal_recv_msg" : "rpal_recv", ret);
				return NULL;
			}
			p->readable = 0;
		}
		n = rpal_epoll_wait(p->ep, ev, 4, -1);
		if (n < 0 && errno != EINTR) {
			rp_err(c, "rpal_epoll_wait", -errno);
			return NULL;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].events & (EPOLLIN | EPOLLRPALIN))
				p->readable = 1;
			else if (ev[i].events & (EPOLLHUP | EPOLLERR)) {
				bt_fail(c, ECONNRESET, "server: connection hung up (events 0x%x)",
					ev[i].events);
				return NULL;
			}
		}
	}
}

static void rp_release(struct bt_ctx *c)
{
	struct rp *p = c->priv;

	if (c->spec->zerocopy)
		rpal_msg_release(p->fd, &p->msg, 1);
}

static void rp_close(struct bt_ctx *c)
{
	struct rp *p = c->priv;
	struct rpal_conn_info ci;

	/* The claim to check: with the peer awake, no syscall per message. */
	if (p->fd >= 0 && !rpal_conn_info(p->fd, &ci)) {
		c->sh->wakeups[c->role] = ci.wakeups;
		c->sh->sleeps[c->role] = ci.sleeps;
		c->sh->has_counts = 1;
	}
	if (p->ep >= 0)
		rpal_close(p->ep);
	if (p->fd >= 0)
		rpal_close(p->fd);
	if (p->lfd >= 0)
		rpal_close(p->lfd);
	if (!p->hosted)
		rpal_fini();
	free(p->priv_tx);
	free(p->priv_rx);
}

static void rp_teardown(struct bt_ctx *c)
{
	free(c->priv);
}

const struct transport tr_rpal_connected = {
	.name = "rpal-connected",
	.what = "librpal connected mode: rpal_epoll_wait + rpal_recv, echo with rpal_send",
	.flags = TF_WAIT | TF_ZEROCOPY,
	.setup = rp_setup,
	.open = rp_open,
	.accept = rp_accept,
	.tx_buf = rp_tx_buf,
	.send = rp_send,
	.recv = rp_recv,
	.release = rp_release,
	.close = rp_close,
	.teardown = rp_teardown,
};

/*
 * rpal-hosted (tr_hosted.c, bench_hosted.c) runs this transport inside two
 * programs of one `rpal run`: both name the service the relay chose, and
 * time rpal_send itself for the call round trip.
 */
int rp_hosted_setup(struct bt_ctx *c, const char *service)
{
	struct rp *p;
	int ret = rp_setup(c);

	if (ret < 0)
		return ret;
	p = c->priv;
	snprintf(p->service, sizeof(p->service), "%s", service);
	p->hosted = 1;
	return 0;
}

int rp_hosted_fd(struct bt_ctx *c)
{
	return ((struct rp *)c->priv)->fd;
}
