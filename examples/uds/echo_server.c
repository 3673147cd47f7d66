/* SPDX-License-Identifier: MIT */
/*
 * The plain Unix-socket + epoll echo server that echo_server.c was ported
 * from.  SOCK_SEQPACKET keeps message boundaries, as rpal does.
 *
 *   ./uds_echo_server [path]       (default: /tmp/uds-echo.sock)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/tmp/uds-echo.sock";
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct epoll_event ev, events[64];
	char buf[65536];
	int lfd, ep;

	if (argc > 1 && argv[1][0] == '-') {           /* --help, or a typo */
		fprintf(stderr, "usage: uds_echo_server [path]\n");
		return 2;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0) {
		perror("listen");
		return 1;
	}
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("uds_echo_server: serving %s\n", path);
	fflush(stdout);

	for (;;) {
		int n = epoll_wait(ep, events, 64, -1);
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			if (fd == lfd) {
				int c = accept(lfd, NULL, NULL);
				if (c < 0)
					continue;
				ev.events = EPOLLIN | EPOLLRDHUP;
				ev.data.fd = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				continue;
			}
			ssize_t len = read(fd, buf, sizeof(buf));
			/* End of stream, an error, or a client that stopped reading. */
			if (len <= 0 || write(fd, buf, (size_t)len) != len)
				close(fd);
		}
	}
}
