/* SPDX-License-Identifier: MIT */
/*
 * Description: a wait that begins while the peer still sleeps the sleep we
 * woke it from.  Under the adaptive policy the waiter spins the peer's
 * wake-up out, up to spin_us, instead of sleeping through it: a reply sent
 * 3 ms after the wake-up is caught without a sleep, by rpal_recv() and by
 * rpal_epoll_wait(), and the wait is learnt as one that ended at once.  A
 * peer still asleep past spin_us puts the waiter to sleep, the reply still
 * arrives, and nothing is learnt from that wait.  The sleep policy never
 * spins.  The peer is this process's other end of the connection, its
 * sleep advertised by hand, its wake-up delayed by a thread on the other
 * CPU.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#include "internal.h"
#include "helpers.h"

#define SPIN_US   20000u        /* the ceiling of a spin */
#define WAKE_FAST 3             /* ms the peer takes to run: within SPIN_US */
#define WAKE_SLOW 100           /* and past it */
#define TRIES     3

static struct rpal_conn *peer;  /* the far end, whose sleep we fake */
static int peer_fd;
static _Atomic bool waiting;    /* the waiter is about to wait */
static const uint32_t sleep_bits = RPAL_WAIT_RX | RPAL_WAIT_RX_FUTEX;

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	t_check(pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0, "pin to CPU %d", cpu);
}

/* The peer: runs wake_ms after it was woken, takes the ping, answers. */
static void *peer_main(void *arg)
{
	long wake_ms = (long)(intptr_t)arg;
	char ping[8];

	pin(1);
	while (!atomic_load(&waiting))
		;
	usleep((useconds_t)wake_ms * 1000);
	wait_end(peer, sleep_bits);
	t_check(rpal_recv(peer_fd, ping, sizeof(ping), RPAL_NONBLOCK) == 4, "the peer found no ping");
	t_check(rpal_send(peer_fd, "pong", 4, 0) == 4, "the peer's pong");
	return NULL;
}

/*
 * Ping a peer that advertised a sleep (so the ping wakes it), then wait for
 * its pong, which comes wake_ms later, in rpal_recv() or in ep.  Returns
 * the sleeps the wait took.
 */
static uint64_t ping_pong(int fd, int ep, long wake_ms)
{
	struct rpal_conn *c = conn_of(fd);
	uint64_t sleeps = load_relaxed(&c->st->rx.sleeps), rung = load_relaxed(&c->st->tx.wakeups);
	uint64_t t0;
	pthread_t th;
	char pong[8];

	wait_begin(peer, sleep_bits);
	t_check(rpal_send(fd, "ping", 4, 0) == 4, "ping");
	t_check(load_relaxed(&c->st->tx.wakeups) == rung + 1, "the ping did not wake the sleeping peer");
	t_check(peer_waking(c), "the peer woken is not seen waking");
	atomic_store(&waiting, false);
	t_check(pthread_create(&th, NULL, peer_main, (void *)(intptr_t)wake_ms) == 0, "pthread_create");
	t0 = t_now_ns();
	atomic_store(&waiting, true);
	if (ep >= 0) {
		struct epoll_event ev;

		t_check(rpal_epoll_wait(ep, &ev, 1, -1) == 1 && ev.data.fd == fd, "rpal_epoll_wait");
	}
	t_check(rpal_recv(fd, pong, sizeof(pong), 0) == 4 && !memcmp(pong, "pong", 4), "no pong");
	t_check(t_now_ns() - t0 >= (uint64_t)wake_ms * 1000000, "the pong came before the peer ran");
	pthread_join(th, NULL);
	return load_relaxed(&c->st->rx.sleeps) - sleeps;
}

/* A fast wake-up caught without a sleep: the sleeps of the last of up to
 * TRIES tries.  A waiter descheduled for WAKE_FAST ms before its wait
 * began would find the peer awake, and could sleep through no fault of
 * the policy; that it does so TRIES times running is no coincidence. */
static uint64_t spun_out(int fd, int ep)
{
	uint64_t slept = 0;

	for (int i = 0; i < TRIES && (!i || slept); i++)
		slept = ping_pong(fd, ep, WAKE_FAST);
	return slept;
}

/* What a spin state has learnt: its waits by length. */
static bool same_learning(const struct rpal_spin *a, const struct rpal_spin *b)
{
	return !memcmp(a->reached, b->reached, sizeof(a->reached)) && !memcmp(a->ended, b->ended, sizeof(a->ended));
}

static void check(unsigned policy)
{
	struct rpal_config cfg;
	int fd, lfd, ep;
	uint64_t slept;

	rpal_config_default(&cfg);
	cfg.spin_us = SPIN_US;
	cfg.wait_policy = policy;
	t_ok(rpal_init(&cfg));
	lfd = t_self_pair(policy == RPAL_WAIT_POLICY_ADAPTIVE ? "waking-a" : "waking-s", &fd, &peer_fd);
	peer = conn_of(peer_fd);
	t_check(conn_of(fd)->pb == peer->me, "the two ends do not share a control block");

	if (policy == RPAL_WAIT_POLICY_SLEEP) {
		slept = ping_pong(fd, -1, WAKE_FAST);
		t_check(slept >= 1, "sleep policy: caught a reply %d ms away without sleeping", WAKE_FAST);
		printf("sleep policy: slept through the peer's wake-up\n");
		goto out;
	}

	/* Learn that replies come at once: every wait spins a sleep's cost. */
	struct rpal_spin *spin = &conn_of(fd)->rx_spin;
	for (int i = 0; i < 64; i++) {
		spin_budget(spin, i);
		spin_caught(spin, now_ns(), PACE_PEER);
	}
	slept = spun_out(fd, -1);
	t_check(slept == 0, "rpal_recv: slept through a peer waking %d ms, %d tries of %d", WAKE_FAST, TRIES, TRIES);
	t_check(spin->this_ns < WAKE_FAST * 1000000u, "rpal_recv: a budget of %u ns, not a sleep's cost", spin->this_ns);
	printf("rpal_recv: spun out a peer's %d ms wake-up on a budget of %u ns\n", WAKE_FAST, spin->this_ns);

	struct rpal_spin before = *spin;
	slept = ping_pong(fd, -1, WAKE_SLOW);
	t_check(slept >= 1, "rpal_recv: spun %d ms, past spin_us", WAKE_SLOW);
	t_check(same_learning(spin, &before), "rpal_recv: learnt from a wake-up past spin_us");
	printf("rpal_recv: slept once a wake-up outlasted spin_us, learning nothing from it\n");

	ep = (int)t_ok(rpal_epoll_create(0));
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "rpal_epoll_ctl: %s", strerror(errno));
	slept = spun_out(fd, ep);
	t_check(slept == 0, "rpal_epoll_wait: slept through a peer waking %d ms, %d tries of %d", WAKE_FAST, TRIES,
		TRIES);
	slept = ping_pong(fd, ep, WAKE_SLOW);
	t_check(slept >= 1, "rpal_epoll_wait: spun %d ms, past spin_us", WAKE_SLOW);
	printf("rpal_epoll_wait: spun out a %d ms wake-up, slept through a %d ms one\n", WAKE_FAST, WAKE_SLOW);
	rpal_close(ep);
out:
	rpal_close(fd);
	rpal_close(peer_fd);
	rpal_close(lfd);
	rpal_fini();
}

int main(void)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		t_skip("needs two CPUs: the peer wakes on the other one");
	pin(0);
	check(RPAL_WAIT_POLICY_ADAPTIVE);
	check(RPAL_WAIT_POLICY_SLEEP);
	printf("PASS\n");
	return 0;
}
