/* SPDX-License-Identifier: MIT */
/*
 * Description: a connected peer that writes garbage into its own ring
 * (pointers outside its arena, lying lengths, bad flags, out-of-order
 * and wrapped sequence numbers, a reused block, forged acks, a buffer
 * over pages it never wrote, which we would pay for) gets that one
 * connection closed with EPROTO and a clear reason (our block says so
 * to the peer); the victim keeps serving another connection.  A peer
 * that never acknowledges exhausts its quota (EAGAIN) or our arena
 * (ENOMEM), never crashes us, and everything comes back when it goes.
 * A peer that scribbles on the shared wake page (its words and ring
 * times) causes spurious wake-ups and spins of at most spin_us, nothing
 * else; one that holds our word still cannot keep a set of its
 * connection alone asleep through another thread's rpal_epoll_ctl() or
 * that connection's removal.  A peer that makes the doorbell it gave us
 * blocking, fills it and ties it up in waiting splices cannot make a
 * send that rings it block; one that floods ours, passes descriptors
 * through it and ties it up cannot make our waits hang or leak; one that
 * shuts it down cannot make a blocking receive spin.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include "rawpeer.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83   /* Linux 6.16; glibc defines it later */
#endif
#include "epoll.h"

enum fault {
	F_BUF_OUTSIDE, F_BUF_TOO_LONG, F_BUF_EMPTY, F_INLINE_TOO_LONG, F_FLAGS_NONE, F_FLAGS_BOTH,
	F_SEQ_AHEAD, F_SEQ_WRAPPED, F_NONCE_CHANGED, F_FORGED_ACK, F_INLINE_EMPTY, F_BUF_UNWRITTEN, F_NR
};
static const char *fault_name[F_NR] = {
	"BUF pointer outside its arena", "BUF length past the arena end", "BUF of length 0",
	"INLINE length 41", "no payload flag", "both payload flags", "sequence ahead",
	"sequence from a later lap", "block nonce changed", "ack of a buffer it never got",
	"INLINE length 0 (fake end of stream)", "BUF over pages it never wrote",
};

static void hostile_child(enum fault f)
{
	int fd = t_ok(rpal_connect("victim", NULL, 0));
	struct rpal_conn *c = conn_of(fd);
	uintptr_t base = (uintptr_t)rpal_g.arena;
	uint32_t next = (uint32_t)c->tail + 1;
	char b[8];

	/* One good message first: the victim must get it before the bad one. */
	t_ok(rpal_send(fd, "good", 4, 0));
	next++;
	switch (f) {
	case F_BUF_OUTSIDE: raw_publish(c, next, 64, RPAL_SLOT_BUF, 0x1000); break;
	case F_BUF_TOO_LONG: raw_publish(c, next, 1 << 21, RPAL_SLOT_BUF, base + rpal_g.cfg.arena_size - 4096); break;
	case F_BUF_EMPTY: raw_publish(c, next, 0, RPAL_SLOT_BUF, base + 8192); break;
	case F_BUF_UNWRITTEN: {
		/* 1 MiB in the middle of a fresh arena: nothing there yet.
		 * Read, it would be allocated and charged to the victim. */
		off_t off = (off_t)rpal_g.cfg.arena_size / 2, data = lseek(rpal_g.memfd, off, SEEK_DATA);

		t_check(data < 0 || data >= off + (1 << 20), "the hostile peer's arena has data at %lld", (long long)data);
		raw_publish(c, next, 1 << 20, RPAL_SLOT_BUF, base + (uintptr_t)off);
		break;
	}
	case F_INLINE_TOO_LONG: raw_publish(c, next, 41, RPAL_SLOT_INLINE, 0); break;
	case F_INLINE_EMPTY: raw_publish(c, next, 0, RPAL_SLOT_INLINE, 0); break;
	case F_FLAGS_NONE: raw_publish(c, next, 4, 0, 0); break;
	case F_FLAGS_BOTH: raw_publish(c, next, 4, RPAL_SLOT_INLINE | RPAL_SLOT_BUF, base + 8192); break;
	case F_SEQ_AHEAD: raw_publish(c, next + 5, 4, RPAL_SLOT_INLINE, 0); break;
	case F_SEQ_WRAPPED: raw_publish(c, next + c->ring_mask + 1, 4, RPAL_SLOT_INLINE, 0); break;
	case F_NONCE_CHANGED:
		/* After the victim took the good message: it then must not
		 * trust anything of this block. */
		while (load_acquire(&c->pb->rx_head) < 1)
			usleep(100);
		c->me->nonce ^= 4;
		raw_publish(c, next, 4, RPAL_SLOT_INLINE, 0);
		break;
	case F_FORGED_ACK: {
		struct rpal_ack *a = &c->acks[c->ack_tail & c->ack_mask];
		a->addr = c->peer->base + 65536;
		store_release(&a->seq, (uint32_t)c->ack_tail + 1);
		c->ack_tail++;
		store_release(&c->me->ack_tail, c->ack_tail);
		break;
	}
	default: break;
	}
	/* Wait for the victim to drop us, giving back what it sends. */
	struct rpal_msg m;
	(void)b;
	while (rpal_recv_msg(fd, &m, 1, 0) > 0)
		rpal_msg_release(fd, &m, 1);
	exit(0);
}

