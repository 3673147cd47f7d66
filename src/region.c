/* SPDX-License-Identifier: MIT */
/*
 * region.c - the address map: one PROT_NONE region of nr_slots slots at a
 * fixed address in every rpal process.  We own one slot (an OFD lock on one
 * byte of "<runtime_dir>/slots.lock", dropped by the kernel when we die) and
 * map our arena there read-write; a peer's arena is mapped read-only over
 * the peer's slot, so arena pointers mean the same in every process.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "rundir.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

struct rpal_global rpal_g = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.alloc_lock = RPAL_LOCK_INIT,
	.slot_lockfd = -1,
	.memfd = -1,
	.statfd = -1,
};


void geom_self(struct rpal_geom *g)
{
	g->region_base = rpal_g.region;
	g->slot_size = rpal_g.cfg.slot_size;
	g->nr_slots = rpal_g.cfg.nr_slots;
	g->arena_size = rpal_g.cfg.arena_size;
	g->arena_nonce = rpal_g.arena ? rpal_g.arena->nonce : 0;
	g->slot = rpal_g.slot;
	g->pid = getpid();
}

uintptr_t slot_base(unsigned slot)
{
	return rpal_g.region + (uintptr_t)slot * rpal_g.cfg.slot_size;
}

/* Put the PROT_NONE reservation back over [addr, addr+len): over what is
 * there (fixed), or only where nothing is (a mapping of another thread's
 * may have landed in a hole the kernel left). */
static void reserve_again_how(uintptr_t addr, size_t len, int fixed)
{
	void *p = mmap((void *)addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | fixed, -1, 0);
	if (p != MAP_FAILED)
		madvise(p, len, MADV_DONTFORK);
}

static void reserve_again(uintptr_t addr, size_t len)
{
	reserve_again_how(addr, len, MAP_FIXED);
}

/* Create (mode 0700) or check the runtime directory (rundir.h says what
 * is accepted). */
static int rundir_setup(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return rpal_fail(errno, "cannot create runtime directory %s", dir);
	switch (rpal_rundir_check(dir, &st)) {
	case RPAL_RUNDIR_OK:
		break;
	case RPAL_RUNDIR_NO_STAT:
		return rpal_fail(errno, "cannot stat runtime directory %s", dir);
	case RPAL_RUNDIR_SYMLINK:
		return rpal_fail(ENOTDIR, "runtime directory %s is a symbolic link, not a directory", dir);
	case RPAL_RUNDIR_NOT_DIR:
		return rpal_fail(ENOTDIR, "runtime directory %s is not a directory", dir);
	case RPAL_RUNDIR_NOT_OURS:
		return rpal_fail(EPERM, "runtime directory %s belongs to uid %u, not us (%u) or root",
				 dir, (unsigned)st.st_uid, (unsigned)geteuid());
	case RPAL_RUNDIR_ANYONE_WRITES:
		return rpal_fail(EPERM, "runtime directory %s has mode %04o; anyone may write it (want 0700)",
				 dir, (unsigned)(st.st_mode & 07777));
	}
	return 0;
}

/* One byte of slots.lock: 0 taken, -1 with errno EAGAIN or EACCES if
 * another holder conflicts, or another errno. */
static int lock_byte(int fd, short type, off_t byte)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };

	return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Our read lock on a peer slot's mapped byte (section 1 of PROTOCOL.md). */
static int mapped_lock(unsigned slot, short type)
{
	if (rpal_g.slot_lockfd < 0)
		return type == F_UNLCK ? 0 : -1;
	return lock_byte(rpal_g.slot_lockfd, type, RPAL_SLOT_MAPPED_LOCK + slot);
}

/*
 * In a host, the right to decide what is mapped at a peer's slot of the
 * address space the host's programs share, and to map it: two programs that
 * both found the reservation there would otherwise both map, the second
 * over the first's arena.  It is held for one read of /proc/self/maps, one
 * mmap() and a look at the arena's header (or for one unmap), so a holder
 * that keeps it for a second is not one of ours: the wait is bounded.  0,
 * or -1 with errno (EBUSY: still held).
 */
