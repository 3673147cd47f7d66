/* SPDX-License-Identifier: MIT */
/*
 * listen.c - a service's listener: rpal_listen(), the server's half of the
 * handshake, rpal_accept().  The user's descriptor is an epoll set of the
 * listening socket, the sockets mid-handshake and a timer for their
 * deadlines, so an event loop sees the listener readable when any of them
 * needs attention.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "setup.h"

/* ------------------------------------------------------------ listen */

/*
 * Take a name's lock: flock(LOCK_EX) on <socket path>.lock, which a
 * listener holds while it serves and removes when it stops.  A file
 * removed or replaced between our open and our lock was a listener's that
 * has stopped since: we lock the file at the path then, so that two
 * listeners never each hold a lock of one name.
 */
static int name_lock(const char *lockpath, const char *service)
{
	for (int tries = 0;; tries++) {
		struct stat held, there;
		int fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

		if (fd < 0)
			return rpal_fail(errno, "cannot open %s", lockpath);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			return rpal_fail(EADDRINUSE, "service %s is already served by a live process", service);
		}
		if (fstat(fd, &held) == 0 && lstat(lockpath, &there) == 0 && held.st_ino == there.st_ino &&
		    held.st_dev == there.st_dev)
			return fd;
		close(fd);
		if (tries == 100)
			return rpal_fail(EAGAIN, "the lock file %s keeps being replaced", lockpath);
	}
}

/* Is the file a name's lock (an empty regular file: none is ever written)?
 * Anything else at <socket path>.lock is someone's, and stays. */
static int lock_file_ours(int fd, const char *lockpath)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
		return 0;
	return rpal_fail(EEXIST, "%s is in the way: it is not a lock file of rpal (an empty file), and is left alone",
			 lockpath);
}

/*
 * Does a socket still listen at path?  Our lock says no rpal listener holds
 * the name, not that nobody serves there: a listener whose lock file was
 * removed, or another program's socket.  Only a refused connection shows
 * the file stale; any other answer (accepted, another socket type, a full
 * backlog, no permission) leaves it alone.  The probe's connection closes
 * at once: a listener of ours drops it without a word (pending_step).  Returns 0
 * (accepted), the connect error, or -errno where no probe could be made.
 */
static int socket_probe(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s, err = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		err = errno;
	close(s);
	return err;
}

/* Remove the socket at path that a listener which has stopped left; fail,
 * removing nothing, where anything else is there. */
static int stale_socket_remove(const char *path, const char *service)
{
	struct stat st;
	int err;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : rpal_fail(errno, "cannot look at %s", path);
	if (!S_ISSOCK(st.st_mode))
		return rpal_fail(EEXIST, "%s is in the way: it is not a socket, and is left alone", path);
	err = socket_probe(path);
	if (err < 0)
		return rpal_fail(-err, "cannot probe the socket %s", path);
	if (err == ENOENT)
		return 0;
	if (err != ECONNREFUSED)
		return rpal_fail(EADDRINUSE, "service %s is in use: its socket %s is live (a connect %s%s), "
				 "and is left alone", service, path, err ? "failed: " : "was accepted",
				 err ? strerror(err) : "");
	unlink(path);
	return 0;
}

/* Give a name up: its socket file where we bound it, then its lock file,
 * which we hold (the lock keeps anyone from taking the name until the file
 * is gone). */
static void name_release(struct rpal_listener *l, bool bound)
{
	char lockpath[sizeof(l->path) + 8];
	struct stat held, there;

	if (!l->path[0])
		return;
	if (bound)
		unlink(l->path);
	snprintf(lockpath, sizeof(lockpath), "%s.lock", l->path);
	/* Only the file we hold: one that replaced it is another's. */
	if (fstat(l->lockfd, &held) == 0 && lstat(lockpath, &there) == 0 && held.st_ino == there.st_ino &&
	    held.st_dev == there.st_dev)
		unlink(lockpath);
}

