/* SPDX-License-Identifier: MIT */
/*
 * Description: two processes echo messages of every size class through
 * rpal, one-copy and zero-copy, with checksums; every buffer comes back to
 * the allocator; shutdown reads as end of stream.
 */
#include <sys/mman.h>

#include "helpers.h"

static const size_t sizes[] = { 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 39, 40, 41, 64, 100, 2048, 2049, 4096, 65536, 1 << 20 };

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		if (!(i & 7))
			t_rand(&seed);
		p[i] = (unsigned char)(seed >> (8 * (i & 7)));
	}
}

static int server(int ready)
{
	struct rpal_msg m[16];
	int lfd = t_ok(rpal_listen("echo", NULL)), fd, n, i;

	(void)!write(ready, "r", 1);
	fd = t_ok(rpal_accept(lfd, 0));
	for (;;) {
		n = rpal_recv_msg(fd, m, 16, 0);
		if (n == 0)
			break;
		t_check(n > 0, "server recv: %s", rpal_strerror(n));
		for (i = 0; i < n; i++)
			t_ok(rpal_send(fd, m[i].data, m[i].len, 0));
		t_ok(rpal_msg_release(fd, m, (unsigned)n));
	}
	rpal_close(fd);
	rpal_close(lfd);
	return 0;
}

int main(void)
{
	static unsigned char out[1 << 20], in[1 << 20];
	struct rpal_stats st0, st;
	struct rpal_conn_info ci;
	struct rpal_msg m;
	int pfd[2], fd;
	pid_t pid;
	size_t k;
	long rounds = t_scaled(20000);
	char c;

	t_check(pipe(pfd) == 0, "pipe");
	pid = fork();
	if (pid == 0)
		exit(server(pfd[1]));
	close(pfd[1]);          /* a server that dies early reads as EOF, not a hang */
	t_check(read(pfd[0], &c, 1) == 1, "server did not start");
	fd = t_ok(rpal_connect("echo", NULL, 0));
	t_ok(rpal_stats(&st0));

	printf("one-copy echo of %zu sizes\n", sizeof(sizes) / sizeof(sizes[0]));
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		fill(out, sizes[k], k + 1);
		t_check(t_ok(rpal_send(fd, out, sizes[k], 0)) == (long)sizes[k], "short send");
		memset(in, 0, sizes[k]);
		t_check(t_ok(rpal_recv(fd, in, sizeof(in), 0)) == (long)sizes[k], "echo length");
		t_check(memcmp(in, out, sizes[k]) == 0, "echo of %zu bytes differs", sizes[k]);
	}

	printf("zero-copy echo: our buffer out, the server's buffer back\n");
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		unsigned char *b = rpal_buf_alloc(sizes[k]);
		t_check(b, "rpal_buf_alloc(%zu)", sizes[k]);
		fill(b, sizes[k], 100 + k);
		fill(out, sizes[k], 100 + k);
		t_ok(rpal_send_buf(fd, b, sizes[k], 0));
		t_check(t_ok(rpal_recv_msg(fd, &m, 1, 0)) == 1, "one message");
		/* In a window: echo_mpk runs this with protect_peers on. */
		long w = t_ok(rpal_peer_window_open(fd));
		t_check(m.len == sizes[k] && memcmp(m.data, out, sizes[k]) == 0, "zero-copy echo of %zu differs", sizes[k]);
		rpal_peer_window_close(w);
		if (sizes[k] > RPAL_INLINE_MAX)
			t_check(m.flags & RPAL_MSG_BUF, "large message not by pointer");
		t_ok(rpal_msg_release(fd, &m, 1));
	}

	printf("zero-copy: a buffer written only in part goes out whole, the rest zeros\n");
	{
		const size_t len = 4u << 20;
		unsigned char *b = rpal_buf_alloc(len), vec[(4u << 20) / 4096];
		size_t untouched = 0;

		t_check(b, "rpal_buf_alloc(%zu)", len);
		memcpy(b, "partial", 8);
		/* Pages nobody wrote yet, which a peer would refuse to read. */
		t_check(mincore((void *)((uintptr_t)b & ~(uintptr_t)4095), len, vec) == 0, "mincore: %m");
		for (size_t i = 0; i < sizeof(vec); i++)
			untouched += !(vec[i] & 1);
		t_check(untouched > 0, "every page of a fresh 4 MiB buffer is already there");
		t_ok(rpal_send_buf(fd, b, len, 0));
		t_check(t_ok(rpal_recv_msg(fd, &m, 1, 0)) == 1, "one message");
		long w = t_ok(rpal_peer_window_open(fd));
		const unsigned char *d = m.data;
		t_check(m.len == len && !memcmp(d, "partial", 8) && !d[len / 2] && !d[len - 1],
			"echo of a partly written buffer: %zu bytes", (size_t)m.len);
		rpal_peer_window_close(w);
		t_ok(rpal_msg_release(fd, &m, 1));
	}

	printf("%ld pipelined messages of random sizes with checksums\n", rounds);
	{
		long sent = 0, got = 0;
		uint64_t s_seed = 7, r_seed = 7;
		while (got < rounds) {
			while (sent < rounds && sent - got < 64) {
				size_t len = 1 + t_rand(&s_seed) % 3000;
				fill(out, len, (uint64_t)sent);
				if (rpal_send(fd, out, len, RPAL_NONBLOCK) == -EAGAIN)
					break;
				sent++;
			}
			size_t len = 1 + t_rand(&r_seed) % 3000;
			long n = t_ok(rpal_recv(fd, in, sizeof(in), 0));
			t_check(n == (long)len, "message %ld: length %ld, want %zu", got, n, len);
			fill(out, len, (uint64_t)got);
			t_check(memcmp(in, out, len) == 0, "message %ld corrupted", got);
			got++;
		}
	}

	/* rpal_conn_info() takes the acks that arrived since our last send. */
	t_check(t_eventually((rpal_conn_info(fd, &ci), rpal_stats(&st), st.arena_used == st0.arena_used), 2000),
		"arena use %zu, was %zu: buffers not returned", st.arena_used, st0.arena_used);

	printf("shutdown: the server sees end of stream and closes; we see it too\n");
	t_ok(rpal_shutdown(fd, SHUT_WR));
	t_check(rpal_send(fd, "x", 1, 0) == -EPIPE, "send after shutdown");
	t_check(rpal_recv(fd, in, sizeof(in), 0) == 0, "end of stream after the server closed");
	t_wait_ok(pid, "server");
	t_ok(rpal_close(fd));
	t_ok(rpal_stats(&st));
	t_check(st.nr_conns == 0 && st.nr_peers_mapped == 0, "conns %u peers %u left", st.nr_conns, st.nr_peers_mapped);
	printf("PASS\n");
	return T_EXIT_PASS;
}