static int map_guard_take(unsigned slot)
{
	int i;

	for (i = 0; i < 1000; i++) {
		if (lock_byte(rpal_g.slot_lockfd, F_WRLCK, RPAL_SLOT_MAP_GUARD + slot) == 0)
			return 0;
		if (errno != EAGAIN && errno != EACCES)
			return -1;
		usleep(1000);
	}
	errno = EBUSY;
	return -1;
}

static void map_guard_give(unsigned slot)
{
	lock_byte(rpal_g.slot_lockfd, F_UNLCK, RPAL_SLOT_MAP_GUARD + slot);
}

/* Put the reservation back over a peer's arena, then let its slot go. */
static void unmap_peer_arena(unsigned slot, uintptr_t base, size_t size)
{
	reserve_again(base, size);
	mapped_lock(slot, F_UNLCK);
}

/* Take the read lock on a peer slot's mapped byte.  A conflicting write
 * lock is held for one mmap() at most (a claim's probe, peer_unmap()'s
 * last mapper), so it is worth a few tries. */
static int mapped_lock_read(unsigned slot)
{
	int i;

	for (i = 0; i < 64; i++) {
		if (mapped_lock(slot, F_RDLCK) == 0)
			return 0;
		if (errno != EAGAIN && errno != EACCES)
			break;
		sched_yield();
	}
	return -1;
}

/*
 * We no longer read p's arena.  In a host the address space and its
 * mappings are shared by every program: another program's arena is its
 * owner's mapping, and an outside peer's is one mapping, which stays
 * while any other holder of its mapped byte (another program of the host,
 * or an outside process) may read it.  Only the last mapper we can tell
 * of puts the reservation back, under the write lock, so that no program
 * maps it anew meanwhile; one that finds other holders leaves it mapped
 * until a newcomer's claim of the slot and its next mapper replace it.
 * The slot's map guard makes programs that stop at once take turns, so
 * the last of them finds the others gone.  peer_map() may hold the guard
 * already: an OFD lock taken again by its holder is the same lock, which
 * one release ends.
 */
static void peer_unmap(unsigned slot, uintptr_t base, size_t size, bool local)
{
	bool guarded;

	if (local && host_active() && slot == rpal_g.slot)
		return;         /* our own: its byte stays held (slot_claim) */
	if (local) {
		mapped_lock(slot, F_UNLCK);
		return;
	}
	if (!host_active()) {
		unmap_peer_arena(slot, base, size);
		return;
	}
	guarded = map_guard_take(slot) == 0;
	if (guarded && mapped_lock(slot, F_WRLCK) == 0)
		unmap_peer_arena(slot, base, size);
	else
		mapped_lock(slot, F_UNLCK);
	if (guarded)
		map_guard_give(slot);
}

/*
 * Claim the first free slot, starting from a pid-derived one to spread
 * start-up races.  A slot is free when nobody owns it (byte slot) and
 * nobody still maps its previous owner's arena (byte SLOT_MAPPED_LOCK +
 * slot, read-locked by every mapper): a survivor reading a dead peer's
 * messages must never see them replaced.  The lock lives as long as the
 * process or rpal_fini().
 */
static int slot_claim(void)
{
	char path[160];
	unsigned n = rpal_g.cfg.nr_slots, i, mapped = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/slots.lock", rpal_g.rundir);
	/* O_NONBLOCK: a file lease on it fails the open (EWOULDBLOCK) instead
	 * of holding rpal_init() up for the lease break time. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0660);
	if (fd < 0)
		return rpal_fail(errno, "cannot open slot lock file %s", path);
	for (i = 0; i < n; i++) {
		unsigned slot = (unsigned)(getpid() + i) % n;

		/* In a host, also skip a running program's slot: one with
		 * another runtime directory locks another file. */
		if (host_slot_held(slot, getpid()))
			continue;
		if (lock_byte(fd, F_WRLCK, slot) == 0) {
			if (lock_byte(fd, F_WRLCK, RPAL_SLOT_MAPPED_LOCK + slot) == 0) {
				/* In a host we read our arena through the mapping
				 * that the other programs share: hold its mapped
				 * byte too, so that none maps over it. */
				lock_byte(fd, host_active() ? F_RDLCK : F_UNLCK, RPAL_SLOT_MAPPED_LOCK + slot);
				rpal_g.slot_lockfd = fd;
				rpal_g.slot = slot;
				host_slot_claimed(slot);
				return 0;
			}
			lock_byte(fd, F_UNLCK, slot);
			mapped++;
		}
		if (errno != EAGAIN && errno != EACCES) {
			int e = errno;
			close(fd);
			return rpal_fail(e, "cannot lock slot %u in %s", slot, path);
		}
	}
	close(fd);
	return rpal_fail(EBUSY, "all %u slots in %s are taken (%u of them still mapped by peers of a departed owner)",
			 n, path, mapped);
}

