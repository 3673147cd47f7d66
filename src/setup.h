/* SPDX-License-Identifier: MIT */
/*
 * setup.h - what the files that make and end connections share:
 *   init.c     the object table, init, fini, fork, rpal_close
 *   policy.c   credential policies and service names
 *   conn.c     the handshake's common half, peer death, close
 *   listen.c   rpal_listen, the server's half, rpal_accept
 *   connect.c  rpal_connect, the client's half
 */
#ifndef RPAL_SETUP_H
#define RPAL_SETUP_H

#include <sys/socket.h>
#include <sys/un.h>

#include "internal.h"

/* policy.c */
int policy_check(const struct rpal_policy *p);
int policy_copy(struct rpal_listener *l, const struct rpal_policy *p);
int cred_check(int sock, const struct rpal_policy *p, struct ucred *uc, char *why, size_t whylen);
int service_addr(const char *service, struct sockaddr_un *sa, socklen_t *len, char *lockpath, size_t lplen);

/* conn.c */
struct rpal_wake_page *wake_page_map(int fd);
struct rpal_wake_page *wake_page_create(int *fd);
int side_create(struct rpal_block **blk, int *bell, int *ring);
void send_refuse(int sock, int err, const char *why);
int hello_accept(int sock, const void *buf, int len, int *fds, int nfds, uint16_t type,
		 const struct ucred *uc, struct rpal_block *me, int bell, struct rpal_wake_page *page,
		 const char *service, struct rpal_conn **out, char *why, size_t whylen);
void conn_close(struct rpal_conn *c);

/* listen.c */
void listener_close(struct rpal_listener *l);

#endif /* RPAL_SETUP_H */
