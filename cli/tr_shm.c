/* SPDX-License-Identifier: MIT */
/*
 * tr_shm.c - four transports over one shared-memory ring per direction,
 * differing only in how a consumer waits for an empty ring to fill:
 *
 *   shm-spin  spins on the producer's index: the cache-line hand-off floor;
 *   shm-yield polls it with sched_yield() in between: on one shared CPU
 *             the yield hands the CPU to the peer (iceoryx2's polling mode);
 *   futex     sleeps in FUTEX_WAIT on that index; the producer calls
 *             FUTEX_WAKE only when the consumer said it sleeps;
 *   eventfd   blocks in read() of an eventfd the producer writes.
 *
 * The payload sits in ring slots.  A copying send memcpy()s into the slot
 * and a copying receive out of it; zero copy builds and reads in place.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include "bench.h"
#include "tsc.h"

enum shm_kind { SHM_SPIN, SHM_YIELD, SHM_FUTEX, SHM_EVENTFD };

/*
 * Indices run free over 32 bits and are compared by unsigned difference;
 * each is written by one side only and sits on its own cache line.
 */
struct ring {
	_Alignas(64) atomic_uint tail;		/* producer: messages published */
	atomic_uint sleeping;			/* consumer: may be in FUTEX_WAIT */
	_Alignas(64) atomic_uint head;		/* consumer: messages released */
	_Alignas(64) unsigned char slots[];
};

struct shm {
	enum shm_kind kind;
	size_t slot, nslots, ring_len;
	struct ring *ring[2];		/* [0] client -> server, [1] server -> client */
	int efd[2];			/* eventfd per ring */
	/* per process, after fork */
	struct ring *tx, *rx;
	int tx_efd, rx_efd;
	unsigned tx_tail, rx_head;
	unsigned char *priv_tx, *priv_rx;
};

static long futex(atomic_uint *uaddr, int op, unsigned val)
{
	/* Not FUTEX_PRIVATE: the word is shared between two processes. */
	return syscall(SYS_futex, uaddr, op, val, NULL, NULL, 0);
}

static unsigned char *slot_of(struct shm *m, struct ring *r, unsigned idx)
{
	return r->slots + (size_t)(idx % m->nslots) * m->slot;
}

static int shm_setup(struct bt_ctx *c, enum shm_kind kind)
{
	struct shm *m = calloc(1, sizeof(*m));
	size_t size = c->spec->size;

	if (!m)
		return bt_fail(c, ENOMEM, "out of memory");
	c->priv = m;
	m->kind = kind;
	m->efd[0] = m->efd[1] = -1;
	m->slot = (size + 63) & ~(size_t)63;
	/* Enough slots for a batch; large messages only ping-pong. */
	m->nslots = size <= 4096 ? 256 : 2;
	m->ring_len = (sizeof(struct ring) + m->slot * m->nslots + 4095) & ~(size_t)4095;
	for (int i = 0; i < 2; i++) {
		m->ring[i] = mmap(NULL, m->ring_len, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (m->ring[i] == MAP_FAILED) {
			m->ring[i] = NULL;
			return bt_fail(c, errno, "mmap ring: %s", strerror(errno));
		}
		if (kind == SHM_EVENTFD) {
			m->efd[i] = eventfd(0, EFD_CLOEXEC);
			if (m->efd[i] < 0)
				return bt_fail(c, errno, "eventfd: %s", strerror(errno));
		}
	}
	return 0;
}

static int spin_setup(struct bt_ctx *c) { return shm_setup(c, SHM_SPIN); }
static int yield_setup(struct bt_ctx *c) { return shm_setup(c, SHM_YIELD); }
static int futex_setup(struct bt_ctx *c) { return shm_setup(c, SHM_FUTEX); }
static int efd_setup(struct bt_ctx *c) { return shm_setup(c, SHM_EVENTFD); }

static int shm_open_(struct bt_ctx *c)
{
	struct shm *m = c->priv;
	int in = c->role == ROLE_SERVER ? 0 : 1;

	if (c->spec->suite == SU_THROUGHPUT && c->spec->batch > m->nslots)
		return bt_fail(c, EINVAL, "batch %u exceeds the ring's %zu slots", c->spec->batch,
			       m->nslots);
	/* rpc: every request and reply in flight needs a slot, or both sides block. */
	if (c->spec->suite == SU_RPC && c->spec->concurrency > m->nslots)
		return bt_fail(c, EINVAL, "concurrency %u exceeds the ring's %zu slots",
			       c->spec->concurrency, m->nslots);
	m->rx = m->ring[in];
	m->tx = m->ring[!in];
	m->rx_efd = m->efd[in];
	m->tx_efd = m->efd[!in];
	m->priv_tx = malloc(c->spec->size);
	m->priv_rx = malloc(c->spec->size);
	if (!m->priv_tx || !m->priv_rx)
		return bt_fail(c, ENOMEM, "out of memory");
	return 0;
}

static void *shm_tx_buf(struct bt_ctx *c)
{
	struct shm *m = c->priv;
	unsigned spins = 0;

	/* A0: acquire pairs with the consumer's release of head (R1): its reads are done. */
	while (m->tx_tail - atomic_load_explicit(&m->tx->head, memory_order_acquire) >= m->nslots) {
		if (m->kind == SHM_YIELD)
			sched_yield();
		else
			bt_relax(&spins);
	}
	return c->spec->zerocopy ? slot_of(m, m->tx, m->tx_tail) : m->priv_tx;
}

static int shm_send(struct bt_ctx *c, void *buf, int more)
{
	struct shm *m = c->priv;
	uint64_t one = 1;

	if (!c->spec->zerocopy)
		memcpy(slot_of(m, m->tx, m->tx_tail), buf, c->spec->size);
	/* R0: release publishes the slot; pairs with the consumer's acquire (A1). */
	atomic_store_explicit(&m->tx->tail, ++m->tx_tail, memory_order_release);
	if (more)
		return 0;
	switch (m->kind) {
	case SHM_SPIN:
	case SHM_YIELD:
		break;
	case SHM_FUTEX:
		/*
		 * F0: orders the tail store before the sleeping load; pairs with
		 * the consumer's F1, so one of us sees the other (no lost wake-up).
		 */
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&m->tx->sleeping, memory_order_relaxed) &&
		    futex(&m->tx->tail, FUTEX_WAKE, 1) < 0)
			return bt_fail(c, errno, "FUTEX_WAKE: %s", strerror(errno));
		break;
	case SHM_EVENTFD:
		if (write(m->tx_efd, &one, sizeof(one)) != sizeof(one))
			return bt_fail(c, errno, "eventfd write: %s", strerror(errno));
		break;
	}
	return 0;
}