static int arena_create(void)
{
	size_t size = rpal_g.cfg.arena_size;
	uintptr_t base = slot_base(rpal_g.slot);
	struct rpal_arena_hdr *h;
	uint64_t nonce = 0;
	void *p;
	int fd;

	fd = memfd_create("rpal-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return rpal_fail(errno, "memfd_create for the arena failed");
	if (ftruncate(fd, (off_t)size) < 0) {
		int e = errno;
		close(fd);
		return rpal_fail(e, "cannot size the arena to %zu bytes", size);
	}
	p = mmap((void *)base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		char note[96];

		close(fd);
		return rpal_fail(e, "cannot map the arena at %#" PRIxPTR "%s", base, map_count_note(e, note, sizeof(note)));
	}
	madvise(p, size, MADV_DONTFORK);
	/* No shrink or grow: a peer's mapping can never SIGBUS.  Future-write:
	 * nobody can map it writable again; our mapping stays writable. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
		int e = errno;
		reserve_again(base, size);
		close(fd);
		return rpal_fail(e, "cannot seal the arena memfd");
	}
	if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
		nonce = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
	nonce |= !nonce;        /* PROTOCOL.md: random, non-zero */

	h = p;
	h->magic = RPAL_ARENA_MAGIC;
	h->version = RPAL_WIRE_VERSION;
	h->hdr_size = sizeof(*h);
	h->slot = rpal_g.slot;
	h->pid = (uint32_t)getpid();
	h->arena_size = size;
	h->base = base;
	h->heap_off = RPAL_PAGE;
	h->nonce = nonce;

	rpal_g.alloc = alloc_create((char *)p + RPAL_PAGE, size - RPAL_PAGE);
	if (rpal_g.alloc)
		store_relaxed(&rpal_g.arena_used, alloc_used(rpal_g.alloc));
	if (!rpal_g.alloc) {
		reserve_again(base, size);
		close(fd);
		return rpal_fail(ENOMEM, "cannot create the arena allocator");
	}
	rpal_g.memfd = fd;
	rpal_g.arena = h;
	return 0;
}

/* The lines of a /proc file, or -1: for a failure's message only. */
static long count_lines(const char *path)
{
	char buf[4096];
	long lines = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			lines += buf[i] == '\n';
	close(fd);
	return n < 0 ? -1 : lines;
}

/* The number a /proc file holds, or -1. */
static long read_long(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/*
 * Where a mapping failed with ENOMEM: if the process is at the kernel's map
 * count, ": the process has N mappings, the most vm.max_map_count allows"
 * into buf (the cause a user can act on), else "".  Returns buf.
 */
const char *map_count_note(int err, char *buf, size_t len)
{
	long maps, max_maps;

	buf[0] = '\0';
	if (err != ENOMEM)
		return buf;
	maps = count_lines("/proc/self/maps");
	max_maps = read_long("/proc/sys/vm/max_map_count");
	if (maps >= 0 && max_maps > 0 && maps >= max_maps - 1)
		snprintf(buf, len, ": the process has %ld mappings, the most vm.max_map_count allows", maps);
	return buf;
}

int region_setup(void)
{
	size_t size = (size_t)rpal_g.cfg.slot_size * rpal_g.cfg.nr_slots;
	void *p;
	int ret;

	ret = rpal_runtime_dir(&rpal_g.cfg, rpal_g.rundir, sizeof(rpal_g.rundir));
	if (ret)
		return ret;
	ret = rundir_setup(rpal_g.rundir);
	if (ret)
		return ret;

	if (host_active()) {
		/* `rpal run` reserved it for all its programs (host_setup()). */
		p = (void *)(uintptr_t)rpal_g.cfg.region_base;
	} else {
		p = mmap((void *)(uintptr_t)rpal_g.cfg.region_base, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == MAP_FAILED && errno == ENOMEM) {
			/* Not another mapping in the way (EEXIST): RLIMIT_AS, the
			 * kernel's map count, or a region past the end of the
			 * user address space (smaller on some AArch64 kernels). */
			struct rlimit as;
			char note[96];

			if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
				return rpal_fail(ENOMEM, "cannot reserve %zu bytes at %#" PRIx64 ": RLIMIT_AS (ulimit -v) is "
						 "%llu KiB; raise it, or shrink the region (RPAL_NR_SLOTS, RPAL_SLOT_SIZE)",
						 size, rpal_g.cfg.region_base, (unsigned long long)(as.rlim_cur / 1024));
			if (*map_count_note(ENOMEM, note, sizeof(note)))
				return rpal_fail(ENOMEM, "cannot reserve %zu bytes at %#" PRIx64 "%s", size,
						 rpal_g.cfg.region_base, note);
			return rpal_fail(ENOMEM, "cannot reserve %zu bytes at %#" PRIx64 ": the kernel refused it "
					 "(ENOMEM): past its user address space? set RPAL_REGION_BASE lower, or shrink the "
					 "region (RPAL_NR_SLOTS, RPAL_SLOT_SIZE)", size, rpal_g.cfg.region_base);
		}
		if (p == MAP_FAILED)
			return rpal_fail(errno == EEXIST ? EEXIST : errno,
					 "cannot reserve %zu bytes at %#" PRIx64 " (something is mapped there; set RPAL_REGION_BASE)",
					 size, rpal_g.cfg.region_base);
		if ((uintptr_t)p != rpal_g.cfg.region_base) {   /* a kernel without NOREPLACE */
			munmap(p, size);
			return rpal_fail(EEXIST, "region %#" PRIx64 " is not free", rpal_g.cfg.region_base);
		}
		/* A forked child gets none of it: it cannot write our arena
		 * and may rpal_init() afresh. */
		madvise(p, size, MADV_DONTFORK);
	}
	rpal_g.region = (uintptr_t)p;
	rpal_g.region_size = size;

	ret = slot_claim();
	if (!ret)
		ret = arena_create();
	if (ret) {
		if (rpal_g.slot_lockfd >= 0)
			close(rpal_g.slot_lockfd);
		rpal_g.slot_lockfd = -1;
		if (!host_active())
			munmap(p, size);
		rpal_g.region = 0;
		return ret;
	}
	stat_setup();
	host_stat_attach();
	return ret;
}

/*
 * In a host, what the shared address space holds at an outside peer's
 * slot: 0 the reservation, 1 a mapping of the hello's memfd that covers
 * its arena (another program of the host maps it), -1 anything else
 * (another arena, or what /proc/self/maps cannot tell), which may be
 * mapped over only where nobody else holds the slot's mapped byte.  The
 * header there is the peer's to write, so the file is what decides.
 */
static int hosted_slot_holds(uintptr_t base, const struct rpal_hello *h, int memfd)
{
	unsigned long lo, hi, ino, maj, mnr;
	struct stat st;
	char line[512], perms[8];
	int ret = -1;
	FILE *f;

	if (fstat(memfd, &st) < 0 || !(f = fopen("/proc/self/maps", "re")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s %*x %lx:%lx %lu", &lo, &hi, perms, &maj, &mnr, &ino) != 6 ||
		    base < lo || base >= hi)
			continue;
		if (ino == 0 && !strcmp(perms, "---p"))
			ret = 0;
		else if (lo == base && hi - lo >= h->arena_size && ino == st.st_ino &&
			 maj == major(st.st_dev) && mnr == minor(st.st_dev))
			ret = 1;
		break;
	}
	fclose(f);
	return ret;
}

/*
 * Map the arena of a peer that is not a program of this host at its slot,
 * or, in a host, find the mapping of it that another program made.  The
 * caller holds the slot's mapped byte (read) and, in a host, its guard.
 * 0 and *out, or <0 after rpal_fail().
 */
static int outside_map(uintptr_t base, const struct rpal_hello *h, int memfd, pid_t pid, bool hosted, void **out)
{
	int there;

	/* A running program's arena is its own, in use, never read through
	 * our lock alone. */
	if (host_slot_held(h->slot, pid))
		return rpal_fail(EADDRINUSE, "peer pid %d names slot %u, where a program of this host "
				 "has its arena", (int)pid, h->slot);
	there = hosted ? hosted_slot_holds(base, h, memfd) : 0;
	if (there > 0) {
		*out = (void *)base;
		return 0;
	}
	if (there < 0 && mapped_lock(h->slot, F_WRLCK) < 0)
		return rpal_fail(EADDRINUSE, "peer pid %d names slot %u, where programs of this host "
				 "read another arena", (int)pid, h->slot);
	*out = mmap((void *)base, h->arena_size, PROT_READ, MAP_SHARED | MAP_FIXED, memfd, 0);
	if (*out == MAP_FAILED) {
		int e = errno;
		char note[96];

		map_count_note(e, note, sizeof(note));
		/* The kernel may have dropped our reservation there already:
		 * put it back, or the slot is a hole that any mapping of ours
		 * could land in. */
		reserve_again_how(base, h->arena_size, MAP_FIXED_NOREPLACE);
		return rpal_fail(e, "cannot map peer arena of slot %u%s", h->slot, note);
	}
	if (there < 0)
		mapped_lock(h->slot, F_RDLCK);  /* back from the write lock */
	return 0;
}

static int peer_pages_setup(struct rpal_peer *p, int memfd);
static void peer_pages_teardown(struct rpal_peer *p);

void region_teardown(void)
{
	bool hosted = host_active();

	/* Before the slot goes: while we hold it, the page's name is ours. */
	stat_teardown();
	while (rpal_g.peers) {
		struct rpal_peer *p = rpal_g.peers;
		rpal_g.peers = p->next;
		/* Hosted: the region outlives us; give back what we mapped. */
		if (hosted)
			peer_unmap(p->slot, p->base, p->size, p->local);
		peer_pages_teardown(p);
		free(p);
	}
	if (rpal_g.alloc)
		alloc_destroy(rpal_g.alloc);
	rpal_g.alloc = NULL;
	rpal_g.arena = NULL;
	if (rpal_g.memfd >= 0)
		close(rpal_g.memfd);
	rpal_g.memfd = -1;
	/*
	 * Hosted: programs of this process that were our peers read our arena
	 * through our own mapping, maybe still (a program that ends before its
	 * peers).  Keep it, and the slot, for the life of the process: at most
	 * one slot per program.  Otherwise the region goes with us.
	 */
	if (rpal_g.region && !hosted)
		munmap((void *)rpal_g.region, rpal_g.region_size);
	rpal_g.region = 0;
	if (rpal_g.slot_lockfd >= 0 && !hosted)
		close(rpal_g.slot_lockfd);
	rpal_g.slot_lockfd = -1;
	mpk_teardown();
}

/*
 * Map a peer's arena read-only at its slot, or share an existing mapping of
 * the same incarnation.  Caller holds rpal_g.lock and has checked the hello
 * (geometry, slot range, sizes) and the memfd (seals, size).
 */
int peer_map(int memfd, const struct rpal_hello *h, pid_t pid, struct rpal_peer **out)
{
	struct rpal_peer *p, **pp;
	uintptr_t base = slot_base(h->slot);
	const struct rpal_arena_hdr *ah;
	bool local, guarded = false;
	void *m;

	for (pp = &rpal_g.peers; (p = *pp); pp = &p->next) {
		if (p->slot != h->slot)
			continue;
		if (!p->dead && p->pid == pid && p->arena_nonce == h->arena_nonce) {
			/* The hello's block and rings are placed by its size:
			 * another one than the mapping's would put them past it. */
			if (p->size != h->arena_size)
				return rpal_fail(EPROTO, "peer pid %d says its arena (slot %u) is %#" PRIx64
						 " bytes; it is mapped here with %#zx", (int)pid, h->slot,
						 h->arena_size, p->size);
			p->refs++;
			*out = p;
			return 0;
		}
		/* Connections still read through the mapping we have: it is
		 * never replaced under them.  An honest claimer cannot get here
		 * (our mapped byte keeps it off the slot); one that raced us,
		 * or ignored the lock, is refused. */
		if (!p->dead)
			return rpal_fail(EADDRINUSE, "peer pid %d claims slot %u, which live pid %d holds",
					 (int)pid, h->slot, (int)p->pid);
		return rpal_fail(EADDRINUSE, "peer pid %d claims slot %u, still mapped for open connections "
				 "of departed pid %d", (int)pid, h->slot, (int)p->pid);
	}

	/* Held while we read the arena, so that no newcomer claims its slot
	 * and maps over it, even where the owner's mapping is the one we read
	 * (its process may end before we stop). */
	if (mapped_lock_read(h->slot) < 0)
		return rpal_fail(EADDRINUSE, "slot %u of peer pid %d is being claimed anew", h->slot, (int)pid);
	local = pid_shares_our_memory(pid, h->slot);
	if (local) {
		/* Same address space (hosted mode): the owner's mapping is the one. */
		m = (void *)base;
	} else {
		int ret;

		guarded = host_active();
		if (guarded && map_guard_take(h->slot) < 0) {
			int e = errno;

			mapped_lock(h->slot, F_UNLCK);
			if (e == EBUSY)
				return rpal_fail(EADDRINUSE, "slot %u of peer pid %d: another program of this host "
						 "has been mapping it for a second", h->slot, (int)pid);
			return rpal_fail(e, "cannot lock the map guard of slot %u: %s", h->slot, strerror(e));
		}
		ret = outside_map(base, h, memfd, pid, guarded, &m);
		if (ret) {
			if (guarded)
				map_guard_give(h->slot);
			mapped_lock(h->slot, F_UNLCK);
			return ret;
		}
		madvise(m, h->arena_size, MADV_DONTFORK);
	}
	/* Checked under the guard: a program that waits for it then finds
	 * the reservation again, not an arena about to be unmapped. */
	ah = m;
	bool bad = ah->magic != RPAL_ARENA_MAGIC || ah->slot != h->slot || ah->arena_size != h->arena_size ||
	      ah->base != base || ah->nonce != h->arena_nonce || ah->heap_off >= h->arena_size;
	if (bad)
		peer_unmap(h->slot, base, h->arena_size, local);
	if (guarded)
		map_guard_give(h->slot);        /* peer_unmap() took it again: one lock, one release */
	if (bad)
		return rpal_fail(EPROTO, "peer arena header does not match its hello (slot %u)", h->slot);
	p = calloc(1, sizeof(*p));
	if (!p) {
		peer_unmap(h->slot, base, h->arena_size, local);
		return rpal_fail(ENOMEM, "out of memory");
	}
	p->slot = h->slot;
	p->pid = pid;
	p->arena_nonce = h->arena_nonce;
	p->base = base;
	p->size = h->arena_size;
	p->refs = 1;
	p->memfd = -1;
	p->local = local;
	if (!local) {
		int ret = peer_pages_setup(p, memfd);

		/* Unreadable outside windows from here on (protect_peers). */
		if (!ret)
			ret = mpk_peer_attach(p);
		if (ret) {
			peer_pages_teardown(p);
			peer_unmap(h->slot, base, h->arena_size, local);
			free(p);
			return ret;
		}
	}
	p->next = rpal_g.peers;
	rpal_g.peers = p;
	*out = p;
	return 0;
}

/* Drop one connection's reference; unmap with the last.  Caller holds the lock. */
void peer_put(struct rpal_peer *p)
{
	struct rpal_peer **pp;

	if (--p->refs > 0)
		return;
	for (pp = &rpal_g.peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	peer_unmap(p->slot, p->base, p->size, p->local);
	mpk_peer_detach(p);
	peer_pages_teardown(p);
	free(p);
}

/* The written-pages bitmap of a peer's arena, all clear, and a descriptor of
 * its memfd of our own (the handshake's is closed after it). */
static int peer_pages_setup(struct rpal_peer *p, int memfd)
{
	size_t words = (p->size / RPAL_PAGE + 63) / 64;

	/* calloc: a large bitmap is fresh mmap'd memory, whose pages cost
	 * only once touched. */
	p->written = calloc(words, sizeof(*p->written));
	if (!p->written)
		return rpal_fail(ENOMEM, "out of memory for the page map of peer slot %u", p->slot);
	p->memfd = fcntl(memfd, F_DUPFD_CLOEXEC, 3);
	if (p->memfd < 0)
		return rpal_fail(errno, "cannot keep the arena descriptor of peer slot %u", p->slot);
	return 0;
}

static void peer_pages_teardown(struct rpal_peer *p)
{
	free((void *)p->written);
	p->written = NULL;
	if (p->memfd >= 0)
		close(p->memfd);
	p->memfd = -1;
}

/*
 * Has the peer written every page of [addr, addr + len) of its arena?  The
 * slow path of peer_pages_known(): the bitmap word by word, then the memfd
 * for where its first hole at or after the range's first page is
 * (SEEK_HOLE: a page never written is a hole; one swapped out is not); the
 * range's pages are noted as written if that is past its end.
 */
RPAL_WARM bool peer_pages_check(struct rpal_peer *p, uintptr_t addr, size_t len)
{
	size_t first = (addr - p->base) / RPAL_PAGE, last = (addr + len - 1 - p->base) / RPAL_PAGE, w;
	off_t hole;

	if (!p->written)
		return true;
	for (w = first / 64; w <= last / 64; w++) {
		uint64_t want = ~0ull;

		if (w == first / 64)
			want &= ~0ull << (first % 64);
		if (w == last / 64)
			want &= ~0ull >> (63 - last % 64);
		if ((load_relaxed(&p->written[w]) & want) != want)
			break;
	}
	if (w > last / 64)
		return true;
	hole = lseek(p->memfd, (off_t)(first * RPAL_PAGE), SEEK_HOLE);
	if (hole < 0 || (uint64_t)hole < addr + len - p->base)
		return false;
	/* Every page up to the hole, not the range alone: the kernel walked
	 * them all to find it, and a walk per message would cost in
	 * proportion to all the peer ever wrote. */
	last = ((uint64_t)hole < p->size ? (uint64_t)hole : p->size) / RPAL_PAGE - 1;
	for (size_t i = first; i <= last;) {
		uint64_t bits = ~0ull << (i % 64);

		if (i / 64 == last / 64)
			bits &= ~0ull >> (63 - last % 64);
		atomic_fetch_or_explicit(&p->written[i / 64], bits, memory_order_relaxed);
		i = (i / 64 + 1) * 64;
	}
	return true;
}

RPAL_WARM void *arena_alloc(size_t len)
{
	void *p;

	lock_take(&rpal_g.alloc_lock);
	p = alloc_get(rpal_g.alloc, len);
	store_relaxed(&rpal_g.arena_used, alloc_used(rpal_g.alloc));
	lock_give(&rpal_g.alloc_lock);
	return p;
}

RPAL_WARM long arena_free(void *p)
{
	long ret;

	lock_take(&rpal_g.alloc_lock);
	ret = alloc_put(rpal_g.alloc, p);
	store_relaxed(&rpal_g.arena_used, alloc_used(rpal_g.alloc));
	lock_give(&rpal_g.alloc_lock);
	return ret;
}

RPAL_WARM long arena_claim(void *p, size_t len)
{
	long ret;

	lock_take(&rpal_g.alloc_lock);
	ret = alloc_claim(rpal_g.alloc, p, len);
	lock_give(&rpal_g.alloc_lock);
	return ret;
}

void arena_unclaim(void *p)
{
	lock_take(&rpal_g.alloc_lock);
	alloc_unclaim(rpal_g.alloc, p);
	lock_give(&rpal_g.alloc_lock);
}

bool arena_in_flight(void *p)
{
	bool ret;

	lock_take(&rpal_g.alloc_lock);
	ret = alloc_in_flight(rpal_g.alloc, p);
	lock_give(&rpal_g.alloc_lock);
	return ret;
}

RPAL_EXPORT int rpal_self(unsigned *slot, void **arena_base, size_t *arena_size)
{
	if (!rpal_g.inited)
		return rpal_fail(ENOTCONN, "rpal_self: rpal_init() has not been called");
	if (slot)
		*slot = rpal_g.slot;
	if (arena_base)
		*arena_base = rpal_g.arena;
	if (arena_size)
		*arena_size = rpal_g.cfg.arena_size;
	return 0;
}
