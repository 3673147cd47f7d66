/* SPDX-License-Identifier: MIT */
/*
 * echo_server: answers every message with the same bytes.  Written the way
 * an epoll server is written; compare with uds/echo_server.c.
 *
 *   ./echo_server [service]        (default service: "echo")
 */
#include <stdio.h>
#include <stdlib.h>
#include <rpal.h>

int main(int argc, char **argv)
{
	const char *service = argc > 1 ? argv[1] : "echo";
	struct epoll_event ev, events[64];
	char buf[65536];
	int lfd, ep;

	lfd = rpal_listen(service, NULL);                       /* socket+bind+listen */
	if (lfd < 0) {
		fprintf(stderr, "listen %s: %s\n", service, rpal_strerror(lfd));
		return 1;
	}
	ep = rpal_epoll_create(0);
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	rpal_epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("echo_server: serving \"%s\"\n", service);
	fflush(stdout);

	for (;;) {
		int n = rpal_epoll_wait(ep, events, 64, -1);
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			if (fd == lfd) {
				int c = rpal_accept(lfd, RPAL_NONBLOCK);
				if (c < 0)
					continue;               /* not done yet, or refused */
				ev.events = EPOLLIN | EPOLLRDHUP;
				ev.data.fd = c;
				rpal_epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				continue;
			}
			ssize_t len = rpal_recv(fd, buf, sizeof(buf), 0);
			if (len > 0)
				rpal_send(fd, buf, (size_t)len, 0);
			else                                    /* end of stream, or the peer died */
				rpal_close(fd);                 /* also leaves the epoll set */
		}
	}
}
