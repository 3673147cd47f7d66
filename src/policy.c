/* SPDX-License-Identifier: MIT */
/*
 * policy.c - who may connect (credential policies) and where a service lives
 * (its socket and lock file names).
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

/* ------------------------------------------------------------ policy */

int policy_check(const struct rpal_policy *p)
{
	if (p && p->nr_uids && !p->uids)
		return rpal_fail(EINVAL, "policy: nr_uids is %u but uids is NULL", p->nr_uids);
	if (p && p->nr_gids && !p->gids)
		return rpal_fail(EINVAL, "policy: nr_gids is %u but gids is NULL", p->nr_gids);
	return 0;
}

int policy_copy(struct rpal_listener *l, const struct rpal_policy *p)
{
	int ret;

	l->policy.allow_same_uid = 1;
	if (!p)
		return 0;
	ret = policy_check(p);
	if (ret)
		return ret;
	l->policy = *p;
	l->uids = NULL;
	l->gids = NULL;
	if (p->nr_uids) {
		l->uids = malloc(p->nr_uids * sizeof(uid_t));
		if (!l->uids)
			return -ENOMEM;
		memcpy(l->uids, p->uids, p->nr_uids * sizeof(uid_t));
	}
	if (p->nr_gids) {
		l->gids = malloc(p->nr_gids * sizeof(gid_t));
		if (!l->gids)
			return -ENOMEM;
		memcpy(l->gids, p->gids, p->nr_gids * sizeof(gid_t));
	}
	l->policy.uids = l->uids;
	l->policy.gids = l->gids;
	return 0;
}

/* Check SO_PEERCRED of sock against policy (NULL: same uid). */
int cred_check(int sock, const struct rpal_policy *p, struct ucred *uc, char *why, size_t whylen)
{
	socklen_t len = sizeof(*uc);
	unsigned i;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, uc, &len) < 0) {
		snprintf(why, whylen, "cannot read peer credentials");
		return -errno;
	}
	if ((!p || p->allow_same_uid) && uc->uid == geteuid())
		return 0;
	for (i = 0; p && i < p->nr_uids; i++)
		if (p->uids[i] == uc->uid)
			return 0;
	for (i = 0; p && i < p->nr_gids; i++)
		if (p->gids[i] == uc->gid)
			return 0;
	snprintf(why, whylen, "peer pid %d uid %u gid %u is not allowed by policy",
		 (int)uc->pid, (unsigned)uc->uid, (unsigned)uc->gid);
	return -EACCES;
}

/* ------------------------------------------------------------ names */

int service_addr(const char *service, struct sockaddr_un *sa, socklen_t *len, char *lockpath, size_t lplen)
{
	size_t n;
	int w;

	if (!service || !*service)
		return rpal_fail(EINVAL, "empty service name");
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	lockpath[0] = 0;
	if (service[0] == '@') {
		n = strlen(service);
		if (n > sizeof(sa->sun_path))
			return rpal_fail(ENAMETOOLONG, "service name %s is too long", service);
		memcpy(sa->sun_path + 1, service + 1, n - 1);
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
		return 0;
	}
	if (service[0] == '/')
		w = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", service);
	else if (strchr(service, '/'))
		return rpal_fail(EINVAL, "service name %s contains '/' (use an absolute path)", service);
	else
		w = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s.sock", rpal_g.rundir, service);
	if (w < 0 || (size_t)w >= sizeof(sa->sun_path))
		return rpal_fail(ENAMETOOLONG, "socket path for service %s is too long", service);
	snprintf(lockpath, lplen, "%s.lock", sa->sun_path);
	*len = sizeof(*sa);
	return 0;
}