/* In a forked child, which inherits no rpal object: connect afresh. */
static int child_connect(void)
{
	rpal_fini();
	t_ok(rpal_init(NULL));
	return (int)t_ok(rpal_connect("victim", NULL, 0));
}

static void *send_one(void *p)
{
	t_ok(rpal_send(*(int *)p, "ring", 4, 0));
	return NULL;
}

/* One byte with a descriptor attached; 0 or -errno. */
static int send_fd(int sock, int fd)
{
	char cb[CMSG_SPACE(sizeof(int))] = { 0 }, b = 0;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof(cb) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/*
 * What a holder of a doorbell file can start on it and leave waiting: a
 * splice out of it (nothing ever comes: no one sends the other way), one
 * into it from an empty pipe, and one into it from an idle socket (only a
 * pipe takes that: it then holds the pipe's lock while it waits, which
 * would hang every ring of a pipe doorbell: docs/PROTOCOL.md section 6),
 * each on a thread of its own that waits until the process dies.
 */
struct splice_arg {
	int in, out;
};

static void *splice_for_ever(void *p)
{
	struct splice_arg *a = p;

	splice(a->in, NULL, a->out, NULL, 1, 0);
	pause();
	return NULL;
}

static void tie_up(int bell)
{
	static struct splice_arg args[3];
	int in[2], out[2], idle[2];
	pthread_t th;

	t_check(pipe(in) == 0 && pipe(out) == 0, "pipe");
	t_check(socketpair(AF_UNIX, SOCK_STREAM, 0, idle) == 0, "socketpair");
	t_check(fcntl(bell, F_SETFL, 0) == 0, "clear O_NONBLOCK");     /* or splice won't wait */
	args[0] = (struct splice_arg){ bell, out[1] };
	args[1] = (struct splice_arg){ in[0], bell };
	args[2] = (struct splice_arg){ idle[0], bell };
	for (int i = 0; i < 3; i++)
		t_check(pthread_create(&th, NULL, splice_for_ever, &args[i]) == 0, "pthread_create");
	usleep(50000);          /* the splices are waiting */
}

/* A blocking receive that ends when the peer goes. */
static void *recv_one(void *p)
{
	char b[16];
	long n = rpal_recv(*(int *)p, b, sizeof(b), 0);

	t_check(n <= 0, "received %ld bytes from a peer that sends nothing", n);
	return NULL;
}

struct set_wait {
	int ep, n, fd;
	uint64_t ns;
};

/* One rpal_epoll_wait() of up to 5 s: what it returned, and when. */
static void *wait_in_set(void *p)
{
	struct set_wait *w = p;
	struct epoll_event ev;
	uint64_t t0 = t_now_ns();

	w->n = rpal_epoll_wait(w->ep, &ev, 1, 5000);
	w->fd = w->n == 1 ? ev.data.fd : -1;
	w->ns = t_now_ns() - t0;
	return NULL;
}

/* Whether a thread sleeps in set ep on its connection's word alone. */
static bool lone_asleep(int ep)
{
	return atomic_load(&ep_get(ep)->lone_gen) & 1;
}

static void check_other(int good)
{
	char b[16];

	t_ok(rpal_send(good, "ping", 4, 0));
	t_check(rpal_recv(good, b, sizeof(b), 0) == 4 && !memcmp(b, "pong", 4), "the good connection stopped working");
}

/*
 * A peer sends a TCP socket set to linger (with unsent data) into the end
 * of its doorbell that we hold, which we never read, or on its connection
 * socket: where that is refused, and in any case our close of the
 * connection must not wait out the linger.
 */
static void lingering_send(int lfd, int good, bool into_doorbell)
{
	int sync[2], probe = socket(AF_UNIX, SOCK_SEQPACKET, 0), no = 0, fd, listener = -1;
	/* Where the kernel has SO_PASSRIGHTS (6.16 on), the connection socket must refuse. */
	bool refusable = setsockopt(probe, SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no)) == 0;
	/* Made here, so that its listener outlives the peer: a listener's
	 * close would reset the connection, and then nothing waits. */
	int tcp = lingering_socket(&listener);
	char err;

	close(probe);
	t_check(pipe(sync) == 0, "pipe");
	pid_t pid = fork();
	if (pid == 0) {
		int c = child_connect();
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		err = (char)-send_fd(into_doorbell ? conn_of(c)->doorbell : c, tcp >= 0 ? tcp : sync[0]);
		t_check(write(sync[1], &err, 1) == 1, "sync");
		pause();        /* not close(tcp): it would wait out the linger */
		exit(0);
	}
	fd = t_ok(rpal_accept(lfd, 0));
	t_check(read(sync[0], &err, 1) == 1, "the peer's send");
	if (into_doorbell)
		t_check(err == EPIPE, "the peer could send a descriptor into the doorbell end we hold (%s)", strerror(err));
	else
		t_check(err || !refusable, "the connection socket took a descriptor after the handshake");
	/* With the peer gone, what it sent is ours alone, and the close is
	 * at once, not when the peer closes. */
	if (tcp >= 0)
		close(tcp);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	uint64_t t0 = t_now_ns();
	rpal_close(fd);
	printf("  its send: %s; rpal_close took %.1f ms\n", err ? strerror(err) : "let through (before 6.16)",
	       (t_now_ns() - t0) / 1e6);
	t_check(t_now_ns() - t0 < 2000000000ull, "rpal_close took over 2 s");
	if (listener >= 0)
		close(listener);
	close(sync[0]);
	close(sync[1]);
	check_other(good);
}