RPAL_EXPORT int rpal_listen(const char *service, const struct rpal_policy *policy)
{
	struct rpal_listener *l;
	struct sockaddr_un sa;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t salen;
	char lockpath[128];
	bool bound = false;
	int ret;

	ret = rpal_ensure_init();
	if (ret)
		return ret;
	ret = service_addr(service, &sa, &salen, lockpath, sizeof(lockpath));
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rpal_fail(ENOMEM, "out of memory");
	l->obj.kind = OBJ_LISTENER;
	l->fd = l->sock = l->lockfd = l->timer = -1;
	/* What the statistics show (a path may be longer than the field). */
	snprintf(l->service, sizeof(l->service), "%s", service_label(service));
	ret = policy_copy(l, policy);
	if (ret)
		goto fail;

	if (lockpath[0]) {
		l->lockfd = name_lock(lockpath, service);
		if (l->lockfd < 0) {
			ret = l->lockfd;
			goto fail;
		}
		if ((ret = lock_file_ours(l->lockfd, lockpath)) < 0) {
			close(l->lockfd);       /* someone's file: not removed */
			l->lockfd = -1;
			goto fail;
		}
		snprintf(l->path, sizeof(l->path), "%s", sa.sun_path);
		if ((ret = stale_socket_remove(sa.sun_path, service)) < 0)
			goto fail;
	}
	l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->sock < 0) {
		ret = rpal_fail(errno, "socket() failed");
		goto fail;
	}
	if (bind(l->sock, (struct sockaddr *)&sa, salen) < 0) {
		ret = rpal_fail(errno == EADDRINUSE ? EADDRINUSE : errno, "cannot bind service %s", service);
		goto fail;
	}
	bound = true;
	/* Other uids can reach the socket only if the policy may let them in;
	 * SO_PEERCRED is the real gate either way. */
	if (l->path[0])
		chmod(l->path, (policy && (policy->nr_uids || policy->nr_gids)) ? 0666 : 0600);
	if (listen(l->sock, 128) < 0) {
		ret = rpal_fail(errno, "listen() failed");
		goto fail;
	}
	l->fd = epoll_create1(EPOLL_CLOEXEC);
	if (l->fd < 0) {
		ret = rpal_fail(errno, "epoll_create1() failed");
		goto fail;
	}
	ev.data.fd = l->sock;
	if (epoll_ctl(l->fd, EPOLL_CTL_ADD, l->sock, &ev) < 0) {
		ret = rpal_fail(errno, "epoll_ctl() failed");
		goto fail;
	}
	/* A client that connects and says nothing makes the listener readable
	 * at its deadline, so that an event loop's next rpal_accept drops it. */
	l->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ev.data.fd = l->timer;
	if (l->timer < 0 || epoll_ctl(l->fd, EPOLL_CTL_ADD, l->timer, &ev) < 0) {
		ret = rpal_fail(errno, "cannot create the listener's handshake timer");
		goto fail;
	}
	pthread_mutex_lock(&rpal_g.lock);
	ret = obj_set(l->fd, &l->obj);
	if (!ret) {
		/* Listed, so that a server is found by its service before
		 * its first client; without an entry it serves all the same. */
		struct rpal_stat_conn id = { .state = RPAL_STAT_LISTEN, .fd = l->fd };

		memcpy(id.service, l->service, sizeof(id.service));
		l->st = stat_conn_open(&id);
	}
	pthread_mutex_unlock(&rpal_g.lock);
	if (ret)
		goto fail;
	return l->fd;
fail:
	if (l->fd >= 0)
		close(l->fd);
	if (l->timer >= 0)
		close(l->timer);
	if (l->sock >= 0)
		close(l->sock);
	name_release(l, bound);
	if (l->lockfd >= 0)
		close(l->lockfd);
	free(l->uids);
	free(l->gids);
	free(l);
	return ret;
}

static void pending_drop(struct rpal_listener *l, unsigned i)
{
	epoll_ctl(l->fd, EPOLL_CTL_DEL, l->pending[i].fd, NULL);
	/* It may hold more of the client's messages, with descriptors. */
	peer_fd_close(l->pending[i].fd);
	l->pending[i] = l->pending[--l->nr_pending];
}

/* Try to finish pending handshake i.  1: done (*out set), 0: not yet, or the client went
 * away before its hello (dropped), <0: failed (dropped). */
