/* SPDX-License-Identifier: MIT */
/*
 * init.c - the object table (rpal descriptors to objects), init, fini, fork,
 * rpal_close() and process-wide statistics.
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

/* ------------------------------------------------------------ objects */
struct rpal_obj *_Atomic *_Atomic obj_top[OBJ_TOP];

/* Caller holds rpal_g.lock. */
int obj_set(int fd, struct rpal_obj *obj)
{
	struct rpal_obj *_Atomic *chunk;

	if (fd < 0 || fd >= OBJ_CHUNK * OBJ_TOP)
		return -EMFILE;
	chunk = atomic_load_explicit(&obj_top[fd / OBJ_CHUNK], memory_order_acquire);
	if (!chunk) {
		chunk = calloc(OBJ_CHUNK, sizeof(*chunk));
		if (!chunk)
			return -ENOMEM;
		atomic_store_explicit(&obj_top[fd / OBJ_CHUNK], chunk, memory_order_release);
	}
	atomic_store_explicit(&chunk[fd % OBJ_CHUNK], obj, memory_order_release);
	return 0;
}

void obj_clear(int fd)
{
	struct rpal_obj *_Atomic *chunk;

	if (fd < 0 || fd >= OBJ_CHUNK * OBJ_TOP)
		return;
	chunk = atomic_load_explicit(&obj_top[fd / OBJ_CHUNK], memory_order_acquire);
	if (chunk)
		atomic_store_explicit(&chunk[fd % OBJ_CHUNK], NULL, memory_order_release);
}

int conn_get_failed(int fd)
{
	return rpal_fail(ENOTCONN, "descriptor %d is not an rpal connection", fd);
}

/* ------------------------------------------------------------ init */

static void atfork_child(void);

static int init_locked(const struct rpal_config *cfg)
{
	static bool atfork_done;
	int ret;

	if (cfg)
		rpal_g.cfg = *cfg;
	else
		rpal_config_default(&rpal_g.cfg);
	/* Under `rpal run`: the launcher's region, shared by all programs. */
	ret = host_setup(&rpal_g.cfg);
	if (ret)
		return ret;
	ret = rpal_config_check(&rpal_g.cfg);
	if (ret)
		return ret;
	ret = mpk_setup(rpal_g.cfg.protect_peers);
	if (ret)
		return ret;
	ret = region_setup();
	if (ret) {
		mpk_teardown();
		return ret;
	}
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, atfork_child);
		/* A hosted program's exit does not end the process: hang up
		 * its connections then, as a process exit would. */
		if (host_active())
			atexit(rpal_fini);
		atfork_done = true;
	}
	rpal_g.inited = true;
	return 0;
}

RPAL_EXPORT int rpal_init(const struct rpal_config *cfg)
{
	int ret;

	pthread_mutex_lock(&rpal_g.lock);
	ret = rpal_g.inited ? rpal_fail(EALREADY, "rpal_init: already initialised") : init_locked(cfg);
	pthread_mutex_unlock(&rpal_g.lock);
	return ret;
}

int rpal_ensure_init(void)
{
	int ret = 0;

	if (likely(rpal_g.inited))
		return 0;
	pthread_mutex_lock(&rpal_g.lock);
	if (!rpal_g.inited)
		ret = init_locked(NULL);
	pthread_mutex_unlock(&rpal_g.lock);
	return ret;
}

/* Call fn for every object in the table: its descriptor and table slot. */
void obj_walk(void (*fn)(int fd, struct rpal_obj *_Atomic *slot))
{
	int top, i;

	for (top = 0; top < OBJ_TOP; top++) {
		struct rpal_obj *_Atomic *chunk = atomic_load(&obj_top[top]);
		if (!chunk)
			continue;
		for (i = 0; i < OBJ_CHUNK; i++)
			if (atomic_load(&chunk[i]))
				fn(top * OBJ_CHUNK + i, &chunk[i]);
	}
}

static void close_one(int fd, struct rpal_obj *_Atomic *slot)
{
	(void)slot;
	rpal_close(fd);
}

