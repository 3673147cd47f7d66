/* SPDX-License-Identifier: MIT */
/*
 * rawpeer.h - a client that speaks the wire protocol by hand, so tests can
 * send what a broken or hostile peer would.  Uses librpal internals.
 */
#ifndef RPAL_TEST_RAWPEER_H
#define RPAL_TEST_RAWPEER_H

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "helpers.h"
#include "internal.h"

/* What to break in the hello. */
enum raw_fault {
	RAW_NONE, RAW_GARBAGE, RAW_SHORT, RAW_BAD_MAGIC, RAW_BAD_VERSION, RAW_NO_FDS, RAW_ONE_FD,
	RAW_UNSEALED, RAW_WRONG_SIZE, RAW_PIPE_BELL, RAW_NAMED_BELL, RAW_QUEUED_BELL, RAW_BAD_PID, RAW_BAD_REGION,
	RAW_BLOCK_OUTSIDE, RAW_OUR_SLOT, RAW_BAD_BLOCK_NONCE, RAW_THREE_FDS, RAW_TCP_BELL, RAW_LINGER_IN_BELL,
	RAW_LISTENER_THIRD, RAW_NESTED_THIRD, RAW_NESTED_IN_BELL, RAW_SECOND_MESSAGE, RAW_AFTER_EMPTY, RAW_SIZE_MIX, RAW_HUGETLB,
	RAW_NO_FUTURE_WRITE, RAW_SLOT_MOVED, RAW_LOCKED_PIPE, RAW_STALLED_BELL, RAW_NR
};

static const char *const raw_fault_name[RAW_NR] __attribute__((unused)) = {
	"none", "garbage bytes", "short hello", "bad magic", "bad version", "no descriptors",
	"one descriptor", "unsealed memfd", "wrong-size memfd", "doorbell a pipe (wire v2)",
	"doorbell connected to a named socket", "doorbell with bytes queued in it",
	"pid differs from SO_PEERCRED", "different region geometry", "block outside the arena",
	"claims the server's slot", "block nonce mismatch", "three descriptors",
	"doorbell a lingering TCP socket", "a lingering TCP socket queued in the doorbell",
	"a third descriptor listening, a socket in its backlog", "a third descriptor nesting 8 deep",
	"the doorbell nesting 8 deep", "garbage, then a message with a socket",
	"garbage, an empty message, one with a socket",
	"claims twice its arena, block past it",
	"a hugetlb memfd as its arena",
	"arena memfd without the future-write seal",
	"claims another slot, its block moved there",
	"a pipe whose mutex a splice holds, as its arena",
	"doorbell a read of the client's holds, stalled mid-copy",
};

/* A read of fd into memory that a userfaultfd of ours never fills: it
 * takes fd's read lock, finds what is queued and stalls in its copy with
 * the lock held, until this process ends.  False where userfaultfd is not
 * allowed (it needs CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd). */
static void *raw_stall_main(void *arg)
{
	(void)!recv(*(int *)arg, *((char **)arg + 1), 64, 0);
	return NULL;
}

static int raw_stall_uffd = -1;
static pthread_t raw_stall_thread;

/* At exit: the stalled copy fails, and the read ends (a leak checker that
 * stops every thread could not stop that one). */
static void raw_stall_end(void)
{
	close(raw_stall_uffd);
	pthread_join(raw_stall_thread, NULL);
}

static inline bool raw_stall_read(int fd)
{
	static struct { int fd; char *buf; } held;
	struct uffdio_api api = { .api = UFFD_API };
	int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0)
		return false;
	held.fd = fd;
	held.buf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct uffdio_register r = { .range = { (uintptr_t)held.buf, 4096 }, .mode = UFFDIO_REGISTER_MODE_MISSING };
	if (held.buf == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &r) < 0)
		return false;
	t_check(pthread_create(&raw_stall_thread, NULL, raw_stall_main, &held) == 0, "pthread_create");
	raw_stall_uffd = uffd;
	atexit(raw_stall_end);
	usleep(100000);         /* stalled by then */
	return true;
}

/* Splice from an idle socket into a pipe: the call waits for data holding
 * the pipe's mutex, which every close and fcntl() of the pipe needs. */
static void *raw_splice_main(void *arg)
{
	const int *fd = arg;    /* the socket, the pipe's write end */

	(void)!splice(fd[0], NULL, fd[1], NULL, 4096, 0);
	return NULL;
}

/* Publish one raw slot into the ring of our side of c, as a broken or
 * hostile producer would: no checks, whatever our state says. */
