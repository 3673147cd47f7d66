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
 * it is closed.  The caller's thread empties a socket of its own (whose
 * other end the peer holds); a Unix socket the peer passed, or one found
 * inside, goes to the closer thread, which empties it the same way, the
 * innermost first.  However deep a peer nests them, the caller's thread
 * takes out at most one message that holds Unix sockets, and its stack
 * nothing; honest peers never nest, and pass sockets that are kept, so the
 * closer thread only runs for a hostile one.  A listening Unix socket is
 * shut (no new connections) and what waits in its backlog is taken out
 * the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/* Messages taken out of one socket at a time: a socket shut for reading
 * holds finitely many, and the closer comes back for the rest. */
#define PEER_FD_DRAIN 1024
/* Zero reads in a row that end a seqpacket socket we shut, and one its
 * peer shut first (see peer_fd_drain). */
#define SEQPACKET_END_RUN 16
#define SEQPACKET_PEER_END_RUN 1024

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

/* ------------------------------------------------------------ emptying */

enum drained { DRAINED, DRAIN_MORE, DRAIN_FAILED };

/*
 * Switch a socket's linger off; for a Unix socket, also shut it for
 * reading (nothing more can be queued in it, nor connect to it) and return
 * true: it is to be emptied before its close.  A seqpacket socket is shut
 * once it reads empty (see peer_fd_drain).
 */
static bool peer_fd_prepare(int fd)
{
	struct linger off = { 0, 0 };
	int dom, type = 0;
	socklen_t len = sizeof(dom), tlen = sizeof(type);

	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off)) < 0 && errno == ENOTSOCK)
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) < 0 || dom != AF_UNIX)
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 || type != SOCK_SEQPACKET)
		shutdown(fd, SHUT_RD);
	return true;
}

/*
 * Is the Unix socket fd, which peer_fd_prepare() shut for reading, a stream
 * with nothing queued?  Then nothing ever will be (a send that comes later
 * fails), and its close releases nothing.  The look takes no lock a peer
 * can hold.  A stream carries descriptors only with bytes; a seqpacket or
 * datagram socket can queue them alone.
 */
static bool stream_empty(int fd)
{
	int type = 0, queued = -1;
	socklen_t len = sizeof(type);

	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM &&
	       ioctl(fd, FIONREAD, &queued) == 0 && queued == 0;
}

/* Is the connected socket fd shut for reading: its peer closed or shut
 * down writing, or we shut it on an earlier pass (taken as the peer's: the
 * longer run, to be safe)? */
static bool peer_shut(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

static void peer_fd_defer(const int *fds, int n);

/* Threads closing other files at once (see close_aside()), and how many
 * may: past that, the closer's list takes them. */
#define FILE_CLOSERS_MAX 64
static _Atomic int file_closers;

static void *file_close_main(void *arg)
{
	close((int)(intptr_t)arg);
	atomic_fetch_sub(&file_closers, 1);
	return NULL;
}

/*
 * Close a file whose close may wait on whoever serves it (a FUSE file
 * system the peer runs may never answer its flush) on a thread of its own:
 * the descriptor leaves our table as that close starts (so a fork() does
 * not inherit it), and one file that never closes holds neither the caller
 * nor the closer's sockets.
 */
static void close_aside(int fd)
{
	if (atomic_fetch_add(&file_closers, 1) < FILE_CLOSERS_MAX) {
		pthread_attr_t a;
		pthread_t t;
		sigset_t all, old;
		int ok = 0;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);       /* signals stay with the application */
		if (!pthread_attr_init(&a)) {
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			pthread_attr_setstacksize(&a, 64 << 10);
			ok = !pthread_create(&t, &a, file_close_main, (void *)(intptr_t)fd);
			pthread_attr_destroy(&a);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (ok)
			return;
	}
	atomic_fetch_sub(&file_closers, 1);
	peer_fd_defer(&fd, 1);
}

/*
 * Close a descriptor that is no Unix socket.  Sockets (linger off) and
 * memory files close at once; any other file may make its close wait on
 * the peer (see close_aside()): a FUSE file it serves, or a pipe, whose
 * close (and any fcntl() of it) takes the pipe's mutex, which the peer
 * holds for as long as a splice() from an idle socket into the pipe waits.
 * Each look reaches no file system and takes no lock the peer can hold.
 * Honest peers pass only sockets and memfds.
 */
static void close_or_defer(int fd)
{
	int type;
	socklen_t len = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 || fcntl(fd, F_GET_SEALS) >= 0)
		close(fd);
	else
		close_aside(fd);
}

/* Descriptors that came out of a socket: closed, or, Unix sockets, kept in
 * nested[] (prepared) for the caller to hand on. */
