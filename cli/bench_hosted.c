/* SPDX-License-Identifier: MIT */
/*
 * bench_hosted.c - rpal-bench-hosted: the two programs of the rpal-hosted
 * transport.  tr_hosted.c starts them in one process:
 *
 *   rpal run -q rpal-bench-hosted server 3 ::: rpal-bench-hosted client 3
 *
 * Each is an ordinary PIE linked with -rdynamic and librpal, so each has
 * its own copy of librpal; their connection is local, and every send to the
 * server parked in rpal_epoll_wait() is an RPAL call.  They run the
 * rpal-connected transport (bench_rpal.c) through run.c's own loops, so the
 * messages, checks and stamps are those of every other transport.
 *
 * The latency suite adds two loops before the ping-pong, on the client:
 *   - the switch pair: hosted_switch_wrfs into a coroutine and back, the
 *     floor of any call;
 *   - the call round trip: rdtscp around rpal_send, while the server reads
 *     each message (rpal_recv) and waits again, with no echo.  Every timed
 *     send must have been a call (the host block counts them).
 *
 * On a failure a program records it (bt_fail) and ends the launcher, and
 * with it the other program, which would otherwise wait for it forever.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <rpal.h>
#include "hosted.h"
#include "hosted_bench.h"
#include "tsc.h"

/* Sends that did not become calls, tolerated while the server first parks. */
#define SYNC_MAX 100000

static void __attribute__((noreturn)) die(void)
{
	/* Each program is its own process: end the launcher, and the other
	 * program goes with it (its parent-death signal). */
	kill(getppid(), SIGKILL);
	syscall(SYS_exit_group, 1);
	for (;;)
		;
}

static int pin(struct bt_ctx *c, int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	/* This thread only: the program's main thread. */
	if (sched_setaffinity(0, sizeof(set), &set))
		return bt_fail(c, errno, "%s: cannot pin to CPU %d: %s", c->role ? "client" : "server",
			       cpu, strerror(errno));
	return 0;
}

/* RPAL calls into the server program so far (it is program 0). */
static uint64_t server_calls(void)
{
	struct rpal_prog_stat st[2];

	return rpal_hosted_stat(st, 2) >= 1 ? st[0].calls : 0;
}

/* ------------------------------------------------------------ switch pair */

static hosted_ctx sw_main, sw_co;

static void sw_body(void *arg)
{
	(void)arg;
	for (;;)
		hosted_switch_wrfs(&sw_co, &sw_main);
}

/* As hosted/bench_switch.c: a coroutine on its own stack and a fake TCB. */
static void switch_pairs(struct hb_file *f, uint64_t *out)
{
	static char stack[64 << 10] __attribute__((aligned(64)));
	static uint64_t tcb[64] __attribute__((aligned(64)));

	hosted_ctx_make(&sw_co, stack, sizeof(stack), sw_body, NULL);
	tcb[0] = (uintptr_t)tcb;			/* fs:0 points at itself */
	tcb[5] = ((uint64_t *)hosted_get_fs())[5];	/* the stack canary */
	sw_co.fs = (uintptr_t)tcb;
	for (uint64_t i = 0; i < f->warmup + f->count; i++) {
		uint64_t t0 = tsc_now();

		hosted_switch_wrfs(&sw_main, &sw_co);
		if (i >= f->warmup)
			out[i - f->warmup] = tsc_now() - t0;
	}
}

/* ------------------------------------------------------------ call round trip */

/*
 * Client: sends until one is a call (the server has parked) and at least
 * warmup were sent, then count timed sends.  hdr.tsc = 1 marks the last.
 */
static int calls_drive(struct hb_file *f, struct bt_ctx *c, uint64_t *out)
{
	size_t size = c->spec->size;
	unsigned char *b = calloc(1, size);
	int fd = rp_hosted_fd(c);
	uint64_t seq = 0, misses = 0, before;
	struct msg_hdr h = { 0, 0, (uint32_t)size };
	ssize_t n;

	if (!b)
		return bt_fail(c, ENOMEM, "client: out of memory");
	for (;;) {
		h.seq = (uint32_t)seq++;
		memcpy(b, &h, sizeof(h));
		before = server_calls();
		n = rpal_send(fd, b, size, 0);
		if (n != (ssize_t)size)
			return bt_fail(c, n < 0 ? (int)-n : EIO, "client: rpal_send: %s",
				       n < 0 ? rpal_strerror((int)n) : "short send");
		if (server_calls() != before) {
			if (seq >= f->warmup)
				break;
			continue;
		}
		if (++misses > SYNC_MAX)
			return bt_fail(c, EPROTO, "client: %llu sends to the waiting server were not RPAL "
				       "calls", (unsigned long long)misses);
		usleep(20);	/* let the server's thread reach its wait */
	}
	before = server_calls();
	for (uint64_t i = 0; i < f->count; i++) {
		uint64_t t0;

		h.seq = (uint32_t)seq++;
		h.tsc = i + 1 == f->count;
		memcpy(b, &h, sizeof(h));
		t0 = tsc_now();
		n = rpal_send(fd, b, size, 0);
		out[i] = tsc_now() - t0;
		if (n != (ssize_t)size)
			return bt_fail(c, n < 0 ? (int)-n : EIO, "client: rpal_send: %s",
				       n < 0 ? rpal_strerror((int)n) : "short send");
	}
	f->calls = server_calls() - before;
	free(b);
	if (f->calls != f->count)
		return bt_fail(c, EPROTO, "client: only %llu of %llu timed sends were RPAL calls",
			       (unsigned long long)f->calls, (unsigned long long)f->count);
	return 0;
}

