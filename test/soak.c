/* SPDX-License-Identifier: MIT */
/*
 * Description: the soak run behind `make soak` (not part of `make test`).
 * One server process and NR_CLIENTS client processes, one connection each;
 * on every connection both sides send (a sender and a receiver thread per
 * side), mixing inline, one-copy and zero-copy messages.  Every message
 * carries its stream, sequence number and a checksum of its payload; every
 * one is verified (none lost, none duplicated, none corrupted).  A monitor
 * process samples VmRSS of every process from /proc/<pid>/status after a
 * warm-up and every ~10 s, and fails if any grew by more than 16 MiB.
 *
 * Usage: soak [TOTAL_MESSAGES]   (default 100000000, across all connections
 * and both directions; also $SOAK_MESSAGES).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "helpers.h"

#define NR_CLIENTS   4
#define NR_STREAMS   (NR_CLIENTS * 2)      /* a stream: one connection, one direction */
#define RSS_SLACK_KB (16 * 1024)
#define SAMPLE_NS    (10ull * 1000000000ull)
#define FLUSH_EVERY  32                    /* RPAL_MORE on the others */

/* What the children share with the monitor (MAP_SHARED, set up before fork). */
struct shared {
	_Atomic uint64_t received[NR_STREAMS];   /* verified messages per stream */
	_Atomic int done;                        /* processes finished with I/O */
	_Atomic int failed;
};
static struct shared *sh;
static uint64_t per_stream;

/* Every message starts with this; the payload follows. */
struct hdr {
	uint64_t seq;
	uint32_t stream;
	uint32_t sum;
};

enum kind { K_INLINE, K_COPY, K_ZERO };

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Kind and length of message seq of a stream: deterministic, so the
 * receiver knows what to expect.  1/32 zero-copy, 3/32 one-copy, the rest
 * inline. */
static enum kind msg_kind(unsigned stream, uint64_t seq, size_t *len)
{
	uint64_t r = mix(seq * NR_STREAMS + stream + 1);
	unsigned k = (unsigned)(r & 31);

	if (k == 0) {
		*len = 64 + (size_t)((r >> 8) % 4033);            /* 64..4096 */
		return K_ZERO;
	}
	if (k <= 3) {
		*len = RPAL_INLINE_MAX + 1 + (size_t)((r >> 8) % 984);   /* 41..1024 */
		return K_COPY;
	}
	*len = sizeof(struct hdr) + (size_t)((r >> 8) % (RPAL_INLINE_MAX - sizeof(struct hdr) + 1));
	return K_INLINE;
}

static uint32_t checksum(const unsigned char *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return (uint32_t)(h ^ (h >> 32));
}

static void fill(unsigned char *p, size_t len, unsigned stream, uint64_t seq)
{
	struct hdr h = { .seq = seq, .stream = stream, .sum = 0 };
	uint64_t w = mix(seq ^ ((uint64_t)stream << 56));
	size_t i = sizeof(h);

	for (; i + 8 <= len; i += 8, w += 0x9e3779b97f4a7c15ull)
		memcpy(p + i, &w, 8);
	for (; i < len; i++)
		p[i] = (unsigned char)(seq + i);
	h.sum = checksum(p + sizeof(h), len - sizeof(h));
	memcpy(p, &h, sizeof(h));
}

struct stream_arg {
	int fd;
	unsigned tx_stream, rx_stream;
	const char *who;
};

static void fail_now(void)
{
	atomic_store(&sh->failed, 1);
	exit(T_EXIT_FAIL);
}

#define s_check(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); fail_now(); } } while (0)

