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
#include <stdint.h>
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
bool pid_shares_our_memory(pid_t pid, unsigned slot); /* ourselves, or the program of our host that
							 * holds slot */
void host_forget_child(void);                   /* a forked child is not */
void host_slot_claimed(unsigned slot);
bool host_slot_held(unsigned slot, pid_t except); /* a running program other than pid has
						   * its arena at slot */
void host_stat_attach(void);                    /* our statistics page takes our call counters */
int host_prog_of(pid_t pid, unsigned slot);    /* the program of process pid at slot, or -1 */
bool host_prog_failed(int prog);

/*
 * An RPAL call in steps, so that the switch runs in the frame of the
 * public function that sent (rpal_send, through the inline notify_rx):
 * every frame between that function and the switch costs a mispredicted
 * return on each side of the call, as the switch leaves the other stack's
 * return addresses in the CPU's return stack buffer.  call_begin() claims
 * the receiver, the caller switches, call_end() gives it back or asks for
 * another pass.  The fields are call.c's.
 */
struct hosted_ctx;
struct rpal_host_sender;
struct call_step {
	struct hosted_ctx *from, *to; /* the switch: sender's context, receiver's */
	struct rpal_conn *c;
	struct rpal_host_rcv *r;
	struct rpal_host_sender *s;
	uint64_t calls, tsc0, ran;
	uint32_t pkru;
};
#define CALL_SWITCH 2
int call_begin(struct rpal_conn *c, bool may_call, struct call_step *k);
int call_end(struct call_step *k);
void hosted_switch_wrfs(struct hosted_ctx *from, struct hosted_ctx *to);

/* Run a parked local receiver after publishing to it.  1: it ran (or will
 * rescan without a wake-up); 0: use the connected-mode wake-up check too;
 * <0: the receiving program failed. */
static inline __attribute__((always_inline)) int call_deliver(struct rpal_conn *c, bool may_call)
{
	struct call_step k;
	int ret = call_begin(c, may_call, &k);

	while (ret == CALL_SWITCH) {
		hosted_switch_wrfs(k.from, k.to);
		ret = call_end(&k);
	}
	return ret;
}

struct rpal_host_rcv *call_rcv_create(int top);         /* where a set's waiter parks */
void call_rcv_retire(struct rpal_host_rcv *r);
void call_signal_allow_syscalls(void);         /* a signal handler inside a call */
#else
static inline int host_setup(struct rpal_config *cfg) { (void)cfg; return 0; }
static inline bool host_active(void) { return false; }
static inline bool pid_shares_our_memory(pid_t pid, unsigned slot) { (void)slot; return pid == getpid(); }
static inline void host_forget_child(void) {}
static inline void host_slot_claimed(unsigned slot) { (void)slot; }
static inline bool host_slot_held(unsigned slot, pid_t except) { (void)slot; (void)except; return false; }
static inline void host_stat_attach(void) {}
static inline int host_prog_of(pid_t pid, unsigned slot) { (void)pid; (void)slot; return -1; }
static inline bool host_prog_failed(int prog) { (void)prog; return false; }
static inline int call_deliver(struct rpal_conn *c, bool may_call) { (void)c; (void)may_call; return 0; }
static inline struct rpal_host_rcv *call_rcv_create(int top) { (void)top; return NULL; }
static inline void call_rcv_retire(struct rpal_host_rcv *r) { (void)r; }
static inline void call_signal_allow_syscalls(void) {}
#endif

#endif /* RPAL_LOCAL_H */
