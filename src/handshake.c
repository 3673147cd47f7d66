/* SPDX-License-Identifier: MIT */
/*
 * handshake.c - the hello messages and every check made on what a peer sends
 * before anything of it is mapped or used.  The hello functions are pure:
 * our own place in the address map comes in as an argument (struct
 * rpal_geom), never from the process's state (fuzzed in test/fuzz/).  The
 * descriptor checks look at the descriptors they are given and nothing
 * else.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define HS_MAX_FDS 3    /* arena, doorbell, wake page */
#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -EPROTO)

static bool pow2(uint64_t x) { return x && !(x & (x - 1)); }

void hello_fill(struct rpal_hello *h, const struct rpal_geom *g, uint16_t type, const struct rpal_block *blk,
		const char *service, uint32_t features)
{
	memset(h, 0, sizeof(*h));
	h->magic = RPAL_HELLO_MAGIC;
	h->version = RPAL_WIRE_VERSION;
	h->type = type;
	h->size = sizeof(*h);
	h->features = RPAL_FEATURES_BASE | features;
	h->pid = (uint32_t)g->pid;
	h->slot = g->slot;
	h->nr_slots = g->nr_slots;
	h->region_base = g->region_base;
	h->slot_size = g->slot_size;
	h->arena_size = g->arena_size;
	h->arena_nonce = g->arena_nonce;
	h->block = (uintptr_t)blk;
	h->block_nonce = blk->nonce;
	h->ring_entries = blk->ring_entries;
	h->ack_entries = blk->ack_entries;
	if (service)
		strncpy(h->service, service, sizeof(h->service) - 1);
}

/* Shape only: magic, version, type, size.  0 or -EPROTO with a reason. */
int hello_check(const void *buf, size_t len, uint16_t want_type, struct rpal_hello *out,
		char *why, size_t whylen)
{
	struct rpal_hello h = { 0 };    /* a short message must not show stack bytes */

	if (len < 8)
		return WHY("handshake message of %zu bytes is too short", len);
	memcpy(&h, buf, len < sizeof(h) ? len : sizeof(h));
	if (h.magic != RPAL_HELLO_MAGIC)
		return WHY("bad magic %#x (not an rpal peer)", h.magic);
	if (h.version != RPAL_WIRE_VERSION)
		return WHY("peer speaks wire version %u, we speak %u", h.version, RPAL_WIRE_VERSION);
	if (h.type != want_type)
		return WHY("expected handshake message type %u, got %u", want_type, h.type);
	if (len != sizeof(h) || h.size != sizeof(h))
		return WHY("hello of %zu bytes (says %u), expected %zu", len, h.size, sizeof(h));
	*out = h;
	return 0;
}

/* The bytes of the connection block a hello describes, rings included. */
static uint64_t block_bytes(const struct rpal_hello *h)
{
	return sizeof(struct rpal_block) + (uint64_t)h->ring_entries * sizeof(struct rpal_slot) +
	       (uint64_t)h->ack_entries * sizeof(struct rpal_ack);
}

/* Geometry: does this peer fit our address map, g?  (No memory is touched.) */
int hello_check_peer(const struct rpal_hello *h, const struct rpal_geom *g, char *why, size_t whylen)
{
	uint64_t base, bsize;

	if (h->region_base != g->region_base || h->slot_size != g->slot_size || h->nr_slots != g->nr_slots)
		return WHY("peer's region %#" PRIx64 " x %u x %#" PRIx64 " differs from ours %#" PRIx64 " x %u x %#" PRIx64,
			   h->region_base, h->nr_slots, h->slot_size, g->region_base, g->nr_slots, g->slot_size);
	if (h->slot >= g->nr_slots)
		return WHY("peer slot %u out of range", h->slot);
	if (h->slot == g->slot && h->pid != (uint32_t)g->pid)
		return snprintf(why, whylen, "peer claims our own slot %u", h->slot), -EADDRINUSE;
	if (h->arena_size < (1u << 20) || h->arena_size > g->slot_size || h->arena_size % RPAL_PAGE)
		return WHY("peer arena size %#" PRIx64 " invalid", h->arena_size);
	if (!pow2(h->ring_entries) || h->ring_entries < 8 || h->ring_entries > 65536)
		return WHY("peer ring_entries %u invalid", h->ring_entries);
	if (!pow2(h->ack_entries) || h->ack_entries < 8 || h->ack_entries > 65536)
		return WHY("peer ack_entries %u invalid", h->ack_entries);
	base = h->region_base + (uint64_t)h->slot * h->slot_size;
	bsize = block_bytes(h);
	if (h->block % RPAL_CACHELINE || h->block < base + RPAL_PAGE ||
	    h->block >= base + h->arena_size || bsize > base + h->arena_size - h->block)
		return WHY("peer block %#" PRIx64 " is not inside its arena", h->block);
	return 0;
}