static inline void raw_publish(struct rpal_conn *c, uint32_t seq, uint32_t len, uint32_t flags, uint64_t addr)
{
	struct rpal_slot *s = &c->ring[c->tail & c->ring_mask];

	s->len = len;
	s->flags = flags;
	s->addr = addr;
	memset(s->data, 'x', sizeof(s->data));
	store_release(&s->seq, seq);
	c->tail++;
	notify_peer_rx(c);
}

static inline int raw_connect(const char *service)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%.80s/%.20s.sock", rpal_g.rundir, service) >=
	    sizeof(sa.sun_path))
		t_fail("socket path too long");
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		t_fail("raw connect to %s: %s", sa.sun_path, strerror(errno));
	return s;
}

/* A stream socket connected to a listener (*l) with an abstract name. */
static inline int named_socket_client(int *l_out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 +
			(socklen_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rpal-test-%d", (int)getpid());
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	t_check(l >= 0 && c >= 0, "socket");
	t_check(bind(l, (struct sockaddr *)&sa, len) == 0 && listen(l, 1) == 0, "bind: %s", strerror(errno));
	t_check(connect(c, (struct sockaddr *)&sa, len) == 0, "connect: %s", strerror(errno));
	*l_out = l;
	return c;
}

/*
 * A TCP socket whose release blocks: set to linger 30 s, with data the
 * other side (a listener that never accepts) does not take.  -1 where the
 * machine has no loopback TCP.  The listener stays open in this process;
 * its descriptor goes to *listener unless that is NULL.
 */
static int lingering_socket(int *listener)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct linger lg = { .l_onoff = 1, .l_linger = 30 };
	int l = socket(AF_INET, SOCK_STREAM, 0), s = socket(AF_INET, SOCK_STREAM, 0), small = 4096;
	static char junk[65536];

	if (l < 0 || s < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0 || connect(s, (struct sockaddr *)&sa, len) < 0) {
		close(l);
		close(s);
		return -1;
	}
	setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	fcntl(s, F_SETFL, O_NONBLOCK);
	while (send(s, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
		;
	if (listener)
		*listener = l;
	return s;               /* the listener stays open, unread */
}

/*
 * A Unix socket holding, queued in it, a Unix socket holding ... depth
 * levels deep, with a lingering TCP socket at the bottom; -1 where the
 * machine has no loopback TCP or the kernel refuses to nest them.  What
 * could not be sent is left open: its close would wait out the linger.
 */
static int nested_lingering(int depth)
{
	int inner = lingering_socket(NULL);

	for (int i = 0; inner >= 0 && i < depth; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return -1;
		if (hs_sendmsg(sv[0], "x", 1, &inner, 1) < 0)
			return -1;
		close(inner);   /* the queued copy keeps it */
		close(sv[0]);
		inner = sv[1];
	}
	return inner;
}

/* A listening Unix socket with a connection in its backlog, never
 * accepted, holding fd queued in it. */
static int listener_holding(int fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 +
			(socklen_t)snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rpal-backlog-%d", (int)getpid());
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	t_check(l >= 0 && c >= 0, "socket");
	t_check(bind(l, (struct sockaddr *)&sa, len) == 0 && listen(l, 4) == 0, "bind: %s", strerror(errno));
	t_check(connect(c, (struct sockaddr *)&sa, len) == 0, "connect: %s", strerror(errno));
	t_check(hs_sendmsg(c, "x", 1, &fd, 1) == 0, "queue a socket in the connection");
	close(fd);      /* the queued copy keeps it */
	close(c);
	return l;
}

/* Send n datagrams with one sendmmsg(2), so that the later ones already
 * wait when the receiver reads the first; fds[i] < 0: none with message
 * i, len[i] 0: an empty one.  False if the receiver was quicker: it read
 * and refused the first before the rest were queued. */
static bool send_all(int s, unsigned n, const void *const *msg, const size_t *len, const int *fds)
{
	struct mmsghdr mm[4];
	struct iovec iov[4];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u[4];

	memset(mm, 0, sizeof(mm));
	memset(u, 0, sizeof(u));
	for (unsigned k = 0; k < n; k++) {
		struct cmsghdr *cm = (struct cmsghdr *)u[k].buf;

		iov[k] = (struct iovec){ (void *)msg[k], len[k] };
		mm[k].msg_hdr.msg_iov = &iov[k];
		mm[k].msg_hdr.msg_iovlen = len[k] ? 1 : 0;
		if (fds[k] < 0)
			continue;
		mm[k].msg_hdr.msg_control = u[k].buf;
		mm[k].msg_hdr.msg_controllen = sizeof(u[k].buf);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fds[k], sizeof(int));
	}
	return sendmmsg(s, mm, n, 0) == (int)n;
}

/*
 * Send a hello with one fault; server_slot is needed for RAW_OUR_SLOT and
 * RAW_SLOT_MOVED (the slot claimed).
 * Returns the socket; the caller reads the answer.
 */
static inline int raw_hello(const char *service, enum raw_fault f, unsigned server_slot)
{
	struct rpal_block *blk = block_create(64, 64);
	struct rpal_hello h;
	int s = raw_connect(service), sv[2], pp[2] = { -1, -1 }, fds[3], nfds = 2, extra = -1, listener = -1;
	unsigned char junk[128];

	t_check(blk, "block_create");
	t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	struct rpal_geom g;

	geom_self(&g);
	hello_fill(&h, &g, RPAL_HS_HELLO, blk, service, 0);
	fds[0] = rpal_g.memfd;
	fds[1] = sv[1];
	switch (f) {
	case RAW_GARBAGE:
		for (unsigned i = 0; i < sizeof(junk); i++)
			junk[i] = (unsigned char)(i * 37 + 11);
		hs_sendmsg(s, junk, sizeof(junk), fds, 2);
		return s;
	case RAW_SHORT:
		hs_sendmsg(s, &h, 20, fds, 2);
		return s;
	case RAW_BAD_MAGIC: h.magic ^= 1; break;
	case RAW_BAD_VERSION: h.version = 99; break;
	case RAW_NO_FDS: nfds = 0; break;
	case RAW_ONE_FD: nfds = 1; break;
	case RAW_UNSEALED:
		extra = memfd_create("unsealed", MFD_CLOEXEC);
		t_check(ftruncate(extra, (off_t)h.arena_size) == 0, "ftruncate");
		fds[0] = extra;
		break;
	case RAW_HUGETLB:               /* maps only while huge pages are free */
		extra = memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
		if (extra < 0) {        /* no hugetlbfs here: an unsealed one stands in */
			extra = memfd_create("unsealed", MFD_CLOEXEC);
			t_check(ftruncate(extra, (off_t)h.arena_size) == 0, "ftruncate");
		} else {
			t_check(ftruncate(extra, (off_t)h.arena_size) == 0, "ftruncate hugetlb");
			fcntl(extra, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
		}
		fds[0] = extra;
		break;
	case RAW_NO_FUTURE_WRITE: {
		/* Our arena's written pages, in a memfd that lacks only that
		 * seal: its owner could punch holes in it. */
		off_t off = 0, end;

		extra = memfd_create("punchable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		t_check(ftruncate(extra, (off_t)h.arena_size) == 0, "ftruncate");
		while ((off = lseek(rpal_g.memfd, off, SEEK_DATA)) >= 0) {
			end = lseek(rpal_g.memfd, off, SEEK_HOLE);
			t_check(pwrite(extra, (const char *)rpal_g.arena + off, (size_t)(end - off), off) == end - off,
				"pwrite");
			off = end;
		}
		fcntl(extra, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
		fds[0] = extra;
		break;
	}
	case RAW_WRONG_SIZE:
		extra = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		t_check(ftruncate(extra, 1 << 20) == 0, "ftruncate");
		fcntl(extra, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
		fds[0] = extra;
		break;
	case RAW_PIPE_BELL:             /* what wire version 2 sent */
		t_check(pipe2(pp, O_CLOEXEC) == 0, "pipe");
		fds[1] = pp[1];
		break;
	case RAW_QUEUED_BELL:           /* could hide descriptors we would release */
		t_check(write(sv[0], "x", 1) == 1, "write");
		break;
	case RAW_STALLED_BELL:          /* refused (a byte queued), and every read of it waits on us */
		t_check(write(sv[0], "x", 1) == 1, "write");
		if (!raw_stall_read(sv[1]))
			printf("  (userfaultfd not allowed here: the doorbell's read lock is not held)\n");
		break;
	case RAW_NAMED_BELL:            /* could be a third party's socket */
		extra = named_socket_client(&listener);
		fds[1] = extra;
		break;
	case RAW_BAD_PID: h.pid = 1; break;
	case RAW_BAD_REGION: h.slot_size *= 2; break;
	case RAW_BLOCK_OUTSIDE: h.block = h.region_base + h.slot * h.slot_size + h.arena_size - 64; break;
	case RAW_OUR_SLOT: h.slot = server_slot; break;
	case RAW_SLOT_MOVED:            /* passes the checks of the hello alone */
		h.block += ((uint64_t)server_slot - h.slot) * h.slot_size;
		h.slot = server_slot;
		break;
	case RAW_SIZE_MIX:              /* our own incarnation, a larger arena */
		extra = memfd_create("twice", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		t_check(ftruncate(extra, (off_t)h.arena_size * 2) == 0, "ftruncate");
		fcntl(extra, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
		fds[0] = extra;
		h.block = h.region_base + h.slot * h.slot_size + h.arena_size + RPAL_PAGE;
		h.arena_size *= 2;
		break;
	case RAW_LOCKED_PIPE: {         /* held until this process ends: the pipe is never closed here */
		static int held[2];
		int p[2], sp[2];
		pthread_t t;

		t_check(pipe2(p, O_CLOEXEC) == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0,
			"pipe");
		held[0] = sp[0];
		held[1] = p[1];
		t_check(pthread_create(&t, NULL, raw_splice_main, held) == 0, "pthread_create");
		usleep(100000);         /* the splice is waiting by then */
		fds[0] = p[0];
		break;
	}
	case RAW_BAD_BLOCK_NONCE: h.block_nonce ^= 2; break;
	case RAW_THREE_FDS:             /* a HELLO carries two */
		extra = memfd_create("third", MFD_CLOEXEC);
		fds[2] = extra;
		nfds = 3;
		break;
	case RAW_LINGER_IN_BELL:        /* released with the doorbell's queue, if ours is the last */
		extra = lingering_socket(NULL);
		if (extra >= 0)
			t_check(hs_sendmsg(sv[0], "x", 1, &extra, 1) == 0, "queue a socket in the doorbell");
		break;
	case RAW_NESTED_THIRD:          /* deeper than the closing thread looks */
		extra = nested_lingering(8);
		fds[2] = extra >= 0 ? extra : memfd_create("third", MFD_CLOEXEC);
		nfds = 3;
		break;
	case RAW_NESTED_IN_BELL: {
		int nest = nested_lingering(8);
		if (nest >= 0)
			t_check(hs_sendmsg(sv[0], "x", 1, &nest, 1) == 0, "queue a nest in the doorbell");
		extra = nest;
		break;
	}
	case RAW_LISTENER_THIRD:        /* whose backlog holds a connection that holds more */
		extra = lingering_socket(NULL);
		extra = extra >= 0 ? listener_holding(extra) : memfd_create("third", MFD_CLOEXEC);
		fds[2] = extra;
		nfds = 3;
		break;
	case RAW_SECOND_MESSAGE:        /* queued behind a hello that is refused */
	case RAW_AFTER_EMPTY: {         /* an empty message reads as the end once shut */
		int tcp = lingering_socket(NULL);
		const void *msg[3] = { junk, "", junk };
		size_t len[3] = { sizeof(junk), 0, 1 };
		int with[3] = { fds[1], -1, tcp };

		for (unsigned i = 0; i < sizeof(junk); i++)
			junk[i] = (unsigned char)(i * 29 + 3);
		for (int tries = 1;; tries++) {
			bool all = f == RAW_SECOND_MESSAGE ?
				send_all(s, 2, (const void *const[]){ msg[0], msg[2] }, (size_t[]){ len[0], len[2] },
					 (int[]){ with[0], with[2] }) :
				send_all(s, 3, msg, len, with);
			if (all)
				break;
			/* Again on a new connection, until all wait behind the first. */
			t_check(tries < 50, "sendmmsg: %s, %d times", strerror(errno), tries);
			close(s);
			s = raw_connect(service);
		}
		if (tcp >= 0)
			close(tcp);
		return s;
	}
	case RAW_TCP_BELL:              /* whose release, if ours is the last, blocks */
		extra = lingering_socket(NULL);
		if (extra < 0)
			extra = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		fds[1] = extra;
		break;
	default: break;
	}
	t_check(hs_sendmsg(s, &h, sizeof(h), fds, nfds) == 0, "raw sendmsg");
	if (extra >= 0)
		close(extra);
	close(sv[0]);
	close(sv[1]);
	if (pp[0] >= 0) {
		close(pp[0]);
		close(pp[1]);
	}
	if (listener >= 0)
		close(listener);
	return s;
}

/* Read the server's answer: the refusal's errno, or 0 for a welcome. */
static inline int raw_answer(int s, char *reason, size_t rlen)
{
	unsigned char buf[256];
	struct pollfd p = { .fd = s, .events = POLLIN };
	int fds[4], nfds, n, err;

	if (poll(&p, 1, 5000) != 1)
		t_fail("no answer from the server within 5 s");
	n = hs_recvmsg(s, buf, sizeof(buf), fds, 4, &nfds);
	while (nfds)
		close(fds[--nfds]);
	if (n < 0)
		return n;
	if (refuse_parse(buf, (size_t)n, &err, reason, rlen) == 0)
		return err;
	return 0;
}

#endif