static void *sender(void *p)
{
	struct stream_arg *a = p;
	unsigned char b[1024];

	for (uint64_t seq = 0; seq < per_stream; seq++) {
		size_t len;
		enum kind k = msg_kind(a->tx_stream, seq, &len);
		int more = (seq % FLUSH_EVERY != FLUSH_EVERY - 1 && seq + 1 != per_stream) ? RPAL_MORE : 0;

		if (k == K_ZERO) {
			unsigned char *z;
			while (!(z = rpal_buf_alloc(len))) {   /* the peer holds many */
				rpal_flush(a->fd);
				usleep(50);
			}
			fill(z, len, a->tx_stream, seq);
			int r = rpal_send_buf(a->fd, z, len, more);
			s_check(r == 0, "%s: send_buf %" PRIu64 ": %s", a->who, seq, rpal_strerror(r));
		} else {
			fill(b, len, a->tx_stream, seq);
			ssize_t r = rpal_send(a->fd, b, len, more);
			if (r == -ENOMEM) {         /* arena momentarily full of zero-copy buffers */
				rpal_flush(a->fd);
				usleep(50);
				seq--;
				continue;
			}
			s_check(r == (ssize_t)len, "%s: send %" PRIu64 ": %s", a->who, seq, rpal_strerror((int)r));
		}
	}
	return NULL;
}

static void *receiver(void *p)
{
	struct stream_arg *a = p;
	struct rpal_msg m[32];
	uint64_t seq = 0, reported = 0;

	while (seq < per_stream) {
		int n = rpal_recv_msg(a->fd, m, 32, 0);
		s_check(n > 0, "%s: recv after %" PRIu64 " messages: %s", a->who, seq,
			n == 0 ? "end of stream" : rpal_strerror(n));
		for (int i = 0; i < n; i++, seq++) {
			size_t len;
			enum kind k = msg_kind(a->rx_stream, seq, &len);
			struct hdr h;

			s_check(m[i].len == len, "%s: stream %u message %" PRIu64 ": %u bytes, want %zu",
				a->who, a->rx_stream, seq, m[i].len, len);
			s_check((k == K_INLINE) == !(m[i].flags & RPAL_MSG_BUF),
				"%s: stream %u message %" PRIu64 ": wrong transport", a->who, a->rx_stream, seq);
			memcpy(&h, m[i].data, sizeof(h));
			s_check(h.stream == a->rx_stream && h.seq == seq,
				"%s: stream %u expected message %" PRIu64 ", got stream %u message %" PRIu64 " (lost or reordered)",
				a->who, a->rx_stream, seq, h.stream, h.seq);
			s_check(checksum((const unsigned char *)m[i].data + sizeof(h), len - sizeof(h)) == h.sum,
				"%s: stream %u message %" PRIu64 " corrupted (checksum)", a->who, a->rx_stream, seq);
		}
		int r = rpal_msg_release(a->fd, m, (unsigned)n);
		s_check(r == 0, "%s: release: %s", a->who, rpal_strerror(r));
		if (seq - reported >= 4096 || seq == per_stream) {
			atomic_store_explicit(&sh->received[a->rx_stream], seq, memory_order_relaxed);
			reported = seq;
		}
	}
	return NULL;
}

/* Run the two threads of one connection side; returns when both are done. */
static void run_pair(struct stream_arg *a, pthread_t th[2])
{
	s_check(pthread_create(&th[0], NULL, sender, a) == 0, "pthread_create");
	s_check(pthread_create(&th[1], NULL, receiver, a) == 0, "pthread_create");
}

/* Stay alive (for the final RSS sample) until the monitor closes the pipe. */
static void await_release(int go)
{
	char c;

	atomic_fetch_add(&sh->done, 1);
	while (read(go, &c, 1) < 0 && errno == EINTR)
		;
}

