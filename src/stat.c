/* SPDX-License-Identifier: MIT */
/*
 * stat.c - the statistics page (statpage.h): "<runtime_dir>/stat.<slot>",
 * mapped shared, one entry per open connection.  Counters are bumped in
 * place, so an observer reads them without a word to this process.
 *
 * The file is made under a temporary name, locked (flock, LOCK_EX) and
 * filled, then renamed into place: a reader never sees it half written,
 * and the lock, which the kernel drops with our last reference to the
 * open file (descriptor or mapping), tells it whether we are alive.  A
 * stale page of a dead owner is replaced by the next owner of the slot,
 * which we hold (region.c) for as long as the page exists.
 *
 * Without a page (the runtime directory refuses it, or it is full) each
 * connection keeps its counters in a private entry: rpal_conn_stats()
 * and rpal_conn_info() still work, only observers cannot see them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* The first file: header and 15 entries, one page. */
#define STAT_FIRST_ENTRIES 15u

static uint64_t map_size(void)
{
	return rpal_stat_size(RPAL_STAT_MAX_CONNS);
}

static int64_t realtime_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

/* Make and publish our page.  Without one, counters stay private. */
void stat_setup(void)
{
	char tmp[sizeof(rpal_g.statpath) + 8];
	struct rpal_stat_hdr *h;
	void *p;
	int fd, n;

	rpal_g.stat_ns0 = now_ns();
	rpal_g.stat_tsc0 = cycles_now();
	n = snprintf(rpal_g.statpath, sizeof(rpal_g.statpath), "%s/" RPAL_STAT_PREFIX "%u", rpal_g.rundir,
		     rpal_g.slot);
	if (n < 0 || (size_t)n >= sizeof(rpal_g.statpath))
		goto none;
	snprintf(tmp, sizeof(tmp), "%s.new", rpal_g.statpath);
	/* A leftover of a crash of the slot's previous owner is ours to replace. */
	unlink(tmp);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		goto none;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 || ftruncate(fd, (off_t)rpal_stat_size(STAT_FIRST_ENTRIES)) < 0)
		goto fail;
	/* The whole of what it may grow to: growing is ftruncate() alone,
	 * and entries never move under the connections that point at them. */
	p = mmap(NULL, map_size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	/* A forked child must neither write it nor keep it alive (see
	 * stat_forget_child()). */
	madvise(p, map_size(), MADV_DONTFORK);
	h = p;
	h->version = RPAL_STAT_VERSION;
	h->hdr_size = sizeof(*h);
	h->entry_size = sizeof(struct rpal_stat_conn);
	h->pid = (uint32_t)getpid();
	h->uid = (uint32_t)geteuid();
	h->slot = rpal_g.slot;
	h->flags = host_active() ? RPAL_STAT_HOSTED : 0;
	h->started = realtime_s();
	h->clock_ns = rpal_g.stat_ns0;
	h->clock_tsc = rpal_g.stat_tsc0;
	snprintf(h->name, sizeof(h->name), "%s", program_invocation_short_name);
	store_relaxed(&h->nr_entries, STAT_FIRST_ENTRIES);
	h->magic = RPAL_STAT_MAGIC;
	if (rename(tmp, rpal_g.statpath) < 0) {
		munmap(p, map_size());
		goto fail;
	}
	rpal_g.statfd = fd;
	rpal_g.stat = h;
	rpal_g.stat_free = 0;
	return;
fail:
	close(fd);
	unlink(tmp);
none:
	rpal_g.statpath[0] = '\0';
}

/* rpal_fini(): we still own the slot, so the name is still our file. */
void stat_teardown(void)
{
	struct rpal_stat_hdr *h = rpal_g.stat;

	if (!h)
		return;
	unlink(rpal_g.statpath);
	rpal_g.stat = NULL;
	host_stat_attach();
	/* Hosted: another program's thread may be copying our call counters
	 * into the page right now; the mapping stays, as our arena does. */
	if (!host_active())
		munmap(h, map_size());
	close(rpal_g.statfd);
	rpal_g.statfd = -1;
	rpal_g.statpath[0] = '\0';
}

/* In a forked child: the mapping is not here (MADV_DONTFORK), and our copy
 * of the descriptor would keep the parent's lock after the parent dies. */
void stat_forget_child(void)
{
	if (rpal_g.statfd >= 0)
		close(rpal_g.statfd);
	rpal_g.statfd = -1;
	rpal_g.stat = NULL;
	rpal_g.statpath[0] = '\0';
}

static struct rpal_stat_conn *entry_at(uint32_t i)
{
	return (struct rpal_stat_conn *)((char *)rpal_g.stat + sizeof(struct rpal_stat_hdr)) + i;
}

static bool in_page(const struct rpal_stat_conn *e)
{
	return rpal_g.stat && e >= entry_at(0) && e < entry_at(RPAL_STAT_MAX_CONNS);
}

/* A free entry of the page, growing the file if need be; NULL when full. */
static struct rpal_stat_conn *entry_find(void)
{
	uint32_t n = load_relaxed(&rpal_g.stat->nr_entries), i, more;

