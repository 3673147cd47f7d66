/* SPDX-License-Identifier: MIT */
/*
 * Description: one process connected to itself, four threads: a sender and
 * a receiver per direction, inline and buffer messages with checksums, the
 * receivers releasing buffers the senders' allocator takes back.  Run under
 * ThreadSanitizer, it checks the ring and allocator synchronisation.
 */

#include "helpers.h"

static long count;

struct dir {
	int tx, rx;
	const char *name;
};

static void *sender(void *p)
{
	struct dir *d = p;
	unsigned char b[600];

	for (long i = 0; i < count; i++) {
		size_t len = i % 4 == 0 ? sizeof(b) : 9 + (size_t)(i % 30);
		memset(b, (int)(i & 0xff), len);
		memcpy(b, &i, sizeof(i));
		if (i % 8 == 0) {
			unsigned char *z = rpal_buf_alloc(len);
			while (!z) {            /* the receiver still holds many */
				usleep(100);
				z = rpal_buf_alloc(len);
			}
			memcpy(z, b, len);
			t_ok(rpal_send_buf(d->tx, z, len, 0));
		} else {
			t_ok(rpal_send(d->tx, b, len, 0));
		}
	}
	return NULL;
}

static void *receiver(void *p)
{
	struct dir *d = p;
	struct rpal_msg m[8];
	long i = 0;

	while (i < count) {
		int n = (int)t_ok(rpal_recv_msg(d->rx, m, 8, 0));
		for (int k = 0; k < n; k++, i++) {
			size_t len = i % 4 == 0 ? 600 : 9 + (size_t)(i % 30);
			long v;
			t_check(m[k].len == len, "%s: message %ld has %u bytes, want %zu", d->name, i, m[k].len, len);
			memcpy(&v, m[k].data, sizeof(v));
			t_check(v == i, "%s: message %ld carries %ld", d->name, i, v);
			t_check(((const unsigned char *)m[k].data)[len - 1] == (unsigned char)(i & 0xff), "%s: %ld corrupt",
				d->name, i);
		}
		t_ok(rpal_msg_release(d->rx, m, (unsigned)n));
	}
	return NULL;
}

int main(void)
{
	struct rpal_stats st0, st;
	struct dir ab, ba;
	pthread_t th[4];
	int lfd, a, b;

	count = t_scaled(200000);
	t_ok(rpal_init(NULL));
	t_ok(rpal_stats(&st0));
	lfd = t_self_pair("self", &a, &b);

	ab = (struct dir){ .tx = a, .rx = b, .name = "a->b" };
	ba = (struct dir){ .tx = b, .rx = a, .name = "b->a" };
	printf("%ld messages each way, 4 threads, one process\n", count);
	pthread_create(&th[0], NULL, sender, &ab);
	pthread_create(&th[1], NULL, receiver, &ab);
	pthread_create(&th[2], NULL, sender, &ba);
	pthread_create(&th[3], NULL, receiver, &ba);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);

	struct rpal_conn_info ca, cb;
	t_check(t_eventually((rpal_conn_info(a, &ca), rpal_conn_info(b, &cb),
			      ca.bufs_outstanding == 0 && cb.bufs_outstanding == 0), 2000),
		"buffers outstanding: %u and %u", ca.bufs_outstanding, cb.bufs_outstanding);
	t_ok(rpal_close(a));
	t_ok(rpal_close(b));
	t_ok(rpal_close(lfd));
	t_check(t_eventually((rpal_stats(&st), st.arena_used == st0.arena_used), 2000),
		"arena %zu, was %zu after closing", st.arena_used, st0.arena_used);
	printf("PASS\n");
	return 0;
}
