/* SPDX-License-Identifier: MIT */
/*
 * rfc_server: the RPAL RFC's samples/rpal/server.c flow, on rpal.  The
 * client stamps rdtsc into each 32-byte message as "0x%016lx"; we add
 * (our rdtsc - its stamp) to a total and echo the message back.  At the end
 * it prints "Average latency: N cycles", as the RFC's sample does.
 *
 *   ./rfc_server [count]          (default 1,000,000, the RFC's MSG_NUM)
 */
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
#include <rpal.h>

#define MSG_LEN 32

int main(int argc, char **argv)
{
	long count = argc > 1 ? atol(argv[1]) : 1000000, got = 0;
	unsigned long long total = 0;
	struct epoll_event ev, events[8];
	char msg[MSG_LEN];
	int lfd, fd, ep;

	if (count <= 0) {                                           /* --help, or a typo */
		fprintf(stderr, "usage: rfc_server [count]\n");
		return 2;
	}
	if (rpal_init(NULL) < 0)                                    /* rpal_init(1, 0, &err) */
		return 1;
	lfd = rpal_listen("rfc-sample", NULL);                      /* socket, bind, listen */
	if (lfd < 0) {
		fprintf(stderr, "listen: %s\n", rpal_strerror(lfd));
		return 1;
	}
	printf("rfc_server: ready\n");
	fflush(stdout);
	fd = rpal_accept(lfd, 0);                                   /* accept + the key exchange */
	if (fd < 0) {
		fprintf(stderr, "accept: %s\n", rpal_strerror(fd));
		return 1;
	}
	ep = rpal_epoll_create(0);                                  /* epoll_create */
	ev.events = EPOLLRPALIN | EPOLLIN | EPOLLRDHUP | EPOLLET;
	ev.data.fd = fd;
	rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);                 /* rpal_epoll_ctl */

	while (got < count) {
		int n = rpal_epoll_wait(ep, events, 8, -1);             /* rpal_epoll_wait */
		for (int i = 0; i < n; i++) {
			if (!(events[i].events & EPOLLRPALIN))
				continue;
			/* Edge-triggered: read until empty. */
			while (rpal_recv(fd, msg, sizeof(msg), RPAL_NONBLOCK) == MSG_LEN) {
				unsigned long long now = __rdtsc(), tsc;
				sscanf(msg, "0x%016llx", &tsc);
				total += now - tsc;
				got++;
				rpal_send(fd, msg, sizeof(msg), 0);     /* send(): the echo */
			}
			if (events[i].events & (EPOLLRDHUP | EPOLLHUP))
				goto out;
		}
	}
out:
	printf("Average latency: %llu cycles (%ld messages)\n", got ? total / (unsigned long long)got : 0, got);
	rpal_close(fd);
	rpal_close(lfd);
	return got == count ? 0 : 1;
}