static int pending_step(struct rpal_listener *l, unsigned i, int *out)
{
	int sock = l->pending[i].fd, fds[3], nfds, n, ret, bell, ring, pagefd = -1;
	unsigned char buf[sizeof(struct rpal_hello) + 16];
	struct rpal_wake_page *page = NULL;
	struct rpal_conn *c;
	struct rpal_block *me;
	struct rpal_hello w, offer = { 0 };
	struct rpal_geom g;
	struct ucred uc;
	char why[160];

	n = hs_recvmsg(sock, buf, sizeof(buf), fds, 2, &nfds);
	if (n == -E2BIG) {
		send_refuse(sock, EPROTO, "hello carried more than 2 descriptors");
		pending_drop(l, i);
		return rpal_fail(EPROTO, "refused a client: its hello carried more than 2 descriptors");
	}
	if (n == -EAGAIN) {
		if (now_ns() < l->pending[i].deadline_ns)
			return 0;
		pending_drop(l, i);
		return rpal_fail(ETIMEDOUT, "a client connected but sent no hello within %u ms",
				 rpal_g.cfg.handshake_ms);
	}
	if (n == -ECONNRESET) {
		/* Nothing read: the client went away, or sent an empty message.
		 * Gone without a word is nothing to report: a probe of whether
		 * the name is served (stale_socket_remove) is one. */
		struct pollfd hup = { .fd = sock, .events = POLLRDHUP };
		bool gone = poll(&hup, 1, 0) == 1 && (hup.revents & (POLLHUP | POLLRDHUP));

		pending_drop(l, i);
		return gone ? 0 : rpal_fail(EPROTO, "a client's hello was an empty message");
	}
	if (n < 0) {
		pending_drop(l, i);
		return rpal_fail(-n, "a client's hello could not be read");
	}
	ret = cred_check(sock, &l->policy, &uc, why, sizeof(why));
	if (ret) {
		peer_fds_drop(fds, nfds);
		send_refuse(sock, -ret, why);
		pending_drop(l, i);
		return rpal_fail(-ret, "refused a client: %s", why);
	}
	ret = side_create(&me, &bell, &ring);
	if (ret) {
		peer_fds_drop(fds, nfds);
		send_refuse(sock, -ret, "server cannot create a connection");
		pending_drop(l, i);
		return ret;
	}
	epoll_ctl(l->fd, EPOLL_CTL_DEL, sock, NULL);
	/* The client offers a wake page (hello_accept checks the rest). */
	memcpy(&offer, buf, (size_t)n < sizeof(offer) ? (size_t)n : sizeof(offer));
	if (offer.features & RPAL_FEAT_WAKE_PAGE)
		page = wake_page_create(&pagefd);
	ret = hello_accept(sock, buf, n, fds, nfds, RPAL_HS_HELLO, &uc, me, bell, page, l->service, &c, why,
			   sizeof(why));
	if (ret) {
		/* A client that gave up waiting takes its block back: what it
		 * sent no longer checks out, but that is not the news. */
		struct pollfd hup = { .fd = sock, .events = POLLRDHUP };
		bool left = poll(&hup, 1, 0) == 1 && (hup.revents & (POLLHUP | POLLRDHUP | POLLERR));

		if (page) {
			munmap(page, RPAL_WAKE_PAGE_SIZE);
			close(pagefd);
		}
		send_refuse(sock, -ret, why);
		close(bell);
		close(ring);
		block_destroy(me);
		peer_fd_close(sock);
		l->pending[i] = l->pending[--l->nr_pending];
		if (left)
			return rpal_fail(ECONNRESET, "client pid %d hung up during the handshake (its hello no longer checked out: %s)",
					 (int)uc.pid, why);
		return rpal_fail(-ret, "refused client pid %d: %s", (int)uc.pid, why);
	}
	geom_self(&g);
	hello_fill(&w, &g, RPAL_HS_WELCOME, me, NULL, page ? RPAL_FEAT_WAKE_PAGE : 0);
	fds[0] = rpal_g.memfd;
	fds[1] = ring;
	fds[2] = pagefd;
	ret = hs_sendmsg(sock, &w, sizeof(w), fds, page ? 3 : 2);
	close(ring);            /* the peer holds its copy now */
	if (pagefd >= 0)
		close(pagefd);
	l->pending[i] = l->pending[--l->nr_pending];
	if (ret) {
		rpal_close(sock);
		return rpal_fail(-ret, "client pid %d went away during the handshake", (int)uc.pid);
	}
	*out = sock;
	return 1;
}

/* Arm the listener's timer for deadline (UINT64_MAX: disarm), after
 * consuming a past expiry, which would keep the listener readable. */
static void pending_timer_arm(struct rpal_listener *l, uint64_t deadline)
{
	struct itimerspec its = { 0 };
	uint64_t expiries;

	(void)!read(l->timer, &expiries, sizeof(expiries));
	if (deadline != UINT64_MAX) {
		its.it_value.tv_sec = (time_t)(deadline / 1000000000);
		its.it_value.tv_nsec = (long)(deadline % 1000000000);
	}
	timerfd_settime(l->timer, TFD_TIMER_ABSTIME, &its, NULL);
}

/*
 * With the pending list full and a client in the backlog: the oldest
 * pending handshake whose client has sent nothing yet.  -1 if the backlog
 * is empty, or if every pending client has its HELLO (or its hang-up)
 * waiting: the next step settles those, one way or the other.
 */
static int pending_oldest_silent(struct rpal_listener *l)
{
	struct pollfd p[RPAL_PENDING_MAX + 1];
	int oldest = -1;
	unsigned i;

	for (i = 0; i < l->nr_pending; i++)
		p[i] = (struct pollfd){ .fd = l->pending[i].fd, .events = POLLIN };
	p[i] = (struct pollfd){ .fd = l->sock, .events = POLLIN };
	if (poll(p, l->nr_pending + 1, 0) < 0 || !p[l->nr_pending].revents)
		return -1;
	for (i = 0; i < l->nr_pending; i++)
		if (!p[i].revents && (oldest < 0 || l->pending[i].deadline_ns < l->pending[oldest].deadline_ns))
			oldest = (int)i;
	return oldest;
}

