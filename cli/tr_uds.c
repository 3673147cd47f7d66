/* SPDX-License-Identifier: MIT */
/*
 * tr_uds.c - "uds-epoll": the RPAL RFC's baseline.  A stream Unix socket;
 * the server waits in epoll_wait() (level-triggered EPOLLIN) and read()s,
 * then echoes with write(); the client write()s and blocks in read().
 * A socketpair carries the same data path as listen/connect.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include "stream.h"

struct uds {
	int sv[2];		/* [ROLE_SERVER], [ROLE_CLIENT] */
	struct stream st;
};

static int uds_setup(struct bt_ctx *c)
{
	struct uds *u = calloc(1, sizeof(*u));

	if (!u)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = u;
	u->sv[0] = u->sv[1] = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u->sv))
		return bt_fail(c, errno, "socketpair: %s", strerror(errno));
	/* Large messages: let one fit in the socket buffer (capped by wmem_max). */
	if (c->spec->size > 65536) {
		int sz = (int)(c->spec->size * 2);

		for (int i = 0; i < 2; i++) {
			setsockopt(u->sv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
			setsockopt(u->sv[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
		}
	}
	return 0;
}

static int uds_open(struct bt_ctx *c)
{
	struct uds *u = c->priv;
	int fd = u->sv[c->role];

	close(u->sv[!c->role]);
	return stream_open(c, &u->st, fd, fd, c->role == ROLE_SERVER);
}

static void *uds_tx_buf(struct bt_ctx *c)
{
	return stream_tx_buf(c, &((struct uds *)c->priv)->st);
}

static int uds_send(struct bt_ctx *c, void *buf, int more)
{
	return stream_send(c, &((struct uds *)c->priv)->st, more);
}

static const void *uds_recv(struct bt_ctx *c)
{
	return stream_recv(c, &((struct uds *)c->priv)->st);
}

static void uds_release(struct bt_ctx *c)
{
	stream_release(&((struct uds *)c->priv)->st);
}

static void uds_close(struct bt_ctx *c)
{
	stream_close(&((struct uds *)c->priv)->st);
}

static void uds_teardown(struct bt_ctx *c)
{
	struct uds *u = c->priv;

	if (!u)
		return;
	for (int i = 0; i < 2; i++)
		if (u->sv[i] >= 0)
			close(u->sv[i]);
	free(u);
}

const struct transport tr_uds_epoll = {
	.name = "uds-epoll",
	.what = "Unix stream socket, server in epoll_wait + read (the RFC's baseline)",
	.setup = uds_setup,
	.open = uds_open,
	.tx_buf = uds_tx_buf,
	.send = uds_send,
	.recv = uds_recv,
	.release = uds_release,
	.close = uds_close,
	.teardown = uds_teardown,
};