	for (i = rpal_g.stat_free; i < n; i++)
		if (entry_at(i)->state == RPAL_STAT_FREE)
			return rpal_g.stat_free = i + 1, entry_at(i);
	if (n >= RPAL_STAT_MAX_CONNS)
		return NULL;
	more = n * 2 + 1 < RPAL_STAT_MAX_CONNS ? n * 2 + 1 : RPAL_STAT_MAX_CONNS;
	if (ftruncate(rpal_g.statfd, (off_t)rpal_stat_size(more)) < 0)
		return NULL;
	/* After the file grew: a reader that sees the count may read that far. */
	store_release(&rpal_g.stat->nr_entries, more);
	rpal_g.stat_free = n + 1;
	return entry_at(n);
}

/*
 * An entry for a new connection, or a listener where id->state is
 * RPAL_STAT_LISTEN, filled in with id's identity and zeroed counters; a
 * private one when the page has no room (or there is no page).  NULL only
 * when memory is exhausted.  Caller holds rpal_g.lock.
 */
struct rpal_stat_conn *stat_conn_open(const struct rpal_stat_conn *id)
{
	struct rpal_stat_conn *e = rpal_g.stat ? entry_find() : NULL;
	bool conn = id->state != RPAL_STAT_LISTEN;
	uint32_t seq;

	if (!e) {
		e = aligned_alloc(64, sizeof(*e));
		if (!e)
			return NULL;
		memset(e, 0, sizeof(*e));
		if (rpal_g.stat && conn)
			atomic_fetch_add_explicit(&rpal_g.stat->overflow, 1, memory_order_relaxed);
	}
	/* Odd while the identity changes (readers retry); the release fence
	 * keeps the stores below after it. */
	seq = load_relaxed(&e->seq);
	store_relaxed(&e->seq, seq + 1);
	atomic_thread_fence(memory_order_release);
	e->state = conn ? RPAL_STAT_OPEN : RPAL_STAT_LISTEN;
	e->id = ++rpal_g.stat_ids;
	e->fd = id->fd;
	e->peer_pid = id->peer_pid;
	e->peer_uid = id->peer_uid;
	e->peer_gid = id->peer_gid;
	e->peer_slot = id->peer_slot;
	e->flags = id->flags;
	e->since = realtime_s();
	store_relaxed(&e->status, 0);
	memcpy(e->service, id->service, sizeof(e->service));
	e->service[sizeof(e->service) - 1] = '\0';
	e->pair = id->pair;
	memset(&e->tx, 0, sizeof(e->tx));
	memset(&e->rx, 0, sizeof(e->rx));
	store_release(&e->seq, seq + 2);
	if (rpal_g.stat && in_page(e) && conn)
		atomic_fetch_add_explicit(&rpal_g.stat->nr_open, 1, memory_order_relaxed);
	return e;
}

/* The connection (or listener) is closed: its entry is free for the next.
 * Caller holds rpal_g.lock. */
void stat_conn_close(struct rpal_stat_conn *e)
{
	bool conn = e->state == RPAL_STAT_OPEN;
	uint32_t seq, i;

	if (!in_page(e)) {
		if (rpal_g.stat && conn)
			atomic_fetch_sub_explicit(&rpal_g.stat->overflow, 1, memory_order_relaxed);
		free(e);
		return;
	}
	seq = load_relaxed(&e->seq);
	store_relaxed(&e->seq, seq + 1);
	atomic_thread_fence(memory_order_release);
	e->state = RPAL_STAT_FREE;
	store_release(&e->seq, seq + 2);
	if (conn)
		atomic_fetch_sub_explicit(&rpal_g.stat->nr_open, 1, memory_order_relaxed);
	i = (uint32_t)(e - entry_at(0));
	if (i < rpal_g.stat_free)
		rpal_g.stat_free = i;
}

/* In a forked child: a private entry is ours to free; the page is not
 * mapped here, so nothing of it is touched. */
void stat_conn_forget(struct rpal_stat_conn *e)
{
	if (e && !in_page(e))
		free(e);
}

/* The adaptive wait's cost of a sleep, or of a wake-up, for observers. */
void stat_note_cost(bool wake, uint32_t ns)
{
	struct rpal_stat_hdr *h = rpal_g.stat;

	if (h)
		store_relaxed(wake ? &h->wake_cost_ns : &h->sleep_cost_ns, ns ? ns : 1);
}

/* The wake-up latency its sleepers measure, for observers. */
void stat_note_wake_lat(uint32_t ns)
{
	struct rpal_stat_hdr *h = rpal_g.stat;

	if (h)
		store_relaxed(&h->wake_lat_ns, ns ? ns : 1);
}

/* Spin cycles of a counter to ns, for rpal_conn_stats(). */
uint64_t stat_spin_ns(uint64_t cycles)
{
	uint64_t ns = now_ns(), tsc = cycles_now();

	return rpal_stat_tsc_ns(cycles, rpal_g.stat_ns0, rpal_g.stat_tsc0, ns, tsc);
}