static int server(int ready, int go)
{
	struct stream_arg a[NR_CLIENTS];
	pthread_t th[NR_CLIENTS][2];
	char who[NR_CLIENTS][32];
	int lfd = rpal_listen("soak", NULL);

	s_check(lfd >= 0, "listen: %s", rpal_strerror(lfd));
	(void)!write(ready, "r", 1);
	for (int i = 0; i < NR_CLIENTS; i++) {
		uint32_t idx;
		int fd = rpal_accept(lfd, 0);
		s_check(fd >= 0, "accept: %s", rpal_strerror(fd));
		ssize_t r = rpal_recv(fd, &idx, sizeof(idx), 0);   /* the client says who it is */
		s_check(r == sizeof(idx) && idx < NR_CLIENTS, "client hello");
		snprintf(who[idx], sizeof(who[idx]), "server/conn %u", idx);
		a[idx] = (struct stream_arg){ .fd = fd, .tx_stream = idx * 2 + 1, .rx_stream = idx * 2, .who = who[idx] };
		run_pair(&a[idx], th[idx]);
	}
	for (int i = 0; i < NR_CLIENTS; i++)
		for (int k = 0; k < 2; k++)
			pthread_join(th[i][k], NULL);
	await_release(go);
	for (int i = 0; i < NR_CLIENTS; i++)
		rpal_close(a[i].fd);
	rpal_close(lfd);
	return 0;
}

static int client(unsigned idx, int go)
{
	struct stream_arg a;
	pthread_t th[2];
	char who[32];
	uint32_t id = idx;
	int fd = rpal_connect("soak", NULL, 0);

	s_check(fd >= 0, "client %u connect: %s", idx, rpal_strerror(fd));
	s_check(rpal_send(fd, &id, sizeof(id), 0) == sizeof(id), "client hello");
	snprintf(who, sizeof(who), "client %u", idx);
	a = (struct stream_arg){ .fd = fd, .tx_stream = idx * 2, .rx_stream = idx * 2 + 1, .who = who };
	run_pair(&a, th);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	await_release(go);
	rpal_close(fd);
	return 0;
}

static uint64_t total_received(void)
{
	uint64_t t = 0;

	for (int i = 0; i < NR_STREAMS; i++)
		t += atomic_load_explicit(&sh->received[i], memory_order_relaxed);
	return t;
}

