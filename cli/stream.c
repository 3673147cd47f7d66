/* SPDX-License-Identifier: MIT */
/* stream.c - see stream.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include "stream.h"

int stream_open(struct bt_ctx *c, struct stream *s, int rfd, int wfd, int use_epoll)
{
	const struct run_spec *sp = c->spec;
	unsigned batch = sp->suite == SU_THROUGHPUT ? sp->batch : 1;

	memset(s, 0, sizeof(*s));
	s->rfd = rfd;
	s->wfd = wfd;
	s->epfd = -1;
	s->msg = sp->size;
	s->rcap = sp->size * (batch + 1);
	if (s->rcap < 65536)
		s->rcap = 65536;
	s->wcap = sp->size * batch;
	s->rbuf = malloc(s->rcap);
	s->wbuf = malloc(s->wcap);
	if (!s->rbuf || !s->wbuf)
		return bt_fail(c, ENOMEM, "out of memory for stream buffers");
	if (use_epoll) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = rfd };

		s->epfd = epoll_create1(0);
		if (s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, rfd, &ev))
			return bt_fail(c, errno, "epoll: %s", strerror(errno));
	}
	return 0;
}

void *stream_tx_buf(struct bt_ctx *c, struct stream *s)
{
	return s->wbuf + s->wlen;
}

int stream_send(struct bt_ctx *c, struct stream *s, int more)
{
	size_t off = 0;

	s->wlen += s->msg;
	if (more && s->wlen + s->msg <= s->wcap)
		return 0;
	while (off < s->wlen) {
		ssize_t n = write(s->wfd, s->wbuf + off, s->wlen - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return bt_fail(c, errno, "%s: write: %s", c->role ? "client" : "server",
				       strerror(errno));
		}
		off += (size_t)n;
	}
	s->wlen = 0;
	return 0;
}

const void *stream_recv(struct bt_ctx *c, struct stream *s)
{
	while (s->rtail - s->rhead < s->msg) {
		ssize_t n;

		if (s->rcap - s->rtail < s->msg) {
			memmove(s->rbuf, s->rbuf + s->rhead, s->rtail - s->rhead);
			s->rtail -= s->rhead;
			s->rhead = 0;
		}
		if (s->epfd >= 0) {
			struct epoll_event ev;

			n = epoll_wait(s->epfd, &ev, 1, -1);
			if (n < 0 && errno != EINTR) {
				bt_fail(c, errno, "epoll_wait: %s", strerror(errno));
				return NULL;
			}
			if (n <= 0)
				continue;
		}
		n = read(s->rfd, s->rbuf + s->rtail, s->rcap - s->rtail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			bt_fail(c, n ? errno : EPIPE, "%s: read: %s", c->role ? "client" : "server",
				n ? strerror(errno) : "peer closed the stream");
			return NULL;
		}
		s->rtail += (size_t)n;
	}
	return s->rbuf + s->rhead;
}

void stream_release(struct stream *s)
{
	s->rhead += s->msg;
	if (s->rhead == s->rtail)
		s->rhead = s->rtail = 0;
}

void stream_close(struct stream *s)
{
	free(s->rbuf);
	free(s->wbuf);
	if (s->epfd >= 0)
		close(s->epfd);
	close(s->rfd);
	if (s->wfd != s->rfd)
		close(s->wfd);
}