/* After mapping: the peer's block must say what its hello said. */
int block_check(const struct rpal_block *pb, const struct rpal_hello *h, uintptr_t pbase,
		size_t psize, char *why, size_t whylen)
{
	/* hello_check_peer() placed it by the hello's arena size: before
	 * reading it, the mapping's must hold it too. */
	uint64_t bsize = block_bytes(h);

	if ((uintptr_t)pb < pbase + RPAL_PAGE || (uintptr_t)pb >= pbase + psize || bsize > pbase + psize - (uintptr_t)pb)
		return WHY("peer block %p is not inside its mapped arena", (const void *)pb);
	if (pb->magic != RPAL_BLOCK_MAGIC || pb->version != RPAL_WIRE_VERSION || pb->nonce != h->block_nonce)
		return WHY("peer block header does not match its hello");
	if (pb->ring_entries != h->ring_entries || pb->ack_entries != h->ack_entries ||
	    pb->hdr_size != sizeof(struct rpal_block) || pb->ring_off != sizeof(struct rpal_block) ||
	    pb->ack_off != pb->ring_off + h->ring_entries * sizeof(struct rpal_slot))
		return WHY("peer block geometry does not match its hello");
	return 0;
}

void refuse_fill(struct rpal_refuse *r, int err, const char *reason)
{
	memset(r, 0, sizeof(*r));
	r->magic = RPAL_HELLO_MAGIC;
	r->version = RPAL_WIRE_VERSION;
	r->type = RPAL_HS_REFUSE;
	r->size = sizeof(*r);
	r->error = err;
	snprintf(r->reason, sizeof(r->reason), "%s", reason);
}

/*
 * 0 if buf is a well-formed refusal; *err is clamped to a plausible errno.
 * Any version is accepted, so that a refusal stays readable across
 * versions (it is how a peer tells us it speaks another one).
 */
