/* SPDX-License-Identifier: MIT */
/*
 * check_local.c - the seam of local.h, answered "not hosted", for the
 * layer checks of src/CMakeLists.txt only: a layer may call the layers
 * before it and what local.h declares, nothing else.  Never in librpal.
 */
#include "internal.h"

#if RPAL_HOSTED
int host_setup(struct rpal_config *cfg) { (void)cfg; return 0; }
bool host_active(void) { return false; }
bool pid_shares_our_memory(pid_t pid, unsigned slot) { (void)slot; return pid == getpid(); }
void host_forget_child(void) {}
void host_slot_claimed(unsigned slot) { (void)slot; }
bool host_slot_held(unsigned slot, pid_t except) { (void)slot; (void)except; return false; }
void host_stat_attach(void) {}
int host_prog_of(pid_t pid, unsigned slot) { (void)pid; (void)slot; return -1; }
bool host_prog_failed(int prog) { (void)prog; return false; }
int call_begin(struct rpal_conn *c, bool may_call, struct call_step *k) { (void)c; (void)may_call; (void)k; return 0; }
int call_end(struct call_step *k) { (void)k; return 1; }
void hosted_switch_wrfs(struct hosted_ctx *from, struct hosted_ctx *to) { (void)from; (void)to; }
struct rpal_host_rcv *call_rcv_create(int top) { (void)top; return NULL; }
void call_rcv_retire(struct rpal_host_rcv *r) { (void)r; }
void call_signal_allow_syscalls(void) {}
#endif
