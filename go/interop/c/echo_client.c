/* SPDX-License-Identifier: MIT */
/*
 * echo_client - librpal echo client for the Go interop tests.
 *
 *   echo_client SERVICE echo [ROUNDS]   sizes 1 B..1 MiB one-copy and zero-copy,
 *                                       then ROUNDS pipelined random sizes; all
 *                                       checked with checksums; exits 0 on success
 *   echo_client SERVICE hang            send one message, print "ready", sleep
 *                                       (to be killed with SIGKILL)
 *   echo_client SERVICE burst N         send N messages of 1000+i bytes (byte j
 *                                       of message i is (i + j) & 255), close,
 *                                       exit at once
 *   echo_client SERVICE shutrd          read one message, wait 300 ms (the
 *                                       server's sends fill the ring), shut
 *                                       down reading, send "after", print
 *                                       "shut", close once stdin ends
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "rpal.h"

static const size_t sizes[] = { 1, 7, 39, 40, 41, 64, 100, 2048, 2049, 4096, 65536, 1 << 20 };

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)xs(&s);
}

static uint32_t crc32(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
	}
	return ~c;
}

#define FAIL(...) do { fprintf(stderr, "echo_client: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

int main(int argc, char **argv)
{
	static unsigned char out[1 << 20], in[1 << 20];
	const char *mode = argc > 2 ? argv[2] : "echo";
	long rounds = argc > 3 ? atol(argv[3]) : 5000;
	int fd;

	if (argc < 2)
		FAIL("usage: echo_client SERVICE echo|hang [ROUNDS]");
	fd = rpal_connect(argv[1], NULL, 0);
	if (fd < 0)
		FAIL("connect %s: %s", argv[1], rpal_strerror(-fd));

	if (!strcmp(mode, "hang")) {
		if (rpal_send(fd, "hello", 5, 0) != 5)
			FAIL("send");
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}

	if (!strcmp(mode, "shutrd")) {
		ssize_t n = rpal_recv(fd, in, sizeof(in), 0);
		char c;

		if (n <= 0)
			FAIL("first message: %zd", n);
		usleep(300000);
		if (rpal_shutdown(fd, SHUT_RD))
			FAIL("shutdown");
		if (rpal_send(fd, "after", 5, 0) != 5)
			FAIL("send after SHUT_RD");
		printf("shut\n");
		fflush(stdout);
		while (read(0, &c, 1) > 0)
			;
		rpal_close(fd);
		return 0;
	}

	if (!strcmp(mode, "burst")) {
		for (long i = 0; i < rounds; i++) {
			size_t len = 1000 + (size_t)i;
			for (size_t j = 0; j < len; j++)
				out[j] = (unsigned char)(i + (long)j);
			if (rpal_send(fd, out, len, 0) != (ssize_t)len)
				FAIL("burst send %ld", i);
		}
		rpal_close(fd);
		return 0;
	}

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		ssize_t n;
		fill(out, sizes[k], k + 1);
		n = rpal_send(fd, out, sizes[k], 0);
		if (n != (ssize_t)sizes[k])
			FAIL("send %zu: %s", sizes[k], rpal_strerror((int)-n));
		n = rpal_recv(fd, in, sizeof(in), 0);
		if (n != (ssize_t)sizes[k] || crc32(in, sizes[k]) != crc32(out, sizes[k]))
			FAIL("one-copy echo of %zu bytes: got %zd bytes, checksum %08x want %08x", sizes[k], n,
			     n > 0 ? crc32(in, (size_t)n) : 0, crc32(out, sizes[k]));
	}
	printf("one-copy echo of %zu sizes: ok\n", sizeof(sizes) / sizeof(sizes[0]));

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct rpal_msg m;
		unsigned char *b = rpal_buf_alloc(sizes[k]);
		int r;
		if (!b)
			FAIL("rpal_buf_alloc(%zu)", sizes[k]);
		fill(b, sizes[k], 100 + k);
		fill(out, sizes[k], 100 + k);
		r = rpal_send_buf(fd, b, sizes[k], 0);
		if (r < 0)
			FAIL("send_buf %zu: %s", sizes[k], rpal_strerror(-r));
		r = rpal_recv_msg(fd, &m, 1, 0);
		if (r != 1)
			FAIL("recv_msg: %s", rpal_strerror(-r));
		if (m.len != sizes[k] || crc32(m.data, m.len) != crc32(out, sizes[k]))
			FAIL("zero-copy echo of %zu bytes differs", sizes[k]);
		rpal_msg_release(fd, &m, 1);
	}
	printf("zero-copy echo of %zu sizes: ok\n", sizeof(sizes) / sizeof(sizes[0]));

	{
		long sent = 0, got = 0;
		uint64_t s_seed = 7, r_seed = 7;
		while (got < rounds) {
			while (sent < rounds && sent - got < 64) {
				size_t len = 1 + xs(&s_seed) % 3000;
				fill(out, len, (uint64_t)sent);
				if (rpal_send(fd, out, len, RPAL_NONBLOCK) == -EAGAIN) {
					s_seed = 7;   /* replay the generator to this point */
					for (long i = 0; i < sent; i++)
						xs(&s_seed);
					break;
				}
				sent++;
			}
			size_t len = 1 + xs(&r_seed) % 3000;
			ssize_t n = rpal_recv(fd, in, sizeof(in), 0);
			if (n != (ssize_t)len)
				FAIL("pipelined message %ld: length %zd, want %zu (%s)", got, n, len,
				     n < 0 ? rpal_strerror((int)-n) : "");
			fill(out, len, (uint64_t)got);
			if (memcmp(in, out, len))
				FAIL("pipelined message %ld corrupted", got);
			got++;
		}
		printf("%ld pipelined messages: ok\n", rounds);
	}

	if (rpal_shutdown(fd, SHUT_WR) < 0)
		FAIL("shutdown");
	{
		ssize_t n = rpal_recv(fd, in, sizeof(in), 0);
		if (n != 0)
			FAIL("expected end of stream, got %zd (%s)", n, n < 0 ? rpal_strerror((int)-n) : "data");
	}
	printf("end of stream: ok\n");
	rpal_close(fd);
	return 0;
}
