/* SPDX-License-Identifier: MIT */
/*
 * local.h - the seam between the connected core and hosted mode (call.c),
 * where a peer may be a program of our own process that a sender switches
 * into.  The core asks hosted mode only what is declared here.
 *
 * Built with RPAL_HOSTED=0 (cmake -DRPAL_HOSTED=OFF) each of these is a
 * constant: no peer is local, no set has a receiver to park, and the
 * compiler drops every hosted path, leaving a connected-only librpal with
 * no user-mode switch in it.  The park path of rpal_epoll_wait() lives in
 * epoll_park.h, included by epoll.c in the hosted build only.
 */
#ifndef RPAL_LOCAL_H
#define RPAL_LOCAL_H

#include <stdbool.h>
#include <unistd.h>

#ifndef RPAL_HOSTED
#define RPAL_HOSTED 1
#endif

struct rpal_config;
struct rpal_conn;
struct rpal_host_rcv;

/* What hosted mode asks of the core (init.c): hang up every connection of
 * a program that failed inside an RPAL call. */
void conn_hangup_all(void);

#if RPAL_HOSTED
int host_setup(struct rpal_config *cfg);        /* under `rpal run`: join the launcher's block */
bool host_active(void);                         /* this program is one of a host's */
bool pid_shares_our_memory(pid_t pid);          /* ourselves, or another program of our host */
void host_forget_child(void);                   /* a forked child is not */
void host_slot_claimed(unsigned slot);
void host_stat_attach(void);                    /* our statistics page takes our call counters */
int host_prog_of_slot(unsigned slot);           /* the program owning slot, or -1 */
bool host_prog_failed(int prog);
int call_deliver(struct rpal_conn *c, bool may_call);   /* run a parked local receiver */
struct rpal_host_rcv *call_rcv_create(int top);         /* where a set's waiter parks */
void call_rcv_retire(struct rpal_host_rcv *r);
bool call_from_producer(const struct rpal_conn *c);
void call_signal_allow_syscalls(void);         /* a signal handler inside a call */
#else
static inline int host_setup(struct rpal_config *cfg) { (void)cfg; return 0; }
static inline bool host_active(void) { return false; }
static inline bool pid_shares_our_memory(pid_t pid) { return pid == getpid(); }
static inline void host_forget_child(void) {}
static inline void host_slot_claimed(unsigned slot) { (void)slot; }
static inline void host_stat_attach(void) {}
static inline int host_prog_of_slot(unsigned slot) { (void)slot; return -1; }
static inline bool host_prog_failed(int prog) { (void)prog; return false; }
static inline int call_deliver(struct rpal_conn *c, bool may_call) { (void)c; (void)may_call; return 0; }
static inline struct rpal_host_rcv *call_rcv_create(int top) { (void)top; return NULL; }
static inline void call_rcv_retire(struct rpal_host_rcv *r) { (void)r; }
static inline bool call_from_producer(const struct rpal_conn *c) { (void)c; return false; }
static inline void call_signal_allow_syscalls(void) {}
#endif

#endif /* RPAL_LOCAL_H */