static void sort_out(const int *fds, int nfds, int *nested, int *nn)
{
	for (int i = 0; i < nfds; i++) {
		if (peer_fd_prepare(fds[i]))
			nested[(*nn)++] = fds[i];
		else
			close_or_defer(fds[i]);
	}
}

/*
 * Take out what waits in the prepared Unix socket fd (messages, or a
 * listener's backlog), closing what came with it, until it is empty or
 * something brings Unix sockets: those are left in nested[] (room for
 * SCM_MAX_FDS), and fd has more to take after them.
 *
 * Once shut for reading (by us, or by the peer's close or shutdown), a
 * seqpacket socket reads 0 both at its end and for an empty message.  So
 * it is read while not shut, until empty (EAGAIN), then shut: what came
 * in between is read after it, and a run of zero reads longer than such a
 * burst can be is its end.  Where the peer shut it first, the run must be
 * longer than all the empty messages it could queue: its send buffer
 * (at most 416 KiB unless raised by root) holds fewer than 1024.  A stream
 * reads 0 only at its end; a datagram socket says EAGAIN when empty.
 */
static enum drained peer_fd_drain(int fd, int *nested, int *nn)
{
	char data[4096];
	int listening = 0, type = 0;
	unsigned msgs = 0, zeros = 0, run = 0;
	socklen_t len = sizeof(listening), tlen = sizeof(type);

	*nn = 0;
	getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
	getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen);
	while (msgs < PEER_FD_DRAIN) {
		int fds[SCM_MAX_FDS], nfds = 0, flags;
		ssize_t n;

		if (listening) {
			int s = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

			if (s < 0)
				return errno == EAGAIN ? DRAINED : DRAIN_FAILED;
			nested[(*nn)++] = s;    /* a connected Unix socket, what its client sent queued */
			peer_fd_prepare(s);
			if (*nn == SCM_MAX_FDS)
				return DRAIN_MORE;
			continue;
		}
		n = peer_recv_fds(fd, data, sizeof(data), fds, &nfds, &flags);
		if (n == -EAGAIN && type == SOCK_SEQPACKET && !run) {
			shutdown(fd, SHUT_RD);
			run = SEQPACKET_END_RUN;
			continue;
		}
		if (n == 0 && !nfds && type == SOCK_SEQPACKET) {
			if (!run && !peer_shut(fd)) {
				msgs++;         /* an empty message */
				continue;
			}
			if (!run)
				run = SEQPACKET_PEER_END_RUN;
			if (++zeros < run)
				continue;
		}
		if (n == -EAGAIN || (n == 0 && !nfds))
			return DRAINED;
		/* A reset (the peer closed with our data unread) is reported
		 * once; what waits behind it is still there to take. */
		if (n < 0 && n != -ECONNRESET && n != -EPIPE)
			return DRAIN_FAILED;
		msgs++;
		if (n > 0 || nfds)
			zeros = 0;
		sort_out(fds, nfds, nested, nn);
		if (*nn)
			break;
	}
	/* More to take later: no more to come meanwhile.  (The closer may
	 * then take a long run of empty messages for the end, and block on
	 * what follows them; only the closer.) */
	if (type == SOCK_SEQPACKET && !run)
		shutdown(fd, SHUT_RD);
	return DRAIN_MORE;
}

/*
 * At the end of a handshake, once the socket refuses descriptors: take out
 * the messages a peer queued before that, the peer still there, without
 * shutting the socket.  True if it is empty now, so that closing it can
 * release nothing that blocks.
 */
bool peer_fd_take_queued(int sock)
{
	int nested[SCM_MAX_FDS], nn = 0;
	char data[512];

	for (unsigned msgs = 0; msgs < PEER_FD_DRAIN; msgs++) {
		int fds[SCM_MAX_FDS], nfds = 0, flags;
		ssize_t n = peer_recv_fds(sock, data, sizeof(data), fds, &nfds, &flags);

		if (n == -EAGAIN)
			return true;
		if (n < 0 || (n == 0 && !nfds && peer_shut(sock)))
			return false;   /* gone, or at its end: emptied at the close */
		sort_out(fds, nfds, nested, &nn);
		peer_fd_defer(nested, nn);
		nn = 0;
	}
	return false;
}

/* ------------------------------------------------------- closer thread */

/* The closer runs while it has descriptors to close, then ends: an idle
 * process keeps no thread for it.  Its list is a stack: what a socket
 * brings is emptied before the rest of that socket, so a nest costs about
 * its depth in descriptors held, not its size. */
static struct {
	pthread_mutex_t lock;
	int *fds;
	size_t n, cap;
	bool running;
} closer = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, false };

