/* SPDX-License-Identifier: MIT */
/*
 * Description: a connection's counters (rpal_conn_stats) are exact: N
 * messages of S bytes each way, sends that met a full ring, wake-ups made
 * and avoided, sleeps and the spin before them, zero-copy buffers out and
 * held, a protocol violation.  The statistics page is in the runtime
 * directory, locked while its owner lives: not by a forked child once the
 * owner is gone, and not after a crash.
 */
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "helpers.h"
#include "internal.h"

static struct rpal_conn_stats stats(int fd)
{
	struct rpal_conn_stats st;

	t_ok(rpal_conn_stats(fd, &st));
	return st;
}

static void *recv_one(void *fdp)
{
	char buf[64];

	return (void *)(intptr_t)rpal_recv(*(int *)fdp, buf, sizeof(buf), 0);
}

/* One rpal_epoll_wait() on the set *epp: the first event's data, or -errno. */
static void *epoll_one(void *epp)
{
	struct epoll_event ev;
	int n = rpal_epoll_wait(*(int *)epp, &ev, 1, -1);

	return (void *)(intptr_t)(n == 1 ? (intptr_t)ev.data.u64 : n < 0 ? -errno : 0);
}

/* Our page's path, from the runtime directory and our slot. */
static void page_path(char *out, size_t len)
{
	struct rpal_stats st;

	t_ok(rpal_stats(&st));
	snprintf(out, len, "%s/" RPAL_STAT_PREFIX "%u", st.runtime_dir, st.slot);
}

/* Does a live process hold the page's lock? */
static bool page_locked(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool held;

	t_check(fd >= 0, "open %s: %s", path, strerror(errno));
	held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

static int64_t realtime_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);   /* as librpal reads it: time() may lag a tick */
	return (int64_t)ts.tv_sec;
}

