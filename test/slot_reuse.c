/* SPDX-License-Identifier: MIT */
/*
 * Description: a peer killed mid-message while new processes churn through
 * the slots.  With only three slots, the dead peer's slot is the one a
 * newcomer would take; while we still read what the dead peer sent (an
 * inline message, a buffer we hold by pointer, messages not yet received),
 * no newcomer may get that slot, and every byte must arrive unchanged,
 * then ECONNRESET.  Newcomers are accepted on another thread meanwhile,
 * the way a server would.  After the connection is closed, the slot is
 * free again.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/prctl.h>

#include "helpers.h"

#define NR_SLOTS   3
#define BIG        (300 * 1024)
#define MID        (64 * 1024)
#define CHURNERS   4

static char service[64];
static int lfd;
static _Atomic int victim_fd = -1;   /* the acceptor hands it over */

/* What the victim of round r sends: message i of n has a pattern of its own. */
static void fill(unsigned char *p, size_t len, unsigned r, unsigned i)
{
	for (size_t k = 0; k < len; k++)
		p[k] = (unsigned char)(k * 7 + r * 13 + i * 101);
}

static size_t msg_len(unsigned i)
{
	static const size_t lens[] = { 32, MID, 17, BIG, 40, MID + 1 };
	return lens[i];
}
#define NR_MSGS 6

static void check_msg(const void *data, size_t len, unsigned r, unsigned i)
{
	static unsigned char want[BIG];

	t_check(len == msg_len(i), "round %u message %u: %zu bytes, sent %zu", r, i, len, msg_len(i));
	fill(want, len, r, i);
	t_check(memcmp(data, want, len) == 0, "round %u message %u: bytes differ", r, i);
}

static void victim(unsigned r, int ready)
{
	static unsigned char buf[BIG];
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);   /* a failed test leaves no victim behind */
	fd = t_ok(rpal_connect(service, NULL, 0));
	t_ok(rpal_send(fd, "victim", 6, 0));
	for (unsigned i = 0; i < NR_MSGS; i++) {
		fill(buf, msg_len(i), r, i);
		t_ok(rpal_send(fd, buf, msg_len(i), 0));
	}
	t_check(write(ready, "r", 1) == 1, "write");
	for (;;)
		pause();
}

/* A short-lived newcomer: exits 10 + its slot once served, 3 if every slot was taken. */
static void churner(void)
{
	unsigned slot;
	char b[8];
	int fd, ret = rpal_init(NULL);

	if (ret == -EBUSY)
		_exit(3);
	t_ok(ret);
	t_ok(rpal_self(&slot, NULL, NULL));
	fd = t_ok(rpal_connect(service, NULL, 0));
	t_ok(rpal_send(fd, "hi", 2, 0));
	t_check(rpal_recv(fd, b, sizeof(b), 0) == 2, "churner: no reply");
	_exit(10 + (int)slot);
}

/* Could a claimer take slot's mapped byte (PROTOCOL.md section 1)? */
static bool mapped_byte_free(unsigned slot)
{
	char path[256];
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 4096 + slot, .l_len = 1 };
	int fd, ret;

	snprintf(path, sizeof(path), "%s/slots.lock", getenv("RPAL_RUNTIME_DIR"));
	fd = open(path, O_RDWR | O_CLOEXEC);
	t_check(fd >= 0, "open %s: %s", path, strerror(errno));
	ret = fcntl(fd, F_OFD_SETLK, &fl);
	close(fd);   /* drops what we took */
	return ret == 0;
}

/* The server's other work: accept newcomers, answer each once, close;
 * hand the victim's connection to the main thread. */
static void *acceptor(void *arg)
{
	(void)arg;
	for (;;) {
		char b[8];
		int fd = rpal_accept(lfd, 0);
		ssize_t n;

		if (fd < 0)
			return NULL;    /* the listener was closed */
		n = rpal_recv(fd, b, sizeof(b), 0);
		if (n == 6 && !memcmp(b, "victim", 6)) {
			atomic_store(&victim_fd, fd);
			continue;
		}
		if (n == 2)
			rpal_send(fd, "ok", 2, 0);
		rpal_close(fd);
	}
}

