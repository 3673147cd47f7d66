/* SPDX-License-Identifier: MIT */
/*
 * tr_pipe.c - "pipe": two pipes, blocking read() and write() on both sides,
 * as `perf bench sched pipe` does.  Pipes are enlarged up to the message
 * size (pipe-max-size permitting) so a large message needs fewer wake-ups.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "stream.h"

struct pipes {
	int up[2];		/* client -> server */
	int down[2];		/* server -> client */
	struct stream st;
};

static int pipe_setup(struct bt_ctx *c)
{
	struct pipes *p = calloc(1, sizeof(*p));

	if (!p)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = p;
	p->up[0] = p->up[1] = p->down[0] = p->down[1] = -1;
	if (pipe2(p->up, O_CLOEXEC) || pipe2(p->down, O_CLOEXEC))
		return bt_fail(c, errno, "pipe2: %s", strerror(errno));
	if (c->spec->size > 65536) {
		/* Best effort: pipe-max-size (1 MiB by default) may refuse. */
		fcntl(p->up[1], F_SETPIPE_SZ, (int)c->spec->size);
		fcntl(p->down[1], F_SETPIPE_SZ, (int)c->spec->size);
	}
	return 0;
}

static int pipe_open(struct bt_ctx *c)
{
	struct pipes *p = c->priv;

	if (c->role == ROLE_SERVER) {
		close(p->up[1]);
		close(p->down[0]);
		return stream_open(c, &p->st, p->up[0], p->down[1], 0);
	}
	close(p->up[0]);
	close(p->down[1]);
	return stream_open(c, &p->st, p->down[0], p->up[1], 0);
}

static void *pipe_tx_buf(struct bt_ctx *c)
{
	return stream_tx_buf(c, &((struct pipes *)c->priv)->st);
}

static int pipe_send(struct bt_ctx *c, void *buf, int more)
{
	return stream_send(c, &((struct pipes *)c->priv)->st, more);
}

static const void *pipe_recv(struct bt_ctx *c)
{
	return stream_recv(c, &((struct pipes *)c->priv)->st);
}

static void pipe_release(struct bt_ctx *c)
{
	stream_release(&((struct pipes *)c->priv)->st);
}

static void pipe_close(struct bt_ctx *c)
{
	stream_close(&((struct pipes *)c->priv)->st);
}

static void pipe_teardown(struct bt_ctx *c)
{
	struct pipes *p = c->priv;

	if (!p)
		return;
	for (int i = 0; i < 2; i++) {
		if (p->up[i] >= 0)
			close(p->up[i]);
		if (p->down[i] >= 0)
			close(p->down[i]);
	}
	free(p);
}

const struct transport tr_pipe = {
	.name = "pipe",
	.what = "two pipes, blocking read + write (perf bench sched pipe)",
	.setup = pipe_setup,
	.open = pipe_open,
	.tx_buf = pipe_tx_buf,
	.send = pipe_send,
	.recv = pipe_recv,
	.release = pipe_release,
	.close = pipe_close,
	.teardown = pipe_teardown,
};