static void counts(void)
{
	enum { N = 100, S = 24, M = 10, L = 1000 };
	static char big[L], buf[L];
	struct rpal_conn_stats sa, sb;
	struct rpal_conn_info ci;
	struct rpal_msg m[3];
	int a, b, lfd, i, full;
	int64_t t0 = realtime_s(), t1;

	lfd = t_self_pair("stats", &a, &b);
	t1 = realtime_s();
	sa = stats(a);
	sb = stats(b);
	t_check(sa.id && sb.id && sa.id != sb.id, "ids %llu and %llu", (unsigned long long)sa.id,
		(unsigned long long)sb.id);
	t_check(sa.since >= t0 && sa.since <= t1, "since %lld not in [%lld, %lld]", (long long)sa.since,
		(long long)t0, (long long)t1);
	t_check(!sa.msgs_sent && !sb.msgs_received, "a new connection has counts");

	printf("conn_stats: %d messages of %d bytes and %d of %d\n", N, S, M, L);
	for (i = 0; i < N + M; i++) {
		t_ok(rpal_send(a, big, i < N ? S : L, RPAL_NONBLOCK));
		t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == (i < N ? S : L), "recv %d", i);
	}
	sa = stats(a);
	sb = stats(b);
	t_check(sa.msgs_sent == N + M && sb.msgs_received == N + M, "sent %llu, received %llu",
		(unsigned long long)sa.msgs_sent, (unsigned long long)sb.msgs_received);
	t_check(sa.bytes_sent == N * S + M * L && sb.bytes_received == N * S + M * L,
		"bytes sent %llu, received %llu", (unsigned long long)sa.bytes_sent,
		(unsigned long long)sb.bytes_received);
	t_check(!sa.msgs_received && !sb.msgs_sent && !sb.bytes_sent, "counts on the wrong side");
	/* Nobody slept: every send's check found the receiver awake. */
	t_check(sa.wakeups_sent == 0 && sa.wakeups_avoided == N + M, "wake-ups %llu, avoided %llu",
		(unsigned long long)sa.wakeups_sent, (unsigned long long)sa.wakeups_avoided);
	t_ok(rpal_conn_info(a, &ci));
	t_check(ci.tx_msgs == N + M, "rpal_conn_info says %llu sent", (unsigned long long)ci.tx_msgs);

	printf("conn_stats: a full ring, then 3 sends that meet it\n");
	while (rpal_send(a, big, S, RPAL_NONBLOCK) == S)
		;
	for (full = 0; full < 3; full++)
		t_check(rpal_send(a, big, S, RPAL_NONBLOCK) == -EAGAIN, "a send into a full ring");
	sa = stats(a);
	t_check(sa.ring_full == 4, "ring_full %llu, want 4 (the first failed send, then 3)",
		(unsigned long long)sa.ring_full);
	while (rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) > 0)
		;

	printf("conn_stats: 3 zero-copy buffers held, then released\n");
	for (i = 0; i < 3; i++)
		t_ok(rpal_send(a, big, L, 0));
	t_check(rpal_recv_msg(b, m, 3, RPAL_NONBLOCK) == 3, "rpal_recv_msg");
	t_check(stats(a).bufs_out == 3 && stats(b).bufs_held == 3, "out %llu, held %llu",
		(unsigned long long)stats(a).bufs_out, (unsigned long long)stats(b).bufs_held);
	t_ok(rpal_msg_release(b, m, 3));
	t_check(stats(a).bufs_out == 0 && stats(b).bufs_held == 0, "out %llu, held %llu after release",
		(unsigned long long)stats(a).bufs_out, (unsigned long long)stats(b).bufs_held);
	t_ok(rpal_send(a, big, L, 0));          /* a copy in a buffer, acked as it is read */
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == L, "recv of a buffer");
	t_check(stats(a).bufs_out == 0, "out %llu after the peer read and acked the copy",
		(unsigned long long)stats(a).bufs_out);

	printf("conn_stats: a receiver that spun, then slept, is woken once\n");
	{
		pthread_t th;
		void *r;
		uint64_t avoided = stats(a).wakeups_avoided;

		t_check(pthread_create(&th, NULL, recv_one, &b) == 0, "pthread_create");
		t_check(t_eventually(stats(b).rx_sleeps == 1, 5000), "the receiver never slept");
		t_ok(rpal_send(a, "x", 1, 0));
		pthread_join(th, &r);
		t_check((intptr_t)r == 1, "the receiver got %ld", (long)(intptr_t)r);
		sa = stats(a);
		sb = stats(b);
		t_check(sa.wakeups_sent == 1 && sa.wakeups_avoided == avoided, "wake-ups %llu, avoided %llu (was %llu)",
			(unsigned long long)sa.wakeups_sent, (unsigned long long)sa.wakeups_avoided,
			(unsigned long long)avoided);
		/* RPAL_WAIT_POLICY_SPIN: the whole 50 us before the sleep.  The
		 * count is in TSC cycles, turned into ns at a rate taken from
		 * two clock pairs since rpal_init(): a preemption between the
		 * reads of a pair skews it a little, hence 2 %. */
		t_check(sb.rx_spin_ns >= 49000 && sb.rx_spin_ns < 5000000000ull, "spun %llu ns",
			(unsigned long long)sb.rx_spin_ns);
	}

	printf("conn_stats: an epoll set that spun, then slept, counts its spin for its connection\n");
	{
		pthread_t th;
		void *r;
		int ep = t_ok(rpal_epoll_create(0));
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 };
		uint64_t spun = stats(b).rx_spin_ns;
		struct rpal_conn *cb = conn_of(b);

		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, b, &ev));
		t_check(pthread_create(&th, NULL, epoll_one, &ep) == 0, "pthread_create");
		/* A set counts its sleep once it wakes: wait for its advertisement. */
		t_check(t_eventually(load_relaxed(&cb->me->waiting) & RPAL_WAIT_RX, 5000), "the set never slept");
		t_ok(rpal_send(a, "x", 1, 0));
		pthread_join(th, &r);
		t_check((intptr_t)r == 7, "rpal_epoll_wait gave %ld", (long)(intptr_t)r);
		t_check(rpal_recv(b, buf, sizeof(buf), 0) == 1, "recv after the wait");
		sb = stats(b);
		/* The set's one connection gets the whole 50 us spin. */
		t_check(sb.rx_spin_ns - spun >= 49000 && sb.rx_spin_ns - spun < 5000000000ull,
			"the set's spin counted %llu ns", (unsigned long long)(sb.rx_spin_ns - spun));
		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL));
		rpal_close(ep);
	}

	printf("conn_stats: a slot with flags nobody defined is one violation\n");
	{
		struct rpal_conn *c = conn_of(a);
		struct rpal_slot *s = &c->ring[c->tail & c->ring_mask];

		s->len = 1;
		s->flags = 0x80;
		store_release(&s->seq, (uint32_t)(c->tail + 1));
		t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == -EPROTO, "the forged slot was accepted");
		t_check(stats(b).violations == 1, "violations %llu", (unsigned long long)stats(b).violations);
	}
	rpal_close(a);
	rpal_close(b);
	rpal_close(lfd);
}