/* Close every rpal object we know of. */
static void close_all(void)
{
	obj_walk(close_one);
}

/*
 * Hosted mode: this program failed inside an RPAL call and its thread is
 * about to end.  Hang up every connection so that peers see it at once;
 * nothing else is touched (the failed code may have left locks held).
 */
static const struct rpal_obj_ops *const kind_ops[OBJ_NR_KINDS] = {
	[OBJ_CONN] = &conn_ops,
	[OBJ_LISTENER] = &listener_ops,
	[OBJ_EPOLL] = &epoll_ops,
};

static void hang_up_one(int fd, struct rpal_obj *_Atomic *slot)
{
	struct rpal_obj *o = atomic_load(slot);

	if (kind_ops[o->kind]->hang_up)
		kind_ops[o->kind]->hang_up(o, fd);
}

void conn_hangup_all(void)
{
	obj_walk(hang_up_one);
}

RPAL_EXPORT void rpal_fini(void)
{
	if (!rpal_g.inited)
		return;
	close_all();
	watch_stop();
	linger_sweep(true);
	pthread_mutex_lock(&rpal_g.lock);
	region_teardown();
	rpal_g.inited = false;
	pthread_mutex_unlock(&rpal_g.lock);
}

/*
 * A forked child inherits none of the region (MADV_DONTFORK) and must not
 * use, or keep open, the parent's connections: close our descriptors, free
 * our private copies of the bookkeeping (never touching arena memory, which
 * the child does not map), and let it rpal_init() afresh.  The slot lock's
 * open file description stays the parent's (closing our copy keeps it).
 */
static void forget_one(int fd, struct rpal_obj *_Atomic *slot)
{
	struct rpal_obj *o = atomic_load(slot);

	atomic_store(slot, NULL);
	kind_ops[o->kind]->forget_child(o);
	close(fd);
}

static void atfork_child(void)
{
	pthread_mutex_init(&rpal_g.lock, NULL);
	lock_init(&rpal_g.alloc_lock);
	watch_forget_child();
	host_forget_child();    /* not one of the launcher's programs any more */
	obj_walk(forget_one);
	while (rpal_g.lingering) {
		struct rpal_linger *l = rpal_g.lingering;
		rpal_g.lingering = l->next;
		close(l->sock);
		bufset_free(&l->out);
		free(l);
	}
	stat_forget_child();
	/* The region is not mapped here (MADV_DONTFORK): unmapping it is a no-op. */
	region_teardown();
	memset(&rpal_g.cfg, 0, sizeof(rpal_g.cfg));
	rpal_g.inited = false;
	rpal_g.nr_conns = 0;
}

/* ------------------------------------------------------------ close */

RPAL_EXPORT int rpal_close(int fd)
{
	struct rpal_obj *o = obj_get(fd);

	if (!o)
		return close(fd) < 0 ? -errno : 0;
	kind_ops[o->kind]->close(o);
	return 0;
}

/* ------------------------------------------------------------ stats */

RPAL_EXPORT int rpal_stats(struct rpal_stats *st)
{
	struct rpal_peer *p;

	if (!rpal_g.inited)
		return rpal_fail(ENOTCONN, "rpal_stats: rpal_init() has not been called");
	if (!st)
		return rpal_fail(EINVAL, "rpal_stats: st is NULL");
	linger_sweep(false);
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&rpal_g.lock);
	st->slot = rpal_g.slot;
	st->arena_base = rpal_g.arena;
	st->arena_size = rpal_g.cfg.arena_size;
	st->nr_conns = rpal_g.nr_conns;
	memcpy(st->runtime_dir, rpal_g.rundir, sizeof(st->runtime_dir));
	for (p = rpal_g.peers; p; p = p->next)
		st->nr_peers_mapped++;
	pthread_mutex_unlock(&rpal_g.lock);
	lock_take(&rpal_g.alloc_lock);
	st->arena_used = alloc_used(rpal_g.alloc);
	st->bufs_in_use = alloc_nr_blocks(rpal_g.alloc);
	lock_give(&rpal_g.alloc_lock);
	return 0;
}
