/* SPDX-License-Identifier: MIT */
/*
 * snap.h - a snapshot of the statistics pages of rpal processes
 * (docs/PROTOCOL.md section 9), for `rpal stat` and `rpal top`.  Every
 * page is another process's memory: everything read from it is checked,
 * and a page that fails a check is skipped with a reason.
 */
#ifndef RPAL_CLI_SNAP_H
#define RPAL_CLI_SNAP_H

#include <stdint.h>
#include "../src/statpage.h"

struct snap_conn {
	uint64_t id;
	int32_t fd;
	uint32_t peer_pid, peer_uid, peer_gid, peer_slot;
	uint32_t flags, status;       /* RPAL_STAT_ACCEPTED..., RPAL_STAT_PEER_GONE... */
	int64_t since;
	char service[64];             /* printable ASCII only */
	uint64_t msgs_sent, msgs_received, bytes_sent, bytes_received;
	uint64_t wakeups_sent, wakeups_avoided, room_wakeups;
	uint64_t tx_sleeps, rx_sleeps, ring_full, tx_spin_ns, rx_spin_ns;
	uint64_t bufs_out, bufs_held, violations;
	uint64_t pair;                /* the same in the peer's entry (0: unknown) */
	/* Messages the peer sent that this end has not received, and the
	 * reverse, from the peer's entry in the same snapshot (pages read a
	 * moment apart: never below 0); -1 where that entry is not there. */
	int64_t in_queue, out_queue;
};

/* A service the process listens on (RPAL_STAT_LISTEN). */
struct snap_listener {
	uint64_t id;
	int32_t fd;
	int64_t since;
	char service[64];             /* printable ASCII only */
	uint64_t accepted, refused;   /* connections accepted; handshakes refused or failed */
};

/* Listeners the outputs list of one process; more are counted, not listed
 * (a snapshot keeps them all, so that a service selects any of them). */
#define SNAP_LISTENERS_MAX 16

struct snap_proc {
	char path[300];               /* the page */
	char dir[256];                /* its runtime directory, printable ASCII only */
	uint32_t pid, uid, slot, flags;
	uint32_t nr_open, overflow;   /* open connections; of them, those without an entry */
	int64_t started;
	uint64_t init_mono_ns;        /* CLOCK_MONOTONIC at its rpal_init() */
	/* Hosted programs (RPAL_STAT_HOSTED): RPAL calls into it and made by its
	 * threads, system calls handed back to it, its code's time on callers' threads. */
	uint64_t calls_in, calls_out, handoffs, callee_ns;
	/* What its adaptive wait counts for a sleep and a wake-up (0: none sampled). */
	uint32_t sleep_cost_ns, wake_cost_ns, wake_lat_ns;
	char name[64];                /* printable ASCII only */
	struct snap_conn *conns;
	unsigned nconns;
	struct snap_listener *listeners;
	unsigned nlisteners;
	unsigned busy;                /* entries skipped: rewritten during every try */
};

/* How many of p's listeners the outputs list, and how many they only count. */
static inline unsigned snap_listeners_listed(const struct snap_proc *p)
{
	return p->nlisteners < SNAP_LISTENERS_MAX ? p->nlisteners : SNAP_LISTENERS_MAX;
}

static inline unsigned snap_listeners_unlisted(const struct snap_proc *p)
{
	return p->nlisteners - snap_listeners_listed(p);
}

struct snap_skip {
	char path[300];               /* printable ASCII only */
	char why[160];
};

struct snap {
	struct snap_proc *procs;
	unsigned nprocs;
	struct snap_skip *skips;      /* pages that are not what they claim */
	unsigned nskips;
	unsigned stale;               /* pages of dead owners: skipped (removed where we could) */
	/* Where snap_take() looked (printable ASCII only), for a message that
	 * finds nothing: a process of another RPAL_RUNTIME_DIR is not there. */
	char looked[300];
	/* The files read (private to snap.c): a set of (st_dev, st_ino), so
	 * that a file linked into several directories is read once. */
	struct snap_file *files;
	size_t nfiles, files_cap;
};

/* Where to look: dirs[0..n) once each; NULL: this user's runtime directory,
 * and, for root, every user's under /run/user and /tmp. */
struct snap_where {
	const char *dir;              /* --dir, or NULL */
};

/* Read every page.  0, or -errno when nothing could be listed (the reason
 * in why). */
int snap_take(const struct snap_where *w, struct snap *s, char *why, size_t whylen);
void snap_free(struct snap *s);
/* This user's runtime directory, resolved as rpal_init() does. */
void snap_default_dir(char *out, size_t len);
/* Parse one page (fd open on it, for path); 0 or -errno with why.  For tests
 * of the checks and for snap_take(). */
int snap_read_page(int fd, const char *path, struct snap_proc *p, char *why, size_t whylen);

/* The runtime directory of the statistics page that pid maps (printable
 * ASCII only): 0, or -1 where it maps none or its mappings cannot be read.
 * For a process started with another RPAL_RUNTIME_DIR. */
int snap_page_dir(long pid, char *dir, size_t len);

/* Selection from the command line: a pid (all digits) or a service name. */
struct snap_filter {
	long pid;                     /* -1: any */
	const char *service;          /* NULL: any; else name, as a page shows it */
	char name[64];
};
int snap_filter_parse(const char *arg, struct snap_filter *f);
/* Drop what the filter does not select. */
void snap_select(struct snap *s, const struct snap_filter *f);
void snap_proc_free(struct snap_proc *p);     /* what snap_read_page() allocated */

/* Command entry points (main.c). */
int cmd_stat(int argc, char **argv);
int cmd_top(int argc, char **argv);

#endif