int main(void)
{
	int lfd, good, f, fds0;
	struct rpal_stats st0, st;
	pid_t gpid;

	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("victim", NULL));

	/* A well-behaved peer that answers ping with pong. */
	gpid = fork();
	if (gpid == 0) {
		int fd = child_connect();
		char b[16];
		long n;
		while ((n = rpal_recv(fd, b, sizeof(b), 0)) > 0)
			t_ok(rpal_send(fd, "pong", 4, 0));
		exit(0);
	}
	good = t_ok(rpal_accept(lfd, 0));
	check_other(good);
	t_ok(rpal_stats(&st0));
	fds0 = t_count_fds();

	for (f = 0; f < F_NR; f++) {
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			hostile_child((enum fault)f);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		char b[64];
		long n;
		if (f == F_FORGED_ACK) {
			/* The forged ack is found when we next need quota. */
			static char big[4096];
			t_check(rpal_recv(fd, b, sizeof(b), 0) == 4, "first message");
			uint64_t t0 = t_now_ns();
			n = rpal_send(fd, big, sizeof(big), 0);
			while (n >= 0 && t_now_ns() - t0 < 2000000000ull) {
				usleep(100);
				n = rpal_send(fd, big, sizeof(big), 0);
			}
		} else {
			n = rpal_recv(fd, b, sizeof(b), 0);
			t_check(n == 4 && !memcmp(b, "good", 4), "%s: the message before the fault was lost", fault_name[f]);
			n = rpal_recv(fd, b, sizeof(b), 0);
		}
		t_check(n == -EPROTO, "%s: got %ld (%s), want EPROTO", fault_name[f], n, rpal_strerror((int)n));
		printf("  %-34s -> %s\n", fault_name[f], rpal_strerror((int)n));
		t_check(rpal_recv(fd, b, sizeof(b), RPAL_NONBLOCK) == -EPROTO, "%s: error not sticky", fault_name[f]);
		/* Before our close: the peer can see that we neither read nor write. */
		uint32_t st_bits = load_acquire(&conn_of(fd)->me->state);
		t_check((st_bits & (RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED)) == (RPAL_STATE_SHUT_WR | RPAL_STATE_CLOSED),
			"%s: our block's state is %#x, not SHUT_WR|CLOSED", fault_name[f], st_bits);
		check_other(good);
		rpal_close(fd);
		t_wait_ok(pid, fault_name[f]);
		t_ok(rpal_stats(&st));
		t_check(st.arena_used == st0.arena_used && st.nr_conns == 1 && st.nr_peers_mapped == 1,
			"%s: left arena %zu (was %zu), conns %u, peers %u", fault_name[f], st.arena_used,
			st0.arena_used, st.nr_conns, st.nr_peers_mapped);
		t_check(t_count_fds() == fds0, "%s: descriptors leaked", fault_name[f]);
	}

	printf("a peer that never acknowledges: quota, then arena, then everything back\n");
	{
		int p[2];
		t_check(pipe(p) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			static struct rpal_msg m[512];
			int n = 0, fd;
			char c;
			fd = child_connect();
			/* Take messages but never release them. */
			while (read(p[0], &c, 1) == 0 || c != 'q')
				;
			(void)n;
			(void)m;
			(void)fd;
			pause();
			exit(0);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		static char big[1 << 20];
		long r;
		int sent = 0;
		/* Small buffers: the per-connection quota stops us. */
		while ((r = rpal_send(fd, big, 100, RPAL_NONBLOCK)) > 0)
			sent++;
		t_check(r == -EAGAIN, "quota: got %ld (%s)", r, rpal_strerror((int)r));
		printf("  quota reached after %d buffers: %s\n", sent, rpal_strerror((int)r));
		rpal_close(fd);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		t_ok(rpal_stats(&st));
		t_check(st.arena_used == st0.arena_used, "quota case: arena %zu, was %zu", st.arena_used, st0.arena_used);

		/* 1 MiB buffers to a peer that holds them: the arena runs out first. */
		t_check(pipe(p) == 0, "pipe");
		pid = fork();
		if (pid == 0) {
			static struct rpal_msg m[512];
			int fd2, n = 0;
			fd2 = child_connect();
			for (;;) {
				int k = rpal_recv_msg(fd2, m + n, 1, 0);
				if (k <= 0)
					exit(0);
				n = (n + 1) % 512;   /* holds all, releases none */
			}
		}
		fd = t_ok(rpal_accept(lfd, 0));
		sent = 0;
		while ((r = rpal_send(fd, big, sizeof(big), RPAL_NONBLOCK)) > 0)
			sent++;
		t_check(r == -ENOMEM || r == -EAGAIN, "arena: got %ld (%s)", r, rpal_strerror((int)r));
		printf("  stopped after %d x 1 MiB: %s\n", sent, rpal_strerror((int)r));
		check_other(good);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		/* Its death gives every buffer back. */
		struct rpal_conn_info ci;
		t_check(t_eventually((rpal_conn_info(fd, &ci), !ci.peer_alive), 1000), "death not seen within 1 s");
		t_ok(rpal_stats(&st));
		t_check(ci.bufs_outstanding == 0, "%u buffers outstanding after death", ci.bufs_outstanding);
		rpal_close(fd);
		t_ok(rpal_stats(&st));
		t_check(st.arena_used == st0.arena_used, "arena %zu, was %zu after the hoarder died", st.arena_used,
			st0.arena_used);
		close(p[0]);
		close(p[1]);
	}
	printf("a peer that scribbles on the wake page: spurious wake-ups only\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			int fd = child_connect();
			struct rpal_conn *c = conn_of(fd);
			t_check(c && c->wake_page, "no wake page was negotiated");
			/* Both words and their ring times, for 300 ms, while the
			 * victim sleeps in rpal_recv. */
			for (uint64_t t0 = t_now_ns(), i = 0; t_now_ns() - t0 < 300000000ull; i++) {
				atomic_store(c->wake_mine, (uint32_t)(i * 7919));
				atomic_store(c->wake_peer, (uint32_t)(i * 104729));
				atomic_store(wake_rung(c->wake_mine), i * 0x9e3779b97f4a7c15ull);
				atomic_store(wake_rung(c->wake_peer), t_now_ns() - (i & 1023) * 1000);
				syscall(SYS_futex, c->wake_peer, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
			}
			t_ok(rpal_send(fd, "after", 5, 0));
			char b[8];
			t_check(rpal_recv(fd, b, sizeof(b), 0) == 2, "the victim's answer");
			exit(0);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		char b[16];
		uint64_t t0 = t_now_ns();
		long n = rpal_recv(fd, b, sizeof(b), 0);
		t_check(n == 5 && !memcmp(b, "after", 5), "got %ld bytes (%s)", n, n < 0 ? rpal_strerror((int)n) : "");
		t_check(t_now_ns() - t0 >= 250000000ull, "rpal_recv returned before the message was sent");
		/* Ring times it made up: at most a spin of spin_us a wait. */
		struct rpal_spin *spin = &conn_of(fd)->rx_spin;
		t_check(spin->wake_lat_ns <= 1000000, "learnt a wake-up of %u ns", spin->wake_lat_ns);
		t_check(spin_budget(spin, ring_head(conn_of(fd))) <= spin->max_ns, "a budget of %u ns over spin_us",
			spin->this_ns);
		t_ok(rpal_send(fd, "ok", 2, 0));
		check_other(good);
		t_wait_ok(pid, "scribbler");
		rpal_close(fd);
	}
	printf("a peer that holds our wake word still while we sleep in a set of its connection alone: "
	       "rpal_epoll_ctl() from another thread wakes us, and so does removing the connection, whose page then goes\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			int fd = child_connect();
			struct rpal_conn *c = conn_of(fd);
			t_check(c && c->wake_page, "no wake page was negotiated");
			/* Write every bump of the victim's word back, for 1 s. */
			uint32_t v = atomic_load(c->wake_peer);
			for (uint64_t t0 = t_now_ns(); t_now_ns() - t0 < 1000000000ull;)
				atomic_store(c->wake_peer, v);
			exit(0);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		int ep = t_ok(rpal_epoll_create(0)), efd = eventfd(1, 0);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		struct set_wait w = { .ep = ep };
		pthread_t th;

		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
		t_check(pthread_create(&th, NULL, wait_in_set, &w) == 0, "pthread_create");
		t_check(t_eventually(lone_asleep(ep), 1000), "the waiter never slept on the word alone");
		ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = efd };
		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev));
		pthread_join(th, NULL);
		t_check(w.n == 1 && w.fd == efd, "rpal_epoll_wait returned %d (fd %d), expected the eventfd", w.n, w.fd);
		t_check(w.ns < 500000000ull, "the added descriptor took %llu ms to wake the waiter",
			(unsigned long long)(w.ns / 1000000));

		/* Alone in a second set; removed and closed while a thread sleeps there. */
		int ep2 = t_ok(rpal_epoll_create(0));
		t_ok(rpal_epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
		ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = fd };
		t_ok(rpal_epoll_ctl(ep2, EPOLL_CTL_ADD, fd, &ev));
		w = (struct set_wait){ .ep = ep2 };
		t_check(pthread_create(&th, NULL, wait_in_set, &w) == 0, "pthread_create");
		t_check(t_eventually(lone_asleep(ep2), 1000), "the waiter never slept on the word alone");
		t_ok(rpal_epoll_ctl(ep2, EPOLL_CTL_DEL, fd, NULL));
		t_check(!lone_asleep(ep2), "still asleep on the word of a connection no longer in the set");
		rpal_close(fd);
		ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = efd };
		t_ok(rpal_epoll_ctl(ep2, EPOLL_CTL_ADD, efd, &ev));
		pthread_join(th, NULL);
		t_check(w.n == 1 && w.fd == efd, "rpal_epoll_wait returned %d (fd %d), expected the eventfd", w.n, w.fd);
		t_wait_ok(pid, "word holder");
		rpal_close(ep2);
		rpal_close(ep);
		close(efd);
		check_other(good);
	}
	printf("a peer that ties its doorbell up in splices, or makes it blocking and fills it: ringing it never blocks\n");
	{
		int sync[2], cmd[2];
		t_check(pipe(sync) == 0 && pipe(cmd) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			int fd = child_connect();
			struct rpal_conn *c = conn_of(fd);
			char b;
			prctl(PR_SET_PDEATHSIG, SIGKILL);   /* gone with a failed test */
			/* Say we sleep on the doorbell when told, and never drain it. */
			while (read(cmd[0], &b, 1) == 1) {
				wait_begin(c, RPAL_WAIT_RX | RPAL_WAIT_RX_BELL);
				t_check(write(sync[1], "s", 1) == 1, "sync");
			}
			exit(0);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		struct rpal_conn *c = conn_of(fd);
		static char fill[4096];
		char b;
		for (int step = 0; step < 2; step++) {
			pid_t tier = -1;
			t_check(write(cmd[1], "s", 1) == 1 && read(sync[0], &b, 1) == 1, "the peer's sleep");
			/* The peer shares this file: what it can do, done from here. */
			if (step == 0) {
				/* A copy of our own: a child's inherited rpal
				 * descriptors are closed at fork. */
				int bell = dup(c->peer_doorbell);
				tier = fork();
				if (tier == 0) {        /* shares the file; killed below */
					prctl(PR_SET_PDEATHSIG, SIGKILL);
					tie_up(bell);
					t_check(write(sync[1], "t", 1) == 1, "sync");
					pause();
				}
				t_check(read(sync[0], &b, 1) == 1, "the splices");
				close(bell);
			} else {
				t_check(fcntl(c->peer_doorbell, F_SETFL, O_NONBLOCK) == 0, "set O_NONBLOCK");
				while (write(c->peer_doorbell, fill, sizeof(fill)) > 0)
					;
				t_check(errno == EAGAIN, "filling the doorbell: %s", strerror(errno));
				t_check(fcntl(c->peer_doorbell, F_SETFL, 0) == 0, "clear O_NONBLOCK");
			}
			uint64_t rung = load_relaxed(&c->st->tx.wakeups), t0 = t_now_ns();
			pthread_t th;
			t_check(pthread_create(&th, NULL, send_one, &fd) == 0, "pthread_create");
			bool done;
			while (!(done = pthread_tryjoin_np(th, NULL) == 0) && t_now_ns() - t0 < 2000000000ull)
				usleep(1000);
			if (tier > 0) {
				kill(tier, SIGKILL);    /* also frees a send stuck on a lock */
				waitpid(tier, NULL, 0);
			}
			t_check(done, "%s: rpal_send still blocked after 2 s", step ? "full and blocking" : "tied up");
			t_check(load_relaxed(&c->st->tx.wakeups) == rung + 1, "%s: the send did not ring the doorbell",
				step ? "full and blocking" : "tied up");
		}
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		rpal_close(fd);
		close(sync[0]);
		close(sync[1]);
		close(cmd[0]);
		close(cmd[1]);
		check_other(good);
	}
	printf("a peer that floods our doorbell, passes descriptors through it and ties it up: we drain a bounded amount and go on\n");
	{
		int sync[2], ep = rpal_epoll_create(0), pp[2], fds1;
		t_check(pipe(sync) == 0 && pipe(pp) == 0 && ep >= 0, "setup");
		pid_t pid = fork();
		if (pid == 0) {
			int fd = child_connect();
			struct rpal_conn *c = conn_of(fd);
			static char junk[4096];
			char ok;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			/* A descriptor with a ring: refused from Linux 6.16 on
			 * (SO_PASSRIGHTS), discarded by the drain before. */
			ok = send_fd(c->peer_doorbell, pp[0]) == 0 ? 'p' : 'r';
			tie_up(c->peer_doorbell);
			t_check(write(sync[1], &ok, 1) == 1, "sync");
			for (;;)        /* flood, for as long as we live */
				send(c->peer_doorbell, junk, sizeof(junk), MSG_NOSIGNAL);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		char how;
		t_check(read(sync[0], &how, 1) == 1, "the peer's flood");
		printf("  a descriptor sent with a ring was %s\n", how == 'p' ? "passed (before 6.16): the drain discards it" :
		       "refused (SO_PASSRIGHTS)");
		fds1 = t_count_fds();
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 1 };
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "add the connection");
		ev.data.u64 = 2;        /* an ordinary descriptor: a doorbell sleep */
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev) == 0, "add a pipe");
		for (int i = 0; i < 20; i++) {
			uint64_t t0 = t_now_ns();
			int n = rpal_epoll_wait(ep, &ev, 1, 20);
			t_check(n >= 0, "rpal_epoll_wait: %s", rpal_strerror(n));
			t_check(t_now_ns() - t0 < 2000000000ull, "a wait of 20 ms took %.1f s", (t_now_ns() - t0) / 1e9);
		}
		t_check(t_count_fds() == fds1, "descriptors: %d, were %d", t_count_fds(), fds1);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		rpal_close(fd);
		rpal_close(ep);
		close(pp[0]);
		close(pp[1]);
		close(sync[0]);
		close(sync[1]);
		check_other(good);
	}
	printf("a peer that sends a lingering socket into the doorbell end we hold: refused, and our close stays quick\n");
	lingering_send(lfd, good, true);
	printf("a peer that sends a lingering socket on the connection socket after the handshake: refused where the kernel can (6.16 on), and our close stays quick\n");
	lingering_send(lfd, good, false);
	printf("a peer without a wake page that shuts our doorbell down: a blocking receive sleeps, never spins\n");
	{
		int sync[2];
		t_check(pipe(sync) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			/* A raw peer (a HELLO with no features, as the Go
			 * package sends): under Linux < 5.16 our blocking
			 * calls then poll() the doorbell. */
			rpal_fini();
			t_ok(rpal_init(NULL));
			int s = raw_hello("victim", RAW_NONE, 0), fds[4], nfds;
			unsigned char buf[256];
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			struct pollfd pw = { .fd = s, .events = POLLIN };
			t_check(poll(&pw, 1, 5000) == 1, "no answer within 5 s");
			int n = hs_recvmsg(s, buf, sizeof(buf), fds, 4, &nfds), err;
			char why[200] = "";
			if (n > 0 && refuse_parse(buf, (size_t)n, &err, why, sizeof(why)) == 0)
				t_fail("refused: %s", why);
			t_check(n > 0 && nfds >= 2, "no welcome: %d, %d descriptors", n, nfds);
			t_check(shutdown(fds[1], SHUT_WR) == 0, "shutdown: %s", strerror(errno));
			t_check(write(sync[1], "s", 1) == 1, "sync");
			pause();
			exit(0);
		}
		int fd = t_ok(rpal_accept(lfd, 0));
		char b;
		close(sync[1]);         /* a failed child ends the read */
		t_check(read(sync[0], &b, 1) == 1, "the peer's shutdown");
		pthread_t th;
		clockid_t cpu;
		struct timespec used;
		t_check(pthread_create(&th, NULL, recv_one, &fd) == 0, "pthread_create");
		t_check(pthread_getcpuclockid(th, &cpu) == 0, "pthread_getcpuclockid");
		usleep(300000);
		t_check(clock_gettime(cpu, &used) == 0, "clock_gettime");
		printf("  the receiver used %.1f ms of CPU in 300 ms\n", used.tv_sec * 1e3 + used.tv_nsec / 1e6);
		kill(pid, SIGKILL);     /* its death ends the receive */
		waitpid(pid, NULL, 0);
		pthread_join(th, NULL);
		t_check(used.tv_sec == 0 && used.tv_nsec < 100000000, "the receiver spun instead of sleeping");
		rpal_close(fd);
		close(sync[0]);
		check_other(good);
	}
	rpal_close(good);
	t_wait_ok(gpid, "good peer");
	rpal_close(lfd);
	printf("PASS\n");
	return 0;
}
