/* SPDX-License-Identifier: MIT */
/*
 * echo_client: sends each argument (or 1,000 generated messages) to the echo
 * server, checks every reply, prints a summary.  Exits 1 on any mismatch.
 *
 *   ./echo_client [service [message...]]
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rpal.h>

int main(int argc, char **argv)
{
	const char *service = argc > 1 ? argv[1] : "echo";
	char msg[64], reply[65536];
	int fd, count = argc > 2 ? argc - 2 : 1000;

	if (argc > 1 && argv[1][0] == '-') {                   /* --help, or a typo */
		fprintf(stderr, "usage: echo_client [service [message...]]\n");
		return 2;
	}

	fd = rpal_connect(service, NULL, 0);                    /* socket+connect */
	for (int tries = 0; (fd == -ENOENT || fd == -ECONNREFUSED) && tries < 200; tries++) {
		usleep(10000);                  /* started with the server: let it listen */
		fd = rpal_connect(service, NULL, 0);
	}
	if (fd < 0) {
		fprintf(stderr, "connect %s: %s\n", service, rpal_strerror(fd));
		return 1;
	}
	for (int i = 0; i < count; i++) {
		const char *m = msg;
		if (argc > 2)
			m = argv[i + 2];
		else
			snprintf(msg, sizeof(msg), "message %d", i);
		size_t len = strlen(m);
		ssize_t s = rpal_send(fd, m, len, 0);               /* write() */
		if (s < 0) {
			fprintf(stderr, "send: %s\n", rpal_strerror((int)s));
			return 1;
		}
		ssize_t n = rpal_recv(fd, reply, sizeof(reply), 0); /* read() */
		if (n != (ssize_t)len || memcmp(reply, m, len)) {
			fprintf(stderr, "bad reply to \"%s\": %s\n", m, n < 0 ? rpal_strerror((int)n) : "differs");
			return 1;
		}
		if (argc > 2)
			printf("%.*s\n", (int)n, reply);
	}
	printf("echo_client: %d messages echoed\n", count);
	rpal_close(fd);                                         /* close() */
	return 0;
}
