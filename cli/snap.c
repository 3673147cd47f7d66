/* SPDX-License-Identifier: MIT */
/*
 * snap.c - read the statistics pages of rpal processes (snap.h).
 *
 * A page is found by name in a runtime directory, judged alive by its lock
 * (the owner holds flock(LOCK_EX) for as long as it has the file open or
 * mapped), mapped read-only and copied out: each entry between two equal,
 * even reads of its seq, with 8-byte loads, so that no counter is torn.
 * The copies run under rpal_access_safely(): a page truncated under us
 * raises SIGBUS, which becomes an error for that page alone.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <signal.h>
#include <stdbool.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include <rpal.h>

#include "../src/rundir.h"
#include "snap.h"
#include "tsc.h"

#define PID_LIMIT 4194304u   /* the kernel's PID_MAX_LIMIT */

void snap_default_dir(char *out, size_t len)
{
	if (rpal_runtime_dir(NULL, out, len) < 0 && len)
		out[0] = 0;
}

/* A string from the page: up to the first NUL or the field's end, every
 * byte outside printable ASCII shown as '?'. */
static void clean_string(char *dst, const char *src, size_t n)
{
	size_t i;

	for (i = 0; i + 1 < n && src[i]; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	dst[i] = '\0';
}

struct copy {
	const unsigned char *src;     /* in the page: 8-byte aligned */
	uint64_t *dst;
	size_t words;
	int tries;                    /* entries: how often seq may change under us */
	const _Atomic uint32_t *seq;  /* NULL: a plain copy (the header) */
};

static void copy_words(const struct copy *c)
{
	const uint64_t *s = (const uint64_t *)(const void *)c->src;
	size_t i;

	for (i = 0; i < c->words; i++)
		c->dst[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

/* 1: copied; 0: seq kept changing (or stayed odd); -EFAULT via the caller. */
static int copy_fn(void *arg)
{
	const struct copy *c = arg;
	int t;

	if (!c->seq) {
		copy_words(c);
		return 1;
	}
	for (t = 0; t < c->tries; t++) {
		uint32_t s0 = atomic_load_explicit(c->seq, memory_order_acquire), s1;

		if (s0 & 1)
			continue;
		copy_words(c);
		atomic_thread_fence(memory_order_acquire);
		s1 = atomic_load_explicit(c->seq, memory_order_relaxed);
		if (s0 == s1)
			return 1;
	}
	return 0;
}

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -EPROTO)

/* h's clock pair and one of ours, taken together: spin cycles to ns. */
struct tsc_ns {
	uint64_t ns0, tsc0, ns1, tsc1;
};

static void conn_from_entry(struct snap_conn *o, const struct rpal_stat_conn *e, const struct tsc_ns *t)
{
	memset(o, 0, sizeof(*o));
	o->id = e->id;
	o->fd = e->fd;
	o->peer_pid = e->peer_pid;
	o->peer_uid = e->peer_uid;
	o->peer_gid = e->peer_gid;
	o->peer_slot = e->peer_slot;
	o->flags = e->flags;
	o->status = atomic_load_explicit(&e->status, memory_order_relaxed);
	o->since = e->since;
	clean_string(o->service, e->service, sizeof(o->service));
	o->pair = e->pair;
	o->in_queue = o->out_queue = -1;
#define C(f) atomic_load_explicit(&e->f, memory_order_relaxed)
	o->msgs_sent = C(tx.msgs);
	o->msgs_received = C(rx.msgs);
	o->bytes_sent = C(tx.bytes);
	o->bytes_received = C(rx.bytes);
	o->wakeups_sent = C(tx.wakeups);
	o->wakeups_avoided = C(tx.wakeups_avoided);
	o->room_wakeups = C(rx.wakeups);
	o->tx_sleeps = C(tx.sleeps);
	o->rx_sleeps = C(rx.sleeps);
	o->ring_full = C(tx.ring_full);
	o->tx_spin_ns = rpal_stat_tsc_ns(C(tx.spin_tsc), t->ns0, t->tsc0, t->ns1, t->tsc1);
	o->rx_spin_ns = rpal_stat_tsc_ns(C(rx.spin_tsc), t->ns0, t->tsc0, t->ns1, t->tsc1);
	o->bufs_out = C(tx.bufs_out);
	o->bufs_held = C(rx.bufs_held);
	o->violations = C(rx.violations);
#undef C
}

void snap_proc_free(struct snap_proc *p)
{
	free(p->conns);
	free(p->listeners);
	p->conns = NULL;
	p->listeners = NULL;
}

static void listener_from_entry(struct snap_listener *o, const struct rpal_stat_conn *e)
{
	memset(o, 0, sizeof(*o));
	o->id = e->id;
	o->fd = e->fd;
	o->since = e->since;
	clean_string(o->service, e->service, sizeof(o->service));
	o->accepted = atomic_load_explicit(&e->rx.msgs, memory_order_relaxed);
	o->refused = atomic_load_explicit(&e->rx.violations, memory_order_relaxed);
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* An owner numbers its connections and listeners once each: a page that
 * lists one twice lies, and would make every output name two alike (the
 * Prometheus text format refuses a series given twice). */
static int unique_ids(const struct snap_proc *p, char *why, size_t whylen)
{
	unsigned i, n = p->nconns + p->nlisteners;
	uint64_t *ids;
	int ret = 0;

	if (n < 2)
		return 0;
	ids = malloc(n * sizeof(*ids));
	if (!ids)
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	for (i = 0; i < p->nconns; i++)
		ids[i] = p->conns[i].id;
	for (i = 0; i < p->nlisteners; i++)
		ids[p->nconns + i] = p->listeners[i].id;
	qsort(ids, n, sizeof(*ids), id_cmp);
	for (i = 1; i < n && !ret; i++)
		if (ids[i] == ids[i - 1])
			ret = WHY("connection or listener %llu in two entries", (unsigned long long)ids[i]);
	free(ids);
	return ret;
}

int snap_read_page(int fd, const char *path, struct snap_proc *p, char *why, size_t whylen)
{
	_Alignas(64) struct rpal_stat_hdr h;
	_Alignas(64) struct rpal_stat_conn e;
	struct copy c = { .dst = (uint64_t *)(void *)&h, .words = sizeof(h) / 8 };
	struct tsc_ns tn;
	struct timespec ts;
	struct stat st;
	uint64_t n, room, i;
	unsigned char *m;
	int ret = 0;

	memset(p, 0, sizeof(*p));
	snprintf(p->path, sizeof(p->path), "%s", path);
	if (fstat(fd, &st) < 0)
		return snprintf(why, whylen, "fstat: %s", strerror(errno)), -errno;
	if (!S_ISREG(st.st_mode))
		return WHY("not a regular file");
	if ((uint64_t)st.st_size < sizeof(h))
		return WHY("%lld bytes: shorter than a header", (long long)st.st_size);
	if ((uint64_t)st.st_size > rpal_stat_size(RPAL_STAT_MAX_CONNS))
		return WHY("%lld bytes: larger than any statistics page", (long long)st.st_size);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return snprintf(why, whylen, "mmap: %s", strerror(errno)), -errno;
	c.src = m;
	if (rpal_access_safely(copy_fn, &c) < 0) {
		ret = WHY("truncated while read");
		goto out;
	}
	if (h.magic != RPAL_STAT_MAGIC) {
		ret = WHY("bad magic %#x", h.magic);
		goto out;
	}
	if (h.version != RPAL_STAT_VERSION) {
		ret = WHY("version %u; this rpal reads version %u", h.version, RPAL_STAT_VERSION);
		goto out;
	}
	if (h.hdr_size != sizeof(h) || h.entry_size != sizeof(e)) {
		ret = WHY("header of %u bytes and entries of %u; version %u has %zu and %zu", h.hdr_size,
			  h.entry_size, RPAL_STAT_VERSION, sizeof(h), sizeof(e));
		goto out;
	}
	if (h.pid == 0 || h.pid > PID_LIMIT) {
		ret = WHY("pid %u out of range", h.pid);
		goto out;
	}
	tn.ns0 = h.clock_ns;
	tn.tsc0 = h.clock_tsc;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	tn.tsc1 = tsc_read();
	tn.ns1 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	p->pid = h.pid;
	p->uid = h.uid;
	p->slot = h.slot;
	p->flags = h.flags;
	p->started = h.started;
	p->init_mono_ns = h.clock_ns;
	/* The page counts those with an entry and those without apart. */
	p->overflow = atomic_load_explicit(&h.overflow, memory_order_relaxed);
	p->nr_open = atomic_load_explicit(&h.nr_open, memory_order_relaxed) + p->overflow;
	if (p->nr_open < p->overflow)
		p->nr_open = UINT32_MAX;
	p->sleep_cost_ns = atomic_load_explicit(&h.sleep_cost_ns, memory_order_relaxed);
	p->wake_cost_ns = atomic_load_explicit(&h.wake_cost_ns, memory_order_relaxed);
	p->wake_lat_ns = atomic_load_explicit(&h.wake_lat_ns, memory_order_relaxed);
	if (p->flags & RPAL_STAT_HOSTED) {
		p->calls_in = atomic_load_explicit(&h.calls_in, memory_order_relaxed);
		p->calls_out = atomic_load_explicit(&h.calls_out, memory_order_relaxed);
		p->handoffs = atomic_load_explicit(&h.handoffs, memory_order_relaxed);
		p->callee_ns = rpal_stat_tsc_ns(atomic_load_explicit(&h.callee_tsc, memory_order_relaxed),
						tn.ns0, tn.tsc0, tn.ns1, tn.tsc1);
	}
	clean_string(p->name, h.name, sizeof(p->name));

	/* Entries: no more than the header claims, the file holds, or any
	 * page may have. */
	n = atomic_load_explicit(&h.nr_entries, memory_order_relaxed);
	room = ((uint64_t)st.st_size - sizeof(h)) / sizeof(e);
	if (n > room)
		n = room;
	if (n > RPAL_STAT_MAX_CONNS)
		n = RPAL_STAT_MAX_CONNS;
	p->conns = calloc(n ? n : 1, sizeof(*p->conns));
	p->listeners = calloc(n ? n : 1, sizeof(*p->listeners));
	if (!p->conns || !p->listeners) {
		snprintf(why, whylen, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		const struct rpal_stat_conn *pe = (const void *)(m + sizeof(h) + i * sizeof(e));
		struct copy ce = { .src = (const void *)pe, .dst = (uint64_t *)(void *)&e,
				   .words = sizeof(e) / 8, .tries = 8, .seq = &pe->seq };
		int r = rpal_access_safely(copy_fn, &ce);

		if (r < 0) {
			ret = WHY("truncated while read");
			goto out;
		}
		if (r == 0) {
			p->busy++;
			continue;
		}
		if (e.state == RPAL_STAT_LISTEN) {
			listener_from_entry(&p->listeners[p->nlisteners++], &e);
			continue;
		}
		if (e.state != RPAL_STAT_OPEN)
			continue;
		conn_from_entry(&p->conns[p->nconns++], &e, &tn);
	}
	ret = unique_ids(p, why, whylen);
out:
	munmap(m, (size_t)st.st_size);
	if (ret) {
		snap_proc_free(p);
		p->nconns = p->nlisteners = 0;
	}
	return ret;
}

/* "stat.<slot>": the slot, or -1 for any other name.  The slot as its
 * owner writes it (%u): with leading zeros, one page could be linked under
 * hundreds of names, each read and listed as a process of its own. */
static long page_slot(const char *name)
{
	const char *d = name + strlen(RPAL_STAT_PREFIX);
	char *end;
	long v;

	if (strncmp(name, RPAL_STAT_PREFIX, strlen(RPAL_STAT_PREFIX)) || !isdigit((unsigned char)*d) ||
	    (d[0] == '0' && d[1]))
		return -1;
	errno = 0;
	v = strtol(d, &end, 10);
	return *end || errno || v > 4095 ? -1 : v;
}

/*
 * A stale page: remove it if we can prove nobody will own it meanwhile.
 * Holding its slot's byte of slots.lock keeps any new owner off the slot,
 * so no live page can be renamed to that name while we unlink it.
 */
static void stale_remove(int dirfd, const char *name, long slot)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1 };
	/* O_NONBLOCK: a file lease on it (anyone of our uid may replace it and
	 * take one) fails the open instead of holding it up for the lease
	 * break time; the page is then left for a later scan. */
	int lk = openat(dirfd, "slots.lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (lk < 0)
		return;
	if (fcntl(lk, F_OFD_SETLK, &fl) == 0) {
		int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd, name, 0);
		if (fd >= 0)
			close(fd);
	}
	close(lk);      /* drops the slot's byte */
}

static int add_skip(struct snap *s, const char *path, const char *why)
{
	struct snap_skip *n = realloc(s->skips, (s->nskips + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->skips = n;
	/* A directory's name is anyone's choice under /tmp, where root
	 * looks: shown as a page's strings are. */
	clean_string(n[s->nskips].path, path, sizeof(n->path));
	snprintf(n[s->nskips].why, sizeof(n->why), "%s", why);
	s->nskips++;
	return 0;
}

/*
 * Is the process that made a page (pid, rpal initialised at init_ns of
 * CLOCK_MONOTONIC) still running?  A hosted program's page lives in the
 * address space it shares with its host, whose mapping keeps the file, and
 * its lock, after the program is killed: there the lock says nothing.
 * Dead is no such process, a zombie, or a process that started after the
 * page did (the pid was reused).  The start is in ticks of the boot clock,
 * which runs on through a suspend where the monotonic one stops: their
 * difference now bounds that gap.  Unknown counts as alive.
 */
static bool owner_alive(uint32_t pid, uint64_t init_ns)
{
	char path[40], buf[1024], *p;
	unsigned long long start_ticks;
	struct timespec mono, boot;
	char state;
	FILE *f;

	if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return errno != ENOENT;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* After the command's closing parenthesis: state, then 18 fields
	 * to starttime (field 22). */
	if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
			 &state, &start_ticks) != 2)
		return true;
	if (state == 'Z' || state == 'X')
		return false;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0 || clock_gettime(CLOCK_MONOTONIC, &mono) || clock_gettime(CLOCK_BOOTTIME, &boot))
		return true;
	int64_t suspended = (boot.tv_sec - mono.tv_sec) * 1000000000ll + (boot.tv_nsec - mono.tv_nsec);
	double start_ns = (double)start_ticks * 1e9 / (double)hz;
	/* Two ticks of slack for the tick's rounding. */
	return start_ns <= (double)init_ns + (double)(suspended > 0 ? suspended : 0) + 2e9 / (double)hz;
}

struct snap_file {
	dev_t dev;
	ino_t ino;                    /* 0: an empty place (no file has inode 0) */
};

static size_t file_hash(dev_t dev, ino_t ino, size_t cap)
{
	return (size_t)(((uint64_t)ino * 0x9e3779b97f4a7c15ull) ^ (uint64_t)dev) & (cap - 1);
}

/*
 * 1 if the file was read already, else 0 and it is noted; -ENOMEM.  Root
 * reads every user's directories, and anyone can link one page of theirs
 * into any number of directories of theirs under /tmp: read once per
 * name, it would cost its size in memory each time.
 */
static int file_seen(struct snap *s, const struct stat *st)
{
	size_t i;

	if (!st->st_ino)
		return 0;
	if (2 * (s->nfiles + 1) > s->files_cap) {
		size_t cap = s->files_cap ? 2 * s->files_cap : 64;
		struct snap_file *f = calloc(cap, sizeof(*f));

		if (!f)
			return -ENOMEM;
		for (i = 0; i < s->files_cap; i++) {
			size_t k;

			if (!s->files[i].ino)
				continue;
			for (k = file_hash(s->files[i].dev, s->files[i].ino, cap); f[k].ino; k = (k + 1) & (cap - 1))
				;
			f[k] = s->files[i];
		}
		free(s->files);
		s->files = f;
		s->files_cap = cap;
	}
	for (i = file_hash(st->st_dev, st->st_ino, s->files_cap); s->files[i].ino; i = (i + 1) & (s->files_cap - 1))
		if (s->files[i].dev == st->st_dev && s->files[i].ino == st->st_ino)
			return 1;
	s->files[i] = (struct snap_file){ st->st_dev, st->st_ino };
	s->nfiles++;
	return 0;
}

/* Read the pages of dir, open as dfd (taken: closed here). */
static int scan_dir(int dfd, const char *dir, struct snap *s)
{
	char path[300], why[160];
	struct dirent *d;
	DIR *dp = fdopendir(dfd);

	if (!dp) {
		int err = -errno;

		close(dfd);
		return err;
	}
	while ((d = readdir(dp))) {
		long slot = page_slot(d->d_name);
		struct snap_proc p, *np;
		int fd;

		if (slot < 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		fd = openat(dirfd(dp), d->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0) {
			if (errno != ENOENT)    /* gone since readdir: its owner left */
				add_skip(s, path, strerror(errno));
			continue;
		}
		if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
			close(fd);
			s->stale++;
			stale_remove(dirfd(dp), d->d_name, slot);
			continue;
		}
		if (errno != EWOULDBLOCK) {
			snprintf(why, sizeof(why), "flock: %s", strerror(errno));
			add_skip(s, path, why);
			close(fd);
			continue;
		}
		struct stat st;
		int seen = fstat(fd, &st) == 0 ? file_seen(s, &st) : 0;

		if (seen) {
			close(fd);
			if (seen < 0) {
				closedir(dp);
				return seen;
			}
			add_skip(s, path, "a page read already under another name");
			continue;
		}
		if (snap_read_page(fd, path, &p, why, sizeof(why))) {
			add_skip(s, path, why);
			close(fd);
			continue;
		}
		close(fd);
		/* Who made the file, not who the page says it is. */
		p.uid = st.st_uid;
		if ((p.flags & RPAL_STAT_HOSTED) && !owner_alive(p.pid, p.init_mono_ns)) {
			s->stale++;     /* its host holds it: left for the slot's next owner */
			snap_proc_free(&p);
			continue;
		}
		if (p.slot != (uint32_t)slot) {
			snprintf(why, sizeof(why), "names slot %u in the page of slot %ld", p.slot, slot);
			add_skip(s, path, why);
			snap_proc_free(&p);
			continue;
		}
		clean_string(p.dir, dir, sizeof(p.dir));
		np = realloc(s->procs, (s->nprocs + 1) * sizeof(*np));
		if (!np) {
			snap_proc_free(&p);
			closedir(dp);
			return -ENOMEM;
		}
		s->procs = np;
		s->procs[s->nprocs++] = p;
	}
	closedir(dp);
	return 0;
}

static int proc_cmp(const void *a, const void *b)
{
	const struct snap_proc *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/*
 * The user a default runtime directory belongs to, from its name
 * (/run/user/UID/rpal, /tmp/rpal-UID), or -1 if it names none.
 */
static long dir_uid(const char *dir)
{
	const char *p = NULL, *end;
	char *e;
	long uid;

	if (!strncmp(dir, "/tmp/rpal-", 10)) {
		p = dir + 10;
		end = p + strlen(p);
	} else if (!strncmp(dir, "/run/user/", 10)) {
		p = dir + 10;
		end = strchr(p, '/');
		if (!end || strcmp(end, "/rpal"))
			return -1;
	}
	if (!p || !isdigit((unsigned char)*p))
		return -1;
	errno = 0;
	uid = strtol(p, &e, 10);
	return e == end && !errno && uid <= UINT32_MAX ? uid : -1;
}

/*
 * Scan a default runtime directory (of user uid, -1 for a name that is no
 * user's) unless it is one already scanned.  Only one that rpal_init()
 * would use for that user: a real directory (not a link to one), owned by
 * that user or root and not writable by others.  Under /tmp anyone may
 * make /tmp/rpal-UID first, and fill it with pages that claim any process.
 */
static int scan_once(const char *dir, long uid, struct stat *seen, unsigned *nseen, unsigned max,
		     struct snap *s)
{
	char msg[160];
	struct stat st;
	unsigned k;
	int ret, dfd;

	if (uid < 0)
		return 0;       /* no user's default: rpal_init never picks it */
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (dfd < 0) {
		if (errno == ENOENT)
			return 0;       /* nobody of that user has run rpal yet */
		snprintf(msg, sizeof(msg), "cannot open the directory: %s%s", strerror(errno),
			 errno == ELOOP || errno == ENOTDIR ? " (rpal_init does not follow a link there)" : "");
		return add_skip(s, dir, msg);
	}
	if (fstat(dfd, &st) < 0 || rpal_rundir_judge(&st, (uid_t)uid) != RPAL_RUNDIR_OK) {
		snprintf(msg, sizeof(msg), "owned by uid %u, mode %04o: rpal_init of uid %ld would refuse it",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), uid);
		close(dfd);
		return add_skip(s, dir, msg);
	}
	for (k = 0; k < *nseen; k++)
		if (seen[k].st_dev == st.st_dev && seen[k].st_ino == st.st_ino) {
			close(dfd);
			return 0;
		}
	if (*nseen < max)
		seen[(*nseen)++] = st;
	ret = scan_dir(dfd, dir, s);
	if (ret && ret != -ENOMEM) {
		snprintf(msg, sizeof(msg), "cannot read the directory: %s", strerror(-ret));
		return add_skip(s, dir, msg);
	}
	return ret;
}

/* An end of a connection, for pairing it with the other end. */
struct conn_end {
	uint64_t pair;
	uint32_t pid;                 /* its process */
	uint32_t peer;                /* the process it names as its peer */
	struct snap_conn *c;
};

static int end_cmp(const void *a, const void *b)
{
	const struct conn_end *x = a, *y = b;

	if (x->pair != y->pair)
		return x->pair < y->pair ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->peer < y->peer ? -1 : x->peer > y->peer;
}

/* The first of ends[0..n) (sorted) not below key, or, with above, above it. */
static size_t end_bound(const struct conn_end *ends, size_t n, const struct conn_end *key, bool above)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = end_cmp(&ends[mid], key);

		if (r < 0 || (above && r == 0))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int64_t backlog(uint64_t sent, uint64_t received)
{
	return sent > received ? (int64_t)(sent - received) : 0;
}

/*
 * Give each connection whose other end is in the snapshot its queues.  The
 * other end of x is the one entry with x's pair in x's peer's process that
 * names x's process as its peer (a connection of a process to itself has
 * both ends there).  Pages are untrusted: where more than one entry would
 * do, the queues stay unknown.  The candidates are one run of the sorted
 * ends, counted by two binary searches: pages full of entries with one
 * pair cost no more than any others.
 */
static void pair_ends(struct snap *s)
{
	struct conn_end *ends;
	size_t n = 0, i, j;

	for (i = 0; i < s->nprocs; i++)
		n += s->procs[i].nconns;
	if (!n || !(ends = calloc(n, sizeof(*ends))))
		return;
	n = 0;
	for (i = 0; i < s->nprocs; i++)
		for (j = 0; j < s->procs[i].nconns; j++)
			if (s->procs[i].conns[j].pair)
				ends[n++] = (struct conn_end){ s->procs[i].conns[j].pair, s->procs[i].pid,
							       s->procs[i].conns[j].peer_pid, &s->procs[i].conns[j] };
	qsort(ends, n, sizeof(*ends), end_cmp);
	for (i = 0; i < n; i++) {
		struct conn_end key = { ends[i].pair, ends[i].peer, ends[i].pid, NULL };
		size_t lo = end_bound(ends, n, &key, false), hi = end_bound(ends, n, &key, true);
		bool self = lo <= i && i < hi;
		const struct conn_end *other;

		if (hi - lo - self != 1)
			continue;
		other = &ends[self && lo == i ? lo + 1 : lo];
		ends[i].c->in_queue = backlog(other->c->msgs_sent, ends[i].c->msgs_received);
		ends[i].c->out_queue = backlog(ends[i].c->msgs_sent, other->c->msgs_received);
	}
	free(ends);
}

/* Where no rpal process ever ran (every one takes a byte of slots.lock
 * there), say so after the directory's name: a mistyped directory, or one
 * the services do not use, would read as an idle machine. */
static void note_unused(struct snap *s, const char *dir)
{
	char path[300];
	size_t n = strlen(s->looked);

	snprintf(path, sizeof(path), "%s/slots.lock", dir);
	if (access(path, F_OK) && errno == ENOENT)
		snprintf(s->looked + n, sizeof(s->looked) - n, ": no slots.lock, so no rpal process ever used it");
}

int snap_take(const struct snap_where *w, struct snap *s, char *why, size_t whylen)
{
	static const char *const all[] = { "/run/user/*/rpal", "/tmp/rpal-*" };
	struct stat seen[256];
	char def[256];
	unsigned nseen = 0, i, k;
	int ret;

	memset(s, 0, sizeof(*s));
	if (w && w->dir) {
		clean_string(s->looked, w->dir, sizeof(s->looked));
		ret = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
		ret = ret < 0 ? -errno : scan_dir(ret, w->dir, s);
		if (ret) {
			snprintf(why, whylen, "cannot read %s: %s", w->dir, strerror(-ret));
			snap_free(s);
			return ret;
		}
		note_unused(s, w->dir);
		goto sort;
	}
	snap_default_dir(def, sizeof(def));
	clean_string(s->looked, def, sizeof(s->looked));
	note_unused(s, def);
	if (geteuid() == 0)
		snprintf(s->looked + strlen(s->looked), sizeof(s->looked) - strlen(s->looked),
			 " and every /run/user/*/rpal and /tmp/rpal-*");
	ret = scan_once(def, geteuid(), seen, &nseen, 256, s);
	/* Root sees every user's processes: their default directories too. */
	for (i = 0; !ret && geteuid() == 0 && i < sizeof(all) / sizeof(all[0]); i++) {
		glob_t g;

		if (glob(all[i], 0, NULL, &g))
			continue;
		for (k = 0; !ret && k < g.gl_pathc; k++)
			ret = scan_once(g.gl_pathv[k], dir_uid(g.gl_pathv[k]), seen, &nseen, 256, s);
		globfree(&g);
	}
	if (ret) {
		snprintf(why, whylen, "out of memory");
		snap_free(s);
		return ret;
	}
sort:
	free(s->files);
	s->files = NULL;
	s->nfiles = s->files_cap = 0;
	if (s->nprocs > 1)
		qsort(s->procs, s->nprocs, sizeof(*s->procs), proc_cmp);
	pair_ends(s);
	return 0;
}

void snap_free(struct snap *s)
{
	unsigned i;

	for (i = 0; i < s->nprocs; i++)
		snap_proc_free(&s->procs[i]);
	free(s->procs);
	free(s->skips);
	free(s->files);
	memset(s, 0, sizeof(*s));
}

int snap_page_dir(long pid, char *dir, size_t len)
{
	char path[40], line[4200];
	bool cont = false;
	int ret = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	/* The path is the rest of the line from its first '/'.  A process may
	 * map other processes' pages too (rpal top does): its own is the one
	 * whose header is a page's, of that pid.  Only the header is read: the
	 * process may map a page tens of thousands of times, and reading all
	 * of its entries for each mapping took minutes. */
	while (ret < 0 && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/'), *nl = strchr(line, '\n'), *slash;
		_Alignas(64) struct rpal_stat_hdr h;
		unsigned major, minor;
		unsigned long long ino;
		struct stat st;
		bool was_cont = cont;
		int fd, rfd;

		/* The tail of a line longer than ours is no line of its own. */
		cont = !nl;
		if (was_cont || !p || !nl ||
		    sscanf(line, "%*x-%*x %*s %*x %x:%x %llu", &major, &minor, &ino) != 3)
			continue;
		*nl = '\0';
		slash = strrchr(p, '/');
		if (slash == p || page_slot(slash + 1) < 0)
			continue;
		/* The process chose the path, and may have swapped what it names
		 * since it mapped it: open nothing (no device, no FIFO) but the
		 * regular file its mapping holds, by device and inode. */
		fd = open(p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_dev != makedev(major, minor) ||
		    st.st_ino != ino) {
			close(fd);
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		rfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		close(fd);
		if (rfd < 0)
			continue;
		if (pread(rfd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == RPAL_STAT_MAGIC &&
		    h.version == RPAL_STAT_VERSION && h.hdr_size == sizeof(h) &&
		    h.entry_size == sizeof(struct rpal_stat_conn) && h.pid == (uint32_t)pid) {
			*slash = '\0';
			clean_string(dir, p, len);
			ret = 0;
		}
		close(rfd);
	}
	fclose(f);
	return ret;
}

int snap_filter_parse(const char *arg, struct snap_filter *f)
{
	const char *p;

	f->pid = -1;
	f->service = NULL;
	if (!arg)
		return 0;
	if (!*arg)
		return -EINVAL;
	for (p = arg; *p && isdigit((unsigned char)*p); p++)
		;
	if (*p) {
		/* As the pages record it: a path's last component, cut and
		 * cleaned as every string read from a page is. */
		if (arg[0] == '/' && strrchr(arg, '/')[1])
			arg = strrchr(arg, '/') + 1;
		clean_string(f->name, arg, sizeof(f->name));
		f->service = f->name;
		return 0;
	}
	errno = 0;
	f->pid = strtol(arg, NULL, 10);
	return errno || f->pid <= 0 || f->pid > (long)PID_LIMIT ? -EINVAL : 0;
}

void snap_select(struct snap *s, const struct snap_filter *f)
{
	unsigned i, j, k, n = 0;

	for (i = 0; i < s->nprocs; i++) {
		struct snap_proc *p = &s->procs[i];

		if (f->pid >= 0 && p->pid != (uint32_t)f->pid) {
			snap_proc_free(p);
			continue;
		}
		if (f->service) {
			for (j = k = 0; j < p->nconns; j++)
				if (!strcmp(p->conns[j].service, f->service))
					p->conns[k++] = p->conns[j];
			p->nconns = k;
			for (j = k = 0; j < p->nlisteners; j++)
				if (!strcmp(p->listeners[j].service, f->service))
					p->listeners[k++] = p->listeners[j];
			p->nlisteners = k;
			if (!p->nconns && !p->nlisteners) {
				snap_proc_free(p);
				continue;
			}
		}
		s->procs[n++] = *p;
	}
	s->nprocs = n;
}