int main(void)
{
	static unsigned char copy[BIG];
	long rounds = t_scaled(100);
	unsigned kept_off = 0, busy = 0;
	struct rpal_stats st;
	pthread_t th;   /* left blocked in rpal_accept at exit */
	unsigned me, last_vslot = NR_SLOTS;

	setenv("RPAL_NR_SLOTS", "3", 1);   /* children inherit it */
	if (!getenv("RPAL_RUNTIME_DIR")) {  /* mapped_byte_free() opens its lock file */
		static char dir[] = "/tmp/rpal-slot-reuse-XXXXXX";
		t_check(mkdtemp(dir), "mkdtemp");
		setenv("RPAL_RUNTIME_DIR", dir, 1);
	}
	snprintf(service, sizeof(service), "reuse-%d", (int)getpid());
	lfd = t_ok(rpal_listen(service, NULL));
	t_ok(rpal_self(&me, NULL, NULL));
	t_check(pthread_create(&th, NULL, acceptor, NULL) == 0, "pthread_create");

	printf("%ld rounds: a peer is killed after sending %d messages, %d newcomers churn through "
	       "%d slots, then we read\n", rounds, NR_MSGS, CHURNERS, NR_SLOTS);
	for (unsigned r = 0; r < rounds; r++) {
		struct rpal_msg held[2];
		unsigned nheld = 0, next = 0, vslot = NR_SLOTS;
		int pfd[2], vfd = -1, st_;
		pid_t v;
		char c;

		t_check(pipe(pfd) == 0, "pipe");
		v = fork();
		if (v == 0)
			victim(r, pfd[1]);
		close(pfd[1]);
		t_check(read(pfd[0], &c, 1) == 1, "round %u: the victim did not start", r);
		close(pfd[0]);

		for (uint64_t end = t_now_ns() + 2000000000ull; vfd < 0 && t_now_ns() < end; usleep(100))
			vfd = atomic_exchange(&victim_fd, -1);
		t_check(vfd >= 0, "round %u: the victim's connection never showed", r);
		{
			struct rpal_conn_info ci;
			t_ok(rpal_conn_info(vfd, &ci));
			t_check(ci.peer_pid == v, "round %u: the connection is not the victim's", r);
			vslot = ci.peer_slot;
		}

		/* Consume part of what it sent, by round: nothing, one inline
		 * message, or an inline message and a buffer held by pointer. */
		for (unsigned k = 0; k < r % 3; k++) {
			t_check(rpal_recv_msg(vfd, &held[nheld], 1, 0) == 1, "round %u: receive", r);
			nheld++;
			next++;
		}

		kill(v, SIGKILL);
		t_check(waitpid(v, &st_, 0) == v, "waitpid");
		{       /* churn only once we know it died: its slot looks free then */
			struct rpal_conn_info ci;
			t_check(t_eventually(rpal_conn_info(vfd, &ci) == 0 && !ci.peer_alive, 2000),
				"round %u: the victim's death went unseen", r);
		}

		for (unsigned k = 0; k < CHURNERS; k++) {
			pid_t ch = fork();
			if (ch == 0)
				churner();
			t_check(waitpid(ch, &st_, 0) == ch && WIFEXITED(st_), "round %u: churner died", r);
			if (WEXITSTATUS(st_) == 3) {
				busy++;
				continue;
			}
			t_check(WEXITSTATUS(st_) >= 10, "round %u: churner failed (%d)", r, WEXITSTATUS(st_));
			t_check((unsigned)WEXITSTATUS(st_) - 10 != vslot,
				"round %u: a newcomer got slot %u, which we still map for the dead peer", r, vslot);
			kept_off++;
		}

		/* Everything it sent, unchanged: what we held, then the rest. */
		for (unsigned k = 0; k < nheld; k++)
			check_msg(held[k].data, held[k].len, r, k);
		t_ok(rpal_msg_release(vfd, held, nheld));
		for (; next < NR_MSGS; next++) {
			ssize_t n = rpal_recv(vfd, copy, sizeof(copy), 0);
			t_check(n >= 0, "round %u: message %u lost: %s", r, next, rpal_strerror((int)n));
			check_msg(copy, (size_t)n, r, next);
		}
		t_check(rpal_recv(vfd, copy, sizeof(copy), 0) == -ECONNRESET, "round %u: no ECONNRESET", r);
		t_check(!mapped_byte_free(vslot), "round %u: slot %u is claimable while we map it", r, vslot);
		t_ok(rpal_close(vfd));
		last_vslot = vslot;
	}
	printf("  every message arrived intact; %u newcomers served on other slots, %u found all slots taken\n",
	       kept_off, busy);
	t_check(kept_off > 0, "no newcomer was ever served");

	printf("once closed, the dead peer's mapping is gone and its slot can be claimed\n");
	t_ok(rpal_stats(&st));
	t_check(t_eventually((rpal_stats(&st), st.nr_peers_mapped == 0), 15000),
		"%u peer arenas still mapped", st.nr_peers_mapped);
	t_check(mapped_byte_free(last_vslot), "slot %u's mapped byte is still locked", last_vslot);
	printf("an idle server lets a departed newcomer's slot go: nobody calls into rpal meanwhile\n");
	{
		int s;
		pid_t ch = fork();
		if (ch == 0)
			churner();
		t_check(waitpid(ch, &s, 0) == ch && WIFEXITED(s) && WEXITSTATUS(s) >= 10, "churner");
		unsigned slot = (unsigned)WEXITSTATUS(s) - 10;
		uint64_t t0 = t_now_ns();
		t_check(t_eventually(mapped_byte_free(slot), 2000), "slot %u still mapped 2 s after its owner left", slot);
		printf("  slot %u free again after %.0f ms\n", slot, (t_now_ns() - t0) / 1e6);
	}
	printf("PASS\n");
	return T_EXIT_PASS;
}