int main(int argc, char **argv)
{
	enum { NPROC = NR_CLIENTS + 1 };
	pid_t pids[NPROC];
	long warm[NPROC], last[NPROC], peak[NPROC];
	const char *names[NPROC] = { "server", "client 0", "client 1", "client 2", "client 3" };
	uint64_t total = 100000000ull, t0, t_warm = 0, next_sample, done_ns, prev_ns = 0, prev_got = 0;
	int ready[2], go[2], exited = 0, ok = 1;
	char c;

	if (argc > 1)
		total = strtoull(argv[1], NULL, 0);
	else if (getenv("SOAK_MESSAGES") && *getenv("SOAK_MESSAGES"))
		total = strtoull(getenv("SOAK_MESSAGES"), NULL, 0);
	per_stream = total / NR_STREAMS;
	t_check(per_stream > 0, "need at least %d messages", NR_STREAMS);
	total = per_stream * NR_STREAMS;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	t_check(sh != MAP_FAILED, "mmap");
	t_check(pipe(ready) == 0 && pipe(go) == 0, "pipe");

	printf("soak: %" PRIu64 " messages: %d connections, both directions, %" PRIu64 " per stream; "
	       "1/32 zero-copy, 3/32 one-copy, the rest inline; every one checked\n",
	       total, NR_CLIENTS, per_stream);
	pids[0] = fork();
	if (pids[0] == 0) {
		close(go[1]);
		exit(server(ready[1], go[0]));
	}
	t_check(read(ready[0], &c, 1) == 1, "server did not start");
	for (unsigned i = 0; i < NR_CLIENTS; i++) {
		pids[i + 1] = fork();
		if (pids[i + 1] == 0) {
			close(go[1]);
			exit(client(i, go[0]));
		}
	}
	close(go[0]);

	t0 = t_now_ns();
	next_sample = 0;
	for (;;) {
		uint64_t now = t_now_ns(), got = total_received();
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG);

		if (w > 0) {
			printf("FAIL: pid %d ended early (%s %d)\n", (int)w, WIFEXITED(st) ? "exit" : "signal",
			       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			exited++;
			ok = 0;
			break;
		}
		if (atomic_load(&sh->failed)) {
			ok = 0;
			break;
		}
		/* Warm-up: 2% of the messages or 5 s, whichever comes first. */
		if (!t_warm && (got >= total / 50 || now - t0 >= 5000000000ull)) {
			t_warm = now;
			for (int i = 0; i < NPROC; i++)
				warm[i] = last[i] = peak[i] = t_proc_status(pids[i], "VmRSS");
			printf("warm at %.1f s, %" PRIu64 " messages: VmRSS", (double)(now - t0) / 1e9, got);
			for (int i = 0; i < NPROC; i++)
				printf(" %s %ld kB%s", names[i], warm[i], i + 1 < NPROC ? "," : "\n");
			next_sample = now + SAMPLE_NS;
			prev_ns = now;
			prev_got = got;
		}
		if (t_warm && now >= next_sample) {
			next_sample += SAMPLE_NS;
			for (int i = 0; i < NPROC; i++) {
				last[i] = t_proc_status(pids[i], "VmRSS");
				if (last[i] > peak[i])
					peak[i] = last[i];
			}
			printf("%6.1f s: %" PRIu64 " / %" PRIu64 " messages (%.0f%%), %.2f M msgs/s (last %.1f s: %.2f M/s); VmRSS kB:",
			       (double)(now - t0) / 1e9, got, total, 100.0 * (double)got / (double)total,
			       (double)got / ((double)(now - t0) / 1e9) / 1e6, (double)(now - prev_ns) / 1e9,
			       (double)(got - prev_got) / ((double)(now - prev_ns) / 1e9) / 1e6);
			prev_ns = now;
			prev_got = got;
			for (int i = 0; i < NPROC; i++)
				printf(" %ld", last[i]);
			printf("\n");
		}
		if (atomic_load(&sh->done) == NPROC && got == total)
			break;
		usleep(20000);
	}
	done_ns = t_now_ns();

	if (ok) {
		uint64_t got = total_received();
		double secs = (double)(done_ns - t0) / 1e9;

		if (!t_warm) {   /* a run shorter than the warm-up: compare with the end */
			for (int i = 0; i < NPROC; i++)
				warm[i] = peak[i] = t_proc_status(pids[i], "VmRSS");
		}
		for (int i = 0; i < NPROC; i++) {
			last[i] = t_proc_status(pids[i], "VmRSS");
			if (last[i] > peak[i])
				peak[i] = last[i];
		}
		printf("summary: %" PRIu64 " messages verified (0 lost, 0 corrupted) in %.1f s: %.2f M msgs/s\n",
		       got, secs, (double)got / secs / 1e6);
		for (int i = 0; i < NPROC; i++) {
			printf("  %-8s (pid %d): VmRSS warm %ld kB, end %ld kB, peak %ld kB (%+ld kB)\n", names[i],
			       (int)pids[i], warm[i], last[i], peak[i], last[i] - warm[i]);
			if (last[i] > warm[i] + RSS_SLACK_KB || peak[i] > warm[i] + RSS_SLACK_KB) {
				printf("FAIL: %s VmRSS grew by more than %d kB\n", names[i], RSS_SLACK_KB);
				ok = 0;
			}
		}
	}
	if (!ok)        /* do not wait for the survivors of a failure */
		for (int i = 0; i < NPROC; i++)
			kill(pids[i], SIGKILL);
	close(go[1]);   /* the children may exit now */
	for (int i = exited; i < NPROC; i++) {
		int st;
		pid_t w = wait(&st);
		if (w < 0)
			break;
		if (ok && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
			printf("FAIL: pid %d: %s %d\n", (int)w, WIFEXITED(st) ? "exit" : "signal",
			       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			ok = 0;
		}
	}
	if (!ok) {
		printf("FAIL\n");
		return T_EXIT_FAIL;
	}
	printf("PASS\n");
	return T_EXIT_PASS;
}
