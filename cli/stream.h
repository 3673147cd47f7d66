/* SPDX-License-Identifier: MIT */
/*
 * stream.h - framing of fixed-size messages over a byte stream (pipe, Unix
 * socket), shared by the kernel transports.  Reads take whatever is there
 * (several messages when batched), writes of one batch go out in one
 * write(): what a tuned server does, so the baselines are not handicapped.
 */
#ifndef RPAL_CLI_STREAM_H
#define RPAL_CLI_STREAM_H

#include <stddef.h>
#include "bench.h"

struct stream {
	int rfd, wfd;
	int epfd;		/* >= 0: epoll_wait() before each read (the RFC's server) */
	size_t msg;
	unsigned char *rbuf;
	size_t rcap, rhead, rtail;
	unsigned char *wbuf;
	size_t wcap, wlen;
};

int stream_open(struct bt_ctx *c, struct stream *s, int rfd, int wfd, int use_epoll);
void *stream_tx_buf(struct bt_ctx *c, struct stream *s);
int stream_send(struct bt_ctx *c, struct stream *s, int more);
const void *stream_recv(struct bt_ctx *c, struct stream *s);
void stream_release(struct stream *s);
void stream_close(struct stream *s);

#endif