/* Server: read each message, in order, and wait again; no echo. */
static int calls_serve(const struct transport *t, struct bt_ctx *c)
{
	for (uint32_t i = 0;; i++) {
		const void *m = t->recv(c);
		struct msg_hdr h;

		if (!m)
			return -EIO;
		memcpy(&h, m, sizeof(h));
		t->release(c);
		if (h.seq != i || h.len != c->spec->size)
			return bt_fail(c, EBADMSG, "server: call message %u arrived corrupted", i);
		if (h.tsc)
			return 0;
	}
}

/* ------------------------------------------------------------ the roles */

/* Wait until both programs have counted themselves in *n. */
static void barrier(_Atomic uint32_t *n)
{
	atomic_fetch_add(n, 1);
	while (atomic_load(n) < 2)
		usleep(100);
}

/*
 * Closing a connection still reads the peer's block, and a program's
 * rpal_fini (at its exit) may take its arena away: both close, then both
 * may end.
 */
static int finish(struct hb_file *f, const struct transport *t, struct bt_ctx *c, int ret)
{
	if (ret < 0)
		return ret;
	barrier(&f->done);
	t->close(c);
	barrier(&f->closed);
	return 0;
}

static int server(struct hb_file *f, struct bt_ctx *c)
{
	const struct transport *t = &tr_rpal_connected;
	int ret;

	f->sh.oneway = hb_samples(f, HB_ONEWAY);
	f->sh.rtt = hb_samples(f, HB_RTT);
	ret = t->open(c);
	if (ret < 0)
		return ret;
	/* R: the pointers above, before the client may use them. */
	atomic_store_explicit(&f->sh.server_ready, 1, memory_order_release);
	ret = t->accept(c);
	if (!ret && c->spec->suite == SU_LATENCY)
		ret = calls_serve(t, c);
	if (!ret)
		ret = c->spec->suite == SU_RPC ? rpc_serve(t, c) : bt_serve(t, c);
	return finish(f, t, c, ret);
}

static int client(struct hb_file *f, struct bt_ctx *c)
{
	const struct transport *t = &tr_rpal_connected;
	int ret;

	/* A: pairs with the server's R. */
	while (!atomic_load_explicit(&f->sh.server_ready, memory_order_acquire))
		usleep(100);
	ret = t->open(c);
	if (ret < 0)
		return ret;
	if (c->spec->suite == SU_LATENCY) {
		switch_pairs(f, hb_samples(f, HB_SWITCH));
		ret = calls_drive(f, c, hb_samples(f, HB_CALL));
	}
	if (!ret)
		ret = c->spec->suite == SU_RPC ? rpc_drive(t, c) : bt_drive(t, c);
	return finish(f, t, c, ret);
}

static struct hb_file *map_file(int fd)
{
	struct hb_file *f;
	struct stat st;

	if (fstat(fd, &st) || (size_t)st.st_size < HB_HEAD)
		return NULL;
	/* Populated now: no sample store takes a page fault mid-run. */
	f = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (f == MAP_FAILED)
		return NULL;
	if (f->magic != HB_MAGIC || f->version != HB_VERSION || f->spec_size != sizeof(struct run_spec) ||
	    f->shared_size != sizeof(struct run_shared) ||
	    (size_t)st.st_size < HB_HEAD + (size_t)f->narrays * f->count * sizeof(uint64_t))
		return NULL;
	return f;
}

int main(int argc, char **argv)
{
	struct bt_ctx c = { 0 };
	struct hb_file *f;
	int ret;

	if (argc != 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: rpal-bench-hosted server|client FD (started by rpal bench)\n");
		return 2;
	}
	f = map_file(atoi(argv[2]));
	if (!f) {
		fprintf(stderr, "rpal-bench-hosted: fd %s is not a results file of this build\n", argv[2]);
		die();
	}
	c.spec = &f->spec;
	c.sh = &f->sh;
	c.role = strcmp(argv[1], "server") ? ROLE_CLIENT : ROLE_SERVER;
	ret = rp_hosted_setup(&c, f->service);
	if (!ret)
		ret = pin(&c, c.role == ROLE_SERVER ? f->spec.cpu_server : f->spec.cpu_client);
	if (!ret)
		ret = c.role == ROLE_SERVER ? server(f, &c) : client(f, &c);
	if (ret < 0)
		die();
	return 0;
}
