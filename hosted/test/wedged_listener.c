/* SPDX-License-Identifier: MIT */
/*
 * wedged_listener.c PATH - a "host" that never accepts: a SOCK_SEQPACKET
 * listener at PATH with a backlog of 0, filled by connections of its own,
 * so that a further connect() there waits for room that never comes.
 * Prints "ready N" (N: the connections that filled it) once full, then
 * waits to be killed (at most 120 s).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int lfd, n = 0;

	if (argc != 2 || strlen(argv[1]) >= sizeof(a.sun_path)) {
		fprintf(stderr, "usage: wedged_listener PATH\n");
		return 2;
	}
	strcpy(a.sun_path, argv[1]);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 0) < 0) {
		fprintf(stderr, "wedged_listener: %s: %s\n", a.sun_path, strerror(errno));
		return 1;
	}
	/* Non-blocking connects until one finds the backlog full. */
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0) {
			fprintf(stderr, "wedged_listener: socket: %s\n", strerror(errno));
			return 1;
		}
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			if (errno == EAGAIN)
				break;
			fprintf(stderr, "wedged_listener: connect: %s\n", strerror(errno));
			return 1;
		}
		if (++n > 1000) {
			fprintf(stderr, "wedged_listener: the backlog never fills\n");
			return 1;
		}
	}
	printf("ready %d\n", n);
	fflush(stdout);
	alarm(120);
	for (;;)
		pause();
}