int refuse_parse(const void *buf, size_t len, int *err, char *reason, size_t rlen)
{
	struct rpal_refuse r;

	if (len != sizeof(r))
		return -EPROTO;
	memcpy(&r, buf, sizeof(r));
	if (r.magic != RPAL_HELLO_MAGIC || r.type != RPAL_HS_REFUSE || r.size != sizeof(r))
		return -EPROTO;
	r.reason[sizeof(r.reason) - 1] = 0;
	/* A peer's text goes into our error messages and logs: printable
	 * ASCII only, so that it cannot drive a terminal. */
	for (char *p = r.reason; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	*err = (r.error > 0 && r.error < 4096) ? r.error : EPROTO;
	snprintf(reason, rlen, "%s", r.reason);
	return 0;
}

int hs_sendmsg(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(HS_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > HS_MAX_FDS)
		return -EINVAL;

	if (nfds > 0) {
		struct cmsghdr *cm;
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EPROTO;
}

/*
 * Receive one handshake datagram and at most maxfds descriptors.  A message
 * with more descriptors than that fails with -E2BIG, one that was
 * truncated with -EPROTO, an empty one (the peer hung up) with
 * -ECONNRESET; every descriptor that came with those is closed
 * (peer_fds_drop): a peer cannot make us leak or block on them.  Returns
 * the byte count.
 */
int hs_recvmsg(int sock, void *buf, size_t cap, int *fds, int maxfds, int *nfds)
{
	int all[SCM_MAX_FDS], nall, flags;
	ssize_t n = peer_recv_fds(sock, buf, cap, all, &nall, &flags);

	*nfds = 0;
	if (n < 0)
		return (int)n;
	if (n == 0 || nall > maxfds || (flags & (MSG_TRUNC | MSG_CTRUNC))) {
		/* An empty datagram is a hang-up, whatever came with it. */
		int err = n == 0 ? -ECONNRESET : nall > maxfds ? -E2BIG : -EPROTO;

		peer_fds_drop(all, nall);
		return err;
	}
	memcpy(fds, all, (size_t)nall * sizeof(int));
	*nfds = nall;
	return (int)n;
}

/* A sealed memfd of exactly size bytes: a peer can never shrink it under us. */
int memfd_check(int fd, uint64_t size, char *why, size_t whylen)
{
	struct stat st;
	struct statfs fs;
	int seals;

	/* Seals first: only memory files have them, and the look reaches no
	 * file system, so a file a peer serves itself (FUSE) cannot block it. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return WHY("peer's arena is not a memfd (no seals)");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return WHY("peer's arena descriptor is not a regular file");
	/* A hugetlb memfd maps only while huge pages are free: its mapping
	 * could fail after our reservation of the slot was given up for it. */
	if (fstatfs(fd, &fs) < 0 || fs.f_type != TMPFS_MAGIC)
		return WHY("peer's arena is not an ordinary memfd (hugetlb?)");
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return WHY("peer's arena is not sealed against shrink and grow (seals %#x)", seals);
	/* Nobody else can map it writable, and nobody can punch holes in it:
	 * a page we found written stays so (see peer_pages_known()). */
	if (!(seals & F_SEAL_FUTURE_WRITE))
		return WHY("peer's arena is not sealed against future writes (seals %#x)", seals);
	if ((uint64_t)st.st_size != size)
		return WHY("peer's arena is %lld bytes, its hello says %" PRIu64, (long long)st.st_size, size);
	return 0;
}

/* The wake page (RPAL_FEAT_WAKE_PAGE): a memfd of one page that cannot
 * shrink under our mapping (a peer may write it: its words are counters). */
int wake_page_check(int fd, char *why, size_t whylen)
{
	struct stat st;
	struct statfs fs;
	int seals;

	seals = fcntl(fd, F_GET_SEALS);         /* first: see memfd_check() */
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return WHY("peer's wake page is not a memfd sealed against shrink and grow");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || fstatfs(fd, &fs) < 0 || fs.f_type != TMPFS_MAGIC)
		return WHY("peer's wake page is not an ordinary memfd");
	/* Both sides write it: a write seal, or a descriptor opened for
	 * reading only, would make our shared writable mapping fail. */
	if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) || (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR)
		return WHY("peer's wake page cannot be written (sealed against writes, or opened read-only)");
	if (st.st_size != RPAL_WAKE_PAGE_SIZE)
		return WHY("peer's wake page is %lld bytes, expected %u", (long long)st.st_size, RPAL_WAKE_PAGE_SIZE);
	return 0;
}

/*
 * The peer's doorbell: one end of a connected Unix stream socket whose
 * other end is unnamed, as socketpair() makes (see doorbell_write()).  A
 * socket connected to a named one could be a third party's, which would
 * receive our rings; a pipe is what wire version 2 used.  On success the
 * end is shut for reading (we only send on it).
 */
int doorbell_check(int fd, char *why, size_t whylen)
{
	struct sockaddr_un peer;
	socklen_t len = sizeof(peer);
	int domain = 0, type = 0, queued = -1;
	socklen_t il = sizeof(int);

	/* getsockopt(), not fstat(): it reaches no file system (see
	 * memfd_check()); a descriptor that is no socket fails it. */
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &il) < 0)
		return WHY("peer's doorbell is not a socket");
	if (domain != AF_UNIX ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) < 0 || type != SOCK_STREAM)
		return WHY("peer's doorbell is not a Unix stream socket");
	if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
		return WHY("peer's doorbell is not connected: %s", strerror(errno));
	if (len != sizeof(sa_family_t))
		return WHY("peer's doorbell is connected to a named socket, not to the peer's own end");
	/* Nothing may wait in the end we hold: we never read it, so our
	 * close() would release whatever descriptors the peer sent into it,
	 * and releasing a lingering socket blocks.  Shut for reading, it
	 * refuses the peer's later sends; what came before must be nothing. */
	if (shutdown(fd, SHUT_RD) < 0)
		return WHY("cannot shut the peer's doorbell for reading: %s", strerror(errno));
	if (ioctl(fd, FIONREAD, &queued) < 0 || queued != 0)
		return WHY("peer's doorbell came with %d bytes queued in it", queued);
	return 0;
}