/* Past this many, the closer closes what it finds instead of keeping it:
 * only the closer may then block (a peer nesting sockets 253 wide at every
 * level), never the descriptor table run out. */
#define CLOSER_MAX 4096

static __thread bool on_closer;
static pthread_once_t closer_once = PTHREAD_ONCE_INIT;
static void closer_atfork(void);

static void closer_hand_on(int fd, const int *nested, int nn, enum drained r);

static void *closer_main(void *arg)
{
	int nested[SCM_MAX_FDS], nn;

	(void)arg;
	on_closer = true;
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
		enum drained r = peer_fd_drain(fd, nested, &nn);
		closer_hand_on(fd, nested, nn, r);
	}
	return NULL;
}

/* Hand prepared Unix sockets to the closer thread, fds[0] the last to be
 * taken.  Where the thread cannot start or the list cannot grow, or the
 * closer itself finds its list full, they are closed here after all. */
static void peer_fd_defer(const int *fds, int n)
{
	int queued = 0;

	if (!n)
		return;
	pthread_once(&closer_once, closer_atfork);      /* before the thread can hold the lock */
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
	while (closer.running && closer.cap - closer.n < (size_t)n && !(on_closer && closer.n >= CLOSER_MAX)) {
		size_t cap = closer.cap ? 2 * closer.cap : 64;
		int *p = realloc(closer.fds, cap * sizeof(*p));

		if (!p)
			break;
		closer.fds = p;
		closer.cap = cap;
	}
	for (; queued < n && closer.running && closer.n < closer.cap && !(on_closer && closer.n >= CLOSER_MAX); queued++)
		closer.fds[closer.n++] = fds[queued];
	pthread_mutex_unlock(&closer.lock);
	for (int i = queued; i < n; i++)
		close(fds[i]);
}

/* After a drain of fd: close it, or hand it on with what it brought above
 * it.  A socket that failed to empty is the closer's to close (only it may
 * block on one). */
static void closer_hand_on(int fd, const int *nested, int nn, enum drained r)
{
	int all[SCM_MAX_FDS + 1];

	if (r == DRAINED || (r == DRAIN_FAILED && on_closer)) {
		close(fd);
		peer_fd_defer(nested, nn);
		return;
	}
	all[0] = fd;
	memcpy(all + 1, nested, (size_t)nn * sizeof(int));
	peer_fd_defer(all, nn + 1);
}

/* fork(): the child gets the list whole (the parent's lock held across),
 * and no thread to work it until its own first deferral. */
static void closer_fork_prepare(void) { pthread_mutex_lock(&closer.lock); }
static void closer_fork_parent(void) { pthread_mutex_unlock(&closer.lock); }
static void closer_fork_child(void)
{
	closer.running = false;
	on_closer = false;
	pthread_mutex_unlock(&closer.lock);
}

static void closer_atfork(void)
{
	pthread_atfork(closer_fork_prepare, closer_fork_parent, closer_fork_child);
}

/* ---------------------------------------------------------------- close */

/*
 * Descriptors the peer passed us.  It may still hold any of them, and every
 * read of a Unix socket first takes the socket's read lock, which a read of
 * the peer's own that stalls in the middle of its copy (into memory that a
 * FUSE file system it serves, or a userfaultfd of its own, never fills)
 * keeps for as long as it likes, MSG_DONTWAIT or not: so those sockets are
 * emptied by the closer thread, never on ours.
 */
void peer_fds_drop(const int *fds, int n)
{
	int socks[SCM_MAX_FDS], ns = 0;

	for (int i = 0; i < n; i++) {
		if (!peer_fd_prepare(fds[i]))
			close_or_defer(fds[i]);
		else if (stream_empty(fds[i]))
			close(fds[i]);  /* as an honest peer's doorbell is */
		else
			socks[ns++] = fds[i];
	}
	peer_fd_defer(socks, ns);
}

/* A socket of ours, whose other end the peer holds: nothing the peer does
 * holds its read lock, so it is emptied here. */
void peer_fd_close(int fd)
{
	int nested[SCM_MAX_FDS], nn = 0;

	if (!peer_fd_prepare(fd)) {
		close_or_defer(fd);
		return;
	}
	enum drained r = peer_fd_drain(fd, nested, &nn);
	closer_hand_on(fd, nested, nn, r);
}

ssize_t peer_recv(int fd, void *buf, size_t len)
{
	int fds[SCM_MAX_FDS], nfds, flags;
	ssize_t n = peer_recv_fds(fd, buf, len, fds, &nfds, &flags);

	peer_fds_drop(fds, nfds);
	return n < 0 ? (errno = (int)-n, -1) : n;
}