/*
 * Move the connections waiting in the backlog to the pending list.  The
 * list is bounded: when it is full, a silent client makes room (the oldest
 * goes, so a flood of connections that never speak holds nothing for
 * long); when every pending client has spoken, the rest stay in the
 * backlog until the next call has settled those.
 */
static void accept_new(struct rpal_listener *l)
{
	uint64_t deadline = now_ns() + (uint64_t)rpal_g.cfg.handshake_ms * 1000000;

	for (;;) {
		struct epoll_event ev = { .events = EPOLLIN };
		int s;

		if (l->nr_pending == RPAL_PENDING_MAX) {
			int silent = pending_oldest_silent(l);

			if (silent < 0)
				return;
			pending_drop(l, (unsigned)silent);
		}
		s = accept4(l->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s < 0)
			return;
		ev.data.fd = s;
		epoll_ctl(l->fd, EPOLL_CTL_ADD, s, &ev);
		l->pending[l->nr_pending].fd = s;
		l->pending[l->nr_pending].deadline_ns = deadline;
		l->nr_pending++;
	}
}

RPAL_EXPORT int rpal_accept(int lfd, int flags)
{
	struct rpal_listener *l = (struct rpal_listener *)obj_get_kind(lfd, OBJ_LISTENER);
	int last_err = 0;

	if (!l)
		return rpal_fail(EBADF, "descriptor %d is not an rpal listener", lfd);
	if (flags_check("rpal_accept", flags, RPAL_NONBLOCK))
		return -EINVAL;
	for (;;) {
		uint64_t next = UINT64_MAX, now;
		struct epoll_event evs[8];
		unsigned i;
		int out, ret, timeout;

		accept_new(l);
		for (i = 0; i < l->nr_pending;) {
			unsigned before = l->nr_pending;
			ret = pending_step(l, i, &out);
			if (ret == 1) {
				if (l->st)
					stat_add_shared(&l->st->rx.msgs, 1);
				return out;
			}
			if (ret < 0) {
				if (l->st)
					stat_add_shared(&l->st->rx.violations, 1);
				last_err = ret;
			}
			if (l->nr_pending == before)
				i++;
		}
		for (i = 0; i < l->nr_pending; i++)
			if (l->pending[i].deadline_ns < next)
				next = l->pending[i].deadline_ns;
		pending_timer_arm(l, next);
		/* A refused or failed handshake is reported, as a failed accept(). */
		if (last_err)
			return last_err;
		if (flags & RPAL_NONBLOCK)
			return -EAGAIN;
		now = now_ns();
		timeout = next == UINT64_MAX ? -1 : next <= now ? 0 : (int)((next - now) / 1000000 + 1);
		if (epoll_wait(l->fd, evs, 8, timeout) < 0 && errno != EINTR)
			return rpal_fail(errno, "epoll_wait() on the listener failed");
	}
}

void listener_close(struct rpal_listener *l)
{
	pthread_mutex_lock(&rpal_g.lock);
	obj_clear(l->fd);
	if (l->st)
		stat_conn_close(l->st);
	pthread_mutex_unlock(&rpal_g.lock);
	while (l->nr_pending)
		pending_drop(l, 0);
	name_release(l, true);
	/* Clients not yet accepted may have sent messages, and descriptors
	 * with them, which closing the listening socket would release here. */
	for (int i = 0, s; i < 1024 && (s = accept4(l->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0; i++)
		peer_fd_close(s);
	close(l->sock);
	close(l->timer);
	close(l->fd);
	if (l->lockfd >= 0)
		close(l->lockfd);
	free(l->uids);
	free(l->gids);
	free(l);
}

static void listener_close_obj(struct rpal_obj *o)
{
	listener_close((struct rpal_listener *)o);
}

/* In a forked child: the socket and the name stay the parent's. */
static void listener_forget_child(struct rpal_obj *o)
{
	struct rpal_listener *l = (struct rpal_listener *)o;

	stat_conn_forget(l->st);
	close(l->sock);
	close(l->timer);
	if (l->lockfd >= 0)
		close(l->lockfd);
	for (unsigned k = 0; k < l->nr_pending; k++)
		close(l->pending[k].fd);
	free(l->uids);
	free(l->gids);
	free(l);
}

static void listener_hang_up(struct rpal_obj *o, int fd)
{
	(void)fd;
	shutdown(((struct rpal_listener *)o)->sock, SHUT_RDWR);
}

const struct rpal_obj_ops listener_ops = {
	.close = listener_close_obj,
	.forget_child = listener_forget_child,
	.hang_up = listener_hang_up,
};
