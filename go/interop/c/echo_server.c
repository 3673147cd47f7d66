/* SPDX-License-Identifier: MIT */
/*
 * echo_server - librpal echo server for the Go interop tests.
 *
 *   echo_server SERVICE [NCONN]
 *
 * Listens on SERVICE, prints "ready" and serves NCONN connections (default:
 * forever) one after the other: every message is echoed back (zero-copy
 * receive, one-copy send) until end of stream.  A connection that fails is
 * reported on stderr and the server goes on with the next.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "rpal.h"

int main(int argc, char **argv)
{
	struct rpal_msg m[16];
	long nconn = argc > 2 ? atol(argv[2]) : -1;
	int lfd, fd, n, i;

	if (argc < 2) {
		fprintf(stderr, "usage: echo_server SERVICE [NCONN]\n");
		return 2;
	}
	lfd = rpal_listen(argv[1], NULL);
	if (lfd < 0) {
		fprintf(stderr, "echo_server: listen %s: %s\n", argv[1], rpal_strerror(-lfd));
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	for (long k = 0; nconn < 0 || k < nconn; k++) {
		long msgs = 0;
		fd = rpal_accept(lfd, 0);
		if (fd < 0) {
			fprintf(stderr, "echo_server: accept: %s\n", rpal_strerror(-fd));
			continue;
		}
		for (;;) {
			n = rpal_recv_msg(fd, m, 16, 0);
			if (n == 0)
				break;
			if (n < 0) {
				fprintf(stderr, "echo_server: recv: %s\n", rpal_strerror(-n));
				break;
			}
			for (i = 0; i < n; i++) {
				ssize_t r = rpal_send(fd, m[i].data, m[i].len, 0);
				if (r < 0) {
					fprintf(stderr, "echo_server: send: %s\n", rpal_strerror((int)-r));
					break;
				}
			}
			rpal_msg_release(fd, m, (unsigned)n);
			msgs += n;
		}
		fprintf(stderr, "echo_server: connection %ld done after %ld messages\n", k, msgs);
		rpal_close(fd);
	}
	rpal_close(lfd);
	return 0;
}
