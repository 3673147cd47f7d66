/* SPDX-License-Identifier: MIT */
/*
 * rfc_client: the RPAL RFC's samples/rpal/client.c flow, on rpal: stamp
 * rdtsc into a 32-byte message, send it, wait for the echo and compare.
 *
 *   ./rfc_client [count]          (default 1,000,000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>
#include <rpal.h>

#define MSG_LEN 32

int main(int argc, char **argv)
{
	long count = argc > 1 ? atol(argv[1]) : 1000000;
	char hello[MSG_LEN], reply[MSG_LEN];
	int fd;

	if (count <= 0) {                          /* --help, or a typo */
		fprintf(stderr, "usage: rfc_client [count]\n");
		return 2;
	}
	fd = rpal_connect("rfc-sample", NULL, 0);  /* connect + rpal_request_service + rpal_uds_fdmap */
	if (fd < 0) {
		fprintf(stderr, "connect: %s\n", rpal_strerror(fd));
		return 1;
	}
	for (long i = 0; i < count; i++) {
		for (int k = 18; k < MSG_LEN; k++)
			hello[k] = (char)('a' + i % 26);
		sprintf(hello, "0x%016llx", (unsigned long long)__rdtsc());
		if (rpal_send(fd, hello, MSG_LEN, 0) < 0)           /* rpal_write_ptrs */
			return 1;
		if (rpal_recv(fd, reply, MSG_LEN, 0) != MSG_LEN ||  /* read() of the echo */
		    memcmp(reply, hello, MSG_LEN)) {
			fprintf(stderr, "message %ld: bad echo\n", i);
			return 1;
		}
	}
	rpal_close(fd);
	return 0;
}