/* A peer's death shows on the statistics page while we make no call on
 * the connection: an operator's rpal stat sees it at once. */
static void peer_gone(void)
{
	int lfd = t_ok(rpal_listen("gone", NULL)), fd;
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		rpal_fini();
		t_ok(rpal_init(NULL));
		t_ok(rpal_connect("gone", NULL, 0));
		pause();
		_exit(0);
	}
	fd = t_ok(rpal_accept(lfd, 0));
	struct rpal_conn *c = conn_of(fd);
	printf("conn_stats: a peer killed while we make no call shows as gone\n");
	t_check(!(load_relaxed(&c->st->status) & RPAL_STAT_PEER_GONE), "gone before it died");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t_check(t_eventually(load_relaxed(&c->st->status) & RPAL_STAT_PEER_GONE, 2000),
		"the page still says the peer is alive 2 s after its death");
	rpal_close(fd);
	rpal_close(lfd);
}

/* A process that ends without rpal_fini() leaves its page unlocked; a
 * forked child of a live owner does not keep the lock once it is gone. */
static void liveness(const char *mine)
{
	int p[2], hold[2];
	char path[160] = "", c;
	pid_t pid;

	/* The page's mapping holds the file, and so its lock, unless the
	 * child is denied it. */
	bool grandchild = !t_skip_emulated("a forked child of the owner", "MADV_DONTFORK is ignored");

	t_check(page_locked(mine), "our own page %s is not locked", mine);
	t_check(pipe(p) == 0 && pipe(hold) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		t_ok(rpal_init(NULL));
		page_path(path, sizeof(path));
		if (grandchild && fork() == 0) {        /* outlives its parent, with a copy of its descriptors */
			close(hold[1]);
			(void)!read(hold[0], &c, 1);
			_exit(0);
		}
		(void)!write(p[1], path, sizeof(path));
		_exit(0);               /* no rpal_fini(): as a crash would */
	}
	close(p[1]);
	close(hold[0]);
	t_check(read(p[0], path, sizeof(path)) == sizeof(path), "the child's page path");
	t_wait_ok(pid, "child");
	printf("conn_stats: %s, left by an exit without rpal_fini, is unlocked\n", path);
	t_check(access(path, F_OK) == 0, "%s is gone", path);
	/* The kernel may drop the dead child's last reference to the file a
	 * moment after its parent can reap it (a deferred fput). */
	t_check(t_eventually(!page_locked(path), 2000), "%s is still locked%s", path,
		grandchild ? ", by the child's child" : "");
	close(p[0]);
	close(hold[1]);         /* the grandchild ends */
}

int main(void)
{
	struct rpal_config cfg;
	char mine[160];

	rpal_config_default(&cfg);
	cfg.wait_policy = RPAL_WAIT_POLICY_SPIN;
	cfg.spin_us = 50;
	t_ok(rpal_init(&cfg));
	page_path(mine, sizeof(mine));
	t_check(access(mine, R_OK) == 0, "no statistics page %s: %s", mine, strerror(errno));
	counts();
	peer_gone();
	liveness(mine);
	rpal_fini();
	t_check(access(mine, F_OK) < 0 && errno == ENOENT, "%s outlives rpal_fini()", mine);
	printf("PASS: conn_stats\n");
	return 0;
}
