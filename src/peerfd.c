/* SPDX-License-Identifier: MIT */
/*
 * peerfd.c - receiving and closing descriptors a peer passed us, without
 * letting them block our threads.
 *
 * Releasing a socket that has unsent data and SO_LINGER set waits up to the
 * time the peer chose, on whichever thread drops the last reference.  A
 * Unix socket releases the descriptors queued in it, and those may be Unix
 * sockets holding more, as deep as the kernel lets them nest (dozens of
 * levels).  So every socket's linger is switched off, and a Unix socket is
 * shut for reading (nothing more can be queued in it) and emptied before
 * it is closed.  The caller's thread empties the descriptor it closes; a
 * Unix socket found inside goes to the closer thread, which empties it the
 * same way.  However deep a peer nests them, the caller's thread does one
 * level and its stack none; honest peers never nest, so the closer thread
 * only runs for a hostile one.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Messages taken out of one socket at a time: a socket shut for reading
 * holds finitely many, and the closer comes back for the rest. */
#define PEER_FD_DRAIN 1024

ssize_t peer_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int *flags)
{
	union {
		char buf[CMSG_SPACE(SCM_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	ssize_t n;

	*nfds = 0;
	do
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		if (cnt > (size_t)(SCM_MAX_FDS - *nfds))
			cnt = (size_t)(SCM_MAX_FDS - *nfds);
		memcpy(fds + *nfds, CMSG_DATA(cm), cnt * sizeof(int));
		*nfds += (int)cnt;
	}
	*flags = mh.msg_flags;
	return n;
}

/* ------------------------------------------------------- closer thread */

/* The closer runs while it has descriptors to close, then ends: an idle
 * process keeps no thread for it, and none outlives the library's use. */
static struct {
	pthread_mutex_t lock;
	int *fds;
	size_t n, cap;
	bool running;
} closer = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, false };

enum drained { DRAINED, DRAIN_MORE, DRAIN_FAILED };

static enum drained peer_fd_drain(int fd);
static bool peer_fd_prepare(int fd);

static void *closer_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd;

		pthread_mutex_lock(&closer.lock);
		if (!closer.n) {
			closer.running = false;
			pthread_mutex_unlock(&closer.lock);
			return NULL;
		}
		fd = closer.fds[--closer.n];
		pthread_mutex_unlock(&closer.lock);
		/* Shut and linger-free already.  A socket that failed to
		 * empty is closed here all the same: only this thread can
		 * block on it then. */
		if (peer_fd_drain(fd) == DRAIN_MORE)
			peer_fd_defer(fd);
		else
			close(fd);
	}
	return NULL;
}

/* Hand a prepared Unix socket to the closer thread.  Where the thread
 * cannot start or the list cannot grow, it is closed here after all. */
void peer_fd_defer(int fd)
{
	bool queued = false;

	pthread_mutex_lock(&closer.lock);
	if (!closer.running) {
		pthread_t t;
		pthread_attr_t a;
		sigset_t all, old;

		/* Signals stay with the application's threads. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if (!pthread_attr_init(&a)) {
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			closer.running = !pthread_create(&t, &a, closer_main, NULL);
			pthread_attr_destroy(&a);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (closer.running && closer.n == closer.cap) {
		size_t cap = closer.cap ? 2 * closer.cap : 64;
		int *p = realloc(closer.fds, cap * sizeof(*p));

		if (p) {
			closer.fds = p;
			closer.cap = cap;
		}
	}
	if (closer.running && closer.n < closer.cap) {
		closer.fds[closer.n++] = fd;
		queued = true;
	}
	pthread_mutex_unlock(&closer.lock);
	if (!queued)
		close(fd);
}

/*
 * In a child after fork(): no closer thread runs there.  What the parent
 * had queued stays open in the child (copies: the parent closes its own)
 * until the child's first deferral starts a thread of its own.
 */
void peer_fd_forget_child(void)
{
	pthread_mutex_init(&closer.lock, NULL);
	closer.running = false;
}

/* ---------------------------------------------------------------- close */

/* Switch a socket's linger off; for a Unix socket, also shut it for
 * reading and return true: it is to be emptied before its close. */
static bool peer_fd_prepare(int fd)
{
	struct linger off = { 0, 0 };
	struct stat st;
	int dom;
	socklen_t len = sizeof(dom);

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) < 0 || dom != AF_UNIX)
		return false;
	/* Nothing more can be queued between the drain and the close. */
	shutdown(fd, SHUT_RD);
	return true;
}

/* A descriptor that came out of one a peer passed us: closed at once, or,
 * a Unix socket, by the closer thread once it is empty. */
static void peer_fd_close_nested(int fd)
{
	if (peer_fd_prepare(fd))
		peer_fd_defer(fd);
	else
		close(fd);
}

/* One read of a socket a peer writes to; the descriptors that came with
 * it are closed, nested or not.  *any says whether some came. */
static ssize_t peer_recv_any(int fd, void *buf, size_t len, bool nested, bool *any)
{
	int fds[SCM_MAX_FDS], nfds, flags;
	ssize_t n = peer_recv_fds(fd, buf, len, fds, &nfds, &flags);

	*any = nfds > 0;
	while (nfds) {
		int got = fds[--nfds];

		if (nested)
			peer_fd_close_nested(got);
		else
			peer_fd_close(got);
	}
	return n;
}

ssize_t peer_recv(int fd, void *buf, size_t len)
{
	bool any;
	ssize_t n = peer_recv_any(fd, buf, len, false, &any);

	return n < 0 ? (errno = (int)-n, -1) : n;
}

/* Take out what waits in the prepared Unix socket fd. */
static enum drained peer_fd_drain(int fd)
{
	char data[4096];

	for (int i = 0; i < PEER_FD_DRAIN; i++) {
		bool any;
		ssize_t n = peer_recv_any(fd, data, sizeof(data), true, &any);

		if (n == -EAGAIN || (n == 0 && !any))
			return DRAINED;
		/* A reset (the peer closed with our data unread) is reported
		 * once; what waits behind it is still there to take. */
		if (n < 0 && n != -ECONNRESET && n != -EPIPE)
			return DRAIN_FAILED;
	}
	return DRAIN_MORE;
}

void peer_fd_close(int fd)
{
	/* A socket that did not empty here is the closer thread's to finish. */
	if (peer_fd_prepare(fd) && peer_fd_drain(fd) != DRAINED)
		peer_fd_defer(fd);
	else
		close(fd);
}
