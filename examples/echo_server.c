/* SPDX-License-Identifier: MIT */
/*
 * echo_server: answers every message with the same bytes.  Written the way
 * an epoll server is written; compare with uds/echo_server.c.
 *
 * It never waits for one peer.  A blocking rpal_send() waits for as long as
 * the peer does not read (or holds our buffers), and while it waits no other
 * client is served.  So every call is RPAL_NONBLOCK, and a reply that cannot
 * go now waits in its connection's queue until EPOLLOUT says the peer read.
 *
 *   ./echo_server [service]        (default service: "echo")
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rpal.h>

#define QUEUE_MAX 16    /* replies held per connection; then we stop reading it */
#define BATCH     64    /* messages read per event: a busy peer cannot hog the loop */

struct reply {
	size_t len;
	char data[];
};

struct conn {
	int fd;
	int eof;                        /* the peer shut down writing */
	uint32_t events;                /* the interest registered now */
	unsigned head, count;           /* replies not sent yet, in order */
	struct reply *queue[QUEUE_MAX];
};

static int ep;

/* Close a connection; err < 0 says why, where the peer did not just leave. */
static void drop(struct conn *c, int err)
{
	if (err < 0)
		fprintf(stderr, "echo_server: dropping connection %d: %s\n", c->fd, rpal_strerror(err));
	for (; c->count; c->count--, c->head = (c->head + 1) % QUEUE_MAX)
		free(c->queue[c->head]);
	rpal_close(c->fd);                                      /* also leaves the epoll set */
	free(c);
}

/* Send queued replies in order until the peer stops taking them.  <0: a hard error. */
static int flush(struct conn *c)
{
	for (; c->count; c->count--, c->head = (c->head + 1) % QUEUE_MAX) {
		struct reply *r = c->queue[c->head];
		ssize_t s = rpal_send(c->fd, r->data, r->len, RPAL_NONBLOCK);
		if (s < 0)
			return s == -EAGAIN ? 0 : (int)s;
		free(r);
	}
	return 0;
}

/* Send at once if nothing waits before it (replies keep their order), else queue a copy. */
static int reply(struct conn *c, const char *buf, size_t len)
{
	if (!c->count) {
		ssize_t s = rpal_send(c->fd, buf, len, RPAL_NONBLOCK);
		if (s != -EAGAIN)
			return s < 0 ? (int)s : 0;
	}
	struct reply *r = malloc(sizeof(*r) + len);
	if (!r)
		return -ENOMEM;
	r->len = len;
	memcpy(r->data, buf, len);
	c->queue[(c->head + c->count++) % QUEUE_MAX] = r;
	return 0;
}

/* Handle one event of a connection: flush, read, reply; then adjust the interest. */
static void serve(struct conn *c, uint32_t events)
{
	static char buf[256 << 10];     /* a Go Stream writes messages of up to 256 KiB */
	struct epoll_event ev = { .data.ptr = c };
	int err;

	if (events & (EPOLLHUP | EPOLLERR)) {                   /* gone */
		drop(c, 0);
		return;
	}
	if ((err = flush(c)) < 0) {                             /* broke the protocol */
		drop(c, err);
		return;
	}
	/* A full queue means the peer is not reading: stop reading its requests
	 * too.  Its ring to us fills and its own sends wait, not ours. */
	for (int i = 0; i < BATCH && !c->eof && c->count < QUEUE_MAX; i++) {
		ssize_t len = rpal_recv(c->fd, buf, sizeof(buf), RPAL_NONBLOCK);
		if (len == -EAGAIN)
			break;
		if (len == 0)
			c->eof = 1;                             /* it still reads what we owe it */
		else if ((err = len < 0 ? (int)len : reply(c, buf, (size_t)len)) < 0) {
			drop(c, err);                           /* gone, too long, or arena full */
			return;
		}
	}
	if (c->eof && !c->count) {
		drop(c, 0);
		return;
	}
	/* Level-triggered: EPOLLIN while we take requests, EPOLLOUT only while
	 * replies wait (asked for always, it would report at every wait). */
	ev.events = (!c->eof && c->count < QUEUE_MAX ? EPOLLIN : 0) | (c->count ? EPOLLOUT : 0);
	if (ev.events != c->events && rpal_epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->events = ev.events;
}

int main(int argc, char **argv)
{
	const char *service = argc > 1 ? argv[1] : "echo";
	struct epoll_event ev, events[64];
	int lfd;

	if (argc > 1 && argv[1][0] == '-') {                   /* --help, or a typo */
		fprintf(stderr, "usage: echo_server [service]\n");
		return 2;
	}

	lfd = rpal_listen(service, NULL);                       /* socket+bind+listen */
	if (lfd < 0) {
		fprintf(stderr, "listen %s: %s\n", service, rpal_strerror(lfd));
		return 1;
	}
	ep = rpal_epoll_create(0);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;                                     /* NULL: the listener */
	rpal_epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("echo_server: serving \"%s\"\n", service);
	fflush(stdout);

	for (;;) {
		int n = rpal_epoll_wait(ep, events, 64, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = events[i].data.ptr;
			if (c) {
				serve(c, events[i].events);
				continue;
			}
			int fd = rpal_accept(lfd, RPAL_NONBLOCK);  /* a slow handshake never blocks */
			if (fd < 0)
				continue;                       /* not done yet, or refused */
			c = calloc(1, sizeof(*c));
			ev.events = EPOLLIN;
			ev.data.ptr = c;
			if (!c || rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
				rpal_close(fd);
				free(c);
				continue;
			}
			c->fd = fd;
			c->events = EPOLLIN;
		}
	}
}