static const void *shm_recv(struct bt_ctx *c)
{
	struct shm *m = c->priv;
	unsigned spins = 0, tail;
	uint64_t cnt;

	/* A1: acquire pairs with R0: the slot's bytes are visible. */
	while ((tail = atomic_load_explicit(&m->rx->tail, memory_order_acquire)) == m->rx_head) {
		switch (m->kind) {
		case SHM_SPIN:
			bt_relax(&spins);
			break;
		case SHM_YIELD:
			sched_yield();
			break;
		case SHM_FUTEX:
			atomic_store_explicit(&m->rx->sleeping, 1, memory_order_relaxed);
			/* F1: pairs with F0. */
			atomic_thread_fence(memory_order_seq_cst);
			if (atomic_load_explicit(&m->rx->tail, memory_order_relaxed) == m->rx_head &&
			    futex(&m->rx->tail, FUTEX_WAIT, tail) < 0 && errno != EAGAIN &&
			    errno != EINTR) {
				bt_fail(c, errno, "FUTEX_WAIT: %s", strerror(errno));
				return NULL;
			}
			atomic_store_explicit(&m->rx->sleeping, 0, memory_order_relaxed);
			break;
		case SHM_EVENTFD:
			if (read(m->rx_efd, &cnt, sizeof(cnt)) != sizeof(cnt) && errno != EINTR) {
				bt_fail(c, errno, "eventfd read: %s", strerror(errno));
				return NULL;
			}
			break;
		}
	}
	if (c->spec->zerocopy)
		return slot_of(m, m->rx, m->rx_head);
	memcpy(m->priv_rx, slot_of(m, m->rx, m->rx_head), c->spec->size);
	return m->priv_rx;
}

static void shm_release(struct bt_ctx *c)
{
	struct shm *m = c->priv;

	/* R1: release: our reads of the slot complete before the producer reuses it. */
	atomic_store_explicit(&m->rx->head, ++m->rx_head, memory_order_release);
}

static void shm_close(struct bt_ctx *c)
{
	struct shm *m = c->priv;

	free(m->priv_tx);
	free(m->priv_rx);
}

static void shm_teardown(struct bt_ctx *c)
{
	struct shm *m = c->priv;

	if (!m)
		return;
	for (int i = 0; i < 2; i++) {
		if (m->ring[i])
			munmap(m->ring[i], m->ring_len);
		if (m->efd[i] >= 0)
			close(m->efd[i]);
	}
	free(m);
}

#define SHM_OPS \
	.flags = TF_ZEROCOPY, .open = shm_open_, .tx_buf = shm_tx_buf, .send = shm_send, \
	.recv = shm_recv, .release = shm_release, .close = shm_close, .teardown = shm_teardown

const struct transport tr_shm_spin = {
	.name = "shm-spin",
	.what = "shared-memory ring, both sides spin (the cache-line hand-off floor)",
	.setup = spin_setup,
	SHM_OPS,
};

const struct transport tr_shm_yield = {
	.name = "shm-yield",
	.what = "shared-memory ring, both sides poll with sched_yield() (iceoryx2's polling mode)",
	.setup = yield_setup,
	SHM_OPS,
};

const struct transport tr_futex = {
	.name = "futex",
	.what = "shared-memory ring, FUTEX_WAIT / FUTEX_WAKE only when the peer sleeps",
	.setup = futex_setup,
	SHM_OPS,
};

const struct transport tr_eventfd = {
	.name = "eventfd",
	.what = "shared-memory ring, blocking read() of an eventfd the producer writes",
	.setup = efd_setup,
	SHM_OPS,
};
