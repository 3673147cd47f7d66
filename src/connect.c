/* SPDX-License-Identifier: MIT */
/*
 * connect.c - rpal_connect(): the client's half of the handshake.
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

/* ------------------------------------------------------------ connect */

static int wait_readable(int fd, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = now_ns();
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

RPAL_EXPORT int rpal_connect(const char *service, const struct rpal_policy *policy, int flags)
{
	unsigned char buf[sizeof(struct rpal_hello) + 16];
	struct sockaddr_un sa;
	struct rpal_hello h;
	struct rpal_geom g;
	struct rpal_block *me = NULL;
	struct rpal_conn *c;
	struct ucred uc;
	socklen_t salen;
	char lockpath[128], why[160];
	uint64_t deadline;
	int sock = -1, bell = -1, ring = -1, fds[3], nfds = 0, n, ret;

	if (flags)
		return rpal_fail(EINVAL, "rpal_connect: flags %#x not supported (pass 0)", (unsigned)flags);
	ret = policy_check(policy);
	if (ret)
		return ret;
	ret = rpal_ensure_init();
	if (ret)
		return ret;
	ret = service_addr(service, &sa, &salen, lockpath, sizeof(lockpath));
	if (ret)
		return ret;
	deadline = now_ns() + (uint64_t)rpal_g.cfg.handshake_ms * 1000000;
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return rpal_fail(errno, "socket() failed");
	/* A full backlog answers EAGAIN: retry until the handshake deadline. */
	while (connect(sock, (struct sockaddr *)&sa, salen) < 0) {
		if (errno == EAGAIN && now_ns() < deadline) {
			usleep(1000);
			continue;
		}
		bool abstract = !sa.sun_path[0];

		ret = rpal_fail(errno == EAGAIN ? ETIMEDOUT : errno, "cannot connect to service %s at %s%.*s", service,
				abstract ? "@" : "", (int)(salen - offsetof(struct sockaddr_un, sun_path) - abstract),
				sa.sun_path + abstract);
		goto fail;
	}
	ret = cred_check(sock, policy, &uc, why, sizeof(why));
	if (ret) {
		send_refuse(sock, -ret, why);
		ret = rpal_fail(-ret, "refused server of %s: %s", service, why);
		goto fail;
	}
	ret = side_create(&me, &bell, &ring);
	if (ret)
		goto fail;
	geom_self(&g);
	hello_fill(&h, &g, RPAL_HS_HELLO, me, service[0] == '/' ? NULL : service, RPAL_FEAT_WAKE_PAGE);
	fds[0] = rpal_g.memfd;
	fds[1] = ring;
	ret = hs_sendmsg(sock, &h, sizeof(h), fds, 2);
	close(ring);
	if (ret) {
		ret = rpal_fail(-ret, "cannot send hello to %s", service);
		goto fail;
	}
	ret = wait_readable(sock, deadline);
	if (ret) {
		ret = rpal_fail(-ret, "no answer from %s within %u ms", service, rpal_g.cfg.handshake_ms);
		goto fail;
	}
	n = hs_recvmsg(sock, buf, sizeof(buf), fds, 3, &nfds);
	if (n == -E2BIG || n == -EPROTO) {
		const char *what = n == -E2BIG ? "welcome carried more than 3 descriptors" : "welcome was truncated";

		send_refuse(sock, EPROTO, what);
		ret = rpal_fail(EPROTO, "bad welcome from %s: %s", service, what);
		goto fail;
	}
	if (n < 0) {
		ret = rpal_fail(n == -ECONNRESET ? ECONNREFUSED : -n, "%s closed the connection during the handshake", service);
		goto fail;
	}
	if (refuse_parse(buf, (size_t)n, &ret, why, sizeof(why)) == 0) {
		peer_fds_drop(fds, nfds);
		ret = rpal_fail(ret, "%s refused us: %s", service, why);
		goto fail;
	}
	ret = hello_accept(sock, buf, n, fds, nfds, RPAL_HS_WELCOME, &uc, me, bell, NULL, service, &c, why,
			   sizeof(why));
	if (ret) {
		send_refuse(sock, -ret, why);
		/* Out of memory or mappings is ours to fix, not the server's fault. */
		ret = rpal_fail(-ret, ret == -ENOMEM ? "cannot connect to %s: %s" : "bad welcome from %s: %s", service, why);
		goto fail;
	}
	return sock;
fail:
	if (bell >= 0)
		close(bell);
	if (me)
		block_destroy(me);
	peer_fd_close(sock);    /* the server's, and what it queued there */
	return ret;
}
