/* SPDX-License-Identifier: MIT */
/*
 * run.c - one benchmark cell: fork a server and a client, pin them, drive
 * the messages, collect the samples.  The loops are the same for every
 * transport, so a difference in the numbers is a difference in transport.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "bench.h"
#include "tsc.h"

int bt_fail(struct bt_ctx *c, int err, const char *fmt, ...)
{
	char *dst = c->sh->err[c->role];
	va_list ap;

	if (!dst[0]) {
		va_start(ap, fmt);
		vsnprintf(dst, sizeof(c->sh->err[0]), fmt, ap);
		va_end(ap);
	}
	return err > 0 ? -err : (err < 0 ? err : -EIO);
}

void bt_relax(unsigned *spins)
{
	/*
	 * ~256 pauses cover a cross-core hand-off many times over; past that
	 * the peer is probably on our CPU and only runs if we yield.
	 */
	if (++*spins < 256)
		tsc_pause();
	else
		sched_yield();
}

/* Payload byte of message seq: changes every message, so stale data fails. */
static inline unsigned char pattern(uint32_t seq)
{
	return (unsigned char)(seq * 151u + 29u);
}

static void fill(void *buf, uint32_t seq, size_t size)
{
	struct msg_hdr h = { 0, seq, (uint32_t)size };

	memcpy(buf, &h, sizeof(h));
	memset((char *)buf + sizeof(h), pattern(seq), size - sizeof(h));
}

/* Read every payload byte; true when the message is message seq, intact. */
static int check(const void *buf, uint32_t seq, size_t size, uint64_t *tsc)
{
	const unsigned char *p = buf;
	uint64_t want = 0x0101010101010101ull * pattern(seq), acc = 0;
	struct msg_hdr h;
	size_t i = sizeof(h);

	memcpy(&h, buf, sizeof(h));
	for (; i + 8 <= size; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		acc |= w ^ want;
	}
	for (; i < size; i++)
		acc |= p[i] ^ (want & 0xff);
	*tsc = h.tsc;
	return !acc && h.seq == seq && h.len == size;
}

static void stamp(void *buf, uint64_t tsc)
{
	memcpy(buf, &tsc, sizeof(tsc));
}

static uint64_t tv_ns(struct timeval tv)
{
	return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

static void cpu_mark(struct cpu_use *u, int end)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	if (end) {
		u->user_ns = tv_ns(ru.ru_utime) - u->user_ns;
		u->sys_ns = tv_ns(ru.ru_stime) - u->sys_ns;
	} else {
		u->user_ns = tv_ns(ru.ru_utime);
		u->sys_ns = tv_ns(ru.ru_stime);
	}
}

/* Messages the client sends, warm-up included, and of those the measured. */
static uint64_t measured(const struct run_spec *s)
{
	if (s->suite == SU_THROUGHPUT)
		return (s->count + s->batch - 1) / s->batch * s->batch;
	return s->count;
}

static uint64_t warm(const struct run_spec *s)
{
	if (s->suite == SU_THROUGHPUT)
		return (uint64_t)(s->warmup + s->batch - 1) / s->batch * s->batch;
	return s->warmup;
}

/*
 * Receive message seq and check its pattern; *sent: the TSC stamped in it.
 * NULL if the transport failed (*err -EIO) or the message arrived
 * corrupted (*err from bt_fail, naming who and what).  Always inline: the
 * check of a large message lies between receipt and the server's stamp,
 * and out of line it cost the hosted 1 MiB zero-copy one-way 10% more.
 */
static inline __attribute__((always_inline))
const void *recv_checked(const struct transport *t, struct bt_ctx *c, uint64_t seq, const char *what,
			 uint64_t *sent, int *err)
{
	const void *m = t->recv(c);

	if (!m) {
		*err = -EIO;
		return NULL;
	}
	if (!check(m, (uint32_t)seq, c->spec->size, sent)) {
		c->sh->bad++;
		*err = bt_fail(c, EBADMSG, "%s %llu arrived corrupted", what, (unsigned long long)seq);
		return NULL;
	}
	return m;
}

/* Send m back, then release it: copied out first, since zero-copy data
 * goes away with the release. */
static int echo(const struct transport *t, struct bt_ctx *c, const void *m)
{
	void *out = t->tx_buf(c);

	if (!out)
		return -EIO;
	memcpy(out, m, c->spec->size);
	t->release(c);
	return t->send(c, out, 0);
}

int bt_serve(const struct transport *t, struct bt_ctx *c)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh;
	uint64_t w = warm(s), total = w + measured(s);
	unsigned batch = s->suite == SU_THROUGHPUT ? s->batch : 1;

	for (uint64_t i = 0; i < total; i++) {
		const void *m;
		uint64_t sent, now;
		int ret;

		if (i == w && s->suite == SU_CPU)
			cpu_mark(&sh->cpu[ROLE_SERVER], 0);
		m = recv_checked(t, c, i, "server: message", &sent, &ret);
		if (!m)
			return ret;
		now = tsc_now();
		if (i >= w) {
			/* Cross-CPU TSC skew could make this negative: clamp and count. */
			if (now < sent) {
				sh->skew++;
				now = sent;
			}
			sh->oneway[i - w] = now - sent;
		}
		if ((i + 1) % batch) {
			t->release(c);
			continue;
		}
		ret = echo(t, c, m);
		if (ret < 0)
			return ret;
	}
	if (s->suite == SU_CPU)
		cpu_mark(&sh->cpu[ROLE_SERVER], 1);
	/*
	 * Orderly shutdown: close only once the client has its last echo, as
	 * an echo server closes after its client.  (The parent's timeout
	 * bounds this if the client dies.)
	 */
	while (!atomic_load_explicit(&sh->client_done, memory_order_acquire))
		usleep(100);
	return 0;
}

int bt_drive(const struct transport *t, struct bt_ctx *c)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh;
	uint64_t w = warm(s), total = w + measured(s), start = 0, t_start = 0;
	unsigned batch = s->suite == SU_THROUGHPUT ? s->batch : 1;
	uint64_t period = s->suite == SU_CPU ? (uint64_t)(1e9 / s->rate) : 0;

	for (uint64_t i = 0; i < total; i += batch) {
		uint64_t t0 = 0, t1, echoed;
		const void *m;
		int ret;

		if (i == w) {
			if (s->suite == SU_CPU)
				cpu_mark(&sh->cpu[ROLE_CLIENT], 0);
			start = mono_ns();
			t_start = tsc_now();
		}
		if (period && i >= w) {
			/* Fixed rate: sleep until this message's slot, as a real client idles. */
			uint64_t at = start + (i - w) * period;
			struct timespec ts = { (time_t)(at / 1000000000ull), (long)(at % 1000000000ull) };

			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		for (unsigned k = 0; k < batch; k++) {
			void *b = t->tx_buf(c);
			uint64_t now;

			if (!b)
				return -EIO;
			fill(b, (uint32_t)(i + k), s->size);
			now = tsc_now();
			stamp(b, now);
			if (!k)
				t0 = now;
			ret = t->send(c, b, k + 1 < batch);
			if (ret < 0)
				return ret;
		}
		m = recv_checked(t, c, i + batch - 1, "client: echo of message", &echoed, &ret);
		if (!m)
			return ret;
		t->release(c);
		t1 = tsc_now();
		if (i >= w)
			sh->rtt[(i - w) / batch] = t1 - t0;
		if (!((i / batch) & 255))
			atomic_store_explicit(&sh->progress, i + batch, memory_order_relaxed);
	}
	sh->elapsed_tsc = tsc_now() - t_start;
	if (s->suite == SU_CPU)
		cpu_mark(&sh->cpu[ROLE_CLIENT], 1);
	atomic_store_explicit(&sh->progress, total, memory_order_relaxed);
	atomic_store_explicit(&sh->client_done, 1, memory_order_release);
	return 0;
}

/* ------------------------------------------------------------------ rpc */

/* Send request seq (its header stamped now); the TSC it was stamped with. */
static int rpc_send(const struct transport *t, struct bt_ctx *c, uint32_t seq, uint64_t *at)
{
	void *b = t->tx_buf(c);

	if (!b)
		return -EIO;
	fill(b, seq, c->spec->size);
	*at = tsc_now();
	stamp(b, *at);
	return t->send(c, b, 0);
}

/* Receive and check the reply to request seq. */
static int rpc_reply(const struct transport *t, struct bt_ctx *c, uint32_t seq)
{
	uint64_t sent;
	int err;

	if (!recv_checked(t, c, seq, "client: reply to request", &sent, &err))
		return err;
	t->release(c);
	return 0;
}

static void sleep_until(uint64_t at_ns)
{
	struct timespec ts = { (time_t)(at_ns / 1000000000ull), (long)(at_ns % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/*
 * The rpc server: echo every request (after --work ns of busy-work) until
 * the end marker, the request numbered rpc_total, which the client
 * publishes before it sends it.  Its CPU counts from the first measured
 * request's wait: a consumer that spins for it pays for the spin.
 */
int rpc_serve(const struct transport *t, struct bt_ctx *c)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh;
	uint64_t work = (uint64_t)((double)s->work_ns * sh->tsc_hz / 1e9);

	for (uint64_t i = 0;; i++) {
		const void *m;
		uint64_t sent;
		int ret;

		if (i == s->warmup)
			cpu_mark(&sh->cpu[ROLE_SERVER], 0);
		m = recv_checked(t, c, i, "server: request", &sent, &ret);
		if (!m)
			return ret;
		if (i == atomic_load_explicit(&sh->rpc_total, memory_order_acquire)) {
			t->release(c);
			break;
		}
		if (sh->rpc_cpu[ROLE_SERVER] && i >= s->warmup && i - s->warmup < s->count)
			sh->rpc_cpu[ROLE_SERVER][i - s->warmup] = (uint16_t)(sched_getcpu() + 1);
		if (work) {
			/* The service's own work: keeps the CPU, as a handler does. */
			uint64_t t0 = tsc_now();

			while (tsc_now() - t0 < work)
				tsc_pause();
		}
		ret = echo(t, c, m);
		if (ret < 0)
			return ret;
	}
	cpu_mark(&sh->cpu[ROLE_SERVER], 1);
	atomic_store_explicit(&sh->rpc_server_done, 1, memory_order_release);
	while (!atomic_load_explicit(&sh->client_done, memory_order_acquire))
		usleep(100);
	return 0;
}

/*
 * The rpc client.  Open loop (rate > 0): request j is due at start + j/rate
 * whatever the replies do, and its latency runs from that slot to its
 * reply, so a stall that delays later sends is counted in each of them (no
 * coordinated omission).  A request due while concurrency are outstanding
 * waits for a reply, its clock already running.  The client is one thread
 * over blocking receives: while it waits for a reply it cannot send, so
 * with concurrency > 1 a request falling due then goes out with the next
 * reply (late, and counted late).  Closed loop (rate 0): keep concurrency
 * requests outstanding for --seconds; latency runs from each send.
 * An open loop the transport cannot keep up with falls ever further
 * behind: at twice --seconds the client stops sending, and the requests
 * never sent are counted (unsent), since their latency is not known.
 */
int rpc_drive(const struct transport *t, struct bt_ctx *c)
{
	const struct run_spec *s = c->spec;
	struct run_shared *sh = c->sh;
	uint64_t w = s->warmup, planned = s->count, sent = 0, done = 0, at, last;
	uint64_t due[RPC_MAX_CONC], start_ns, t_start, end_tsc;
	double period_cyc = s->rate > 0 ? sh->tsc_hz / s->rate : 0;
	double period_ns = s->rate > 0 ? 1e9 / s->rate : 0;
	unsigned n = s->concurrency;
	int ret;

	/* The default 50 us timer slack would make every slot late at 10k/s. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	for (uint64_t i = 0; i < w; i++)
		if ((ret = rpc_send(t, c, (uint32_t)i, &at)) < 0 ||
		    (ret = rpc_reply(t, c, (uint32_t)i)) < 0)
			return ret;
	cpu_mark(&sh->cpu[ROLE_CLIENT], 0);
	start_ns = mono_ns();
	t_start = last = tsc_now();
	end_tsc = t_start + (uint64_t)(s->seconds * sh->tsc_hz);
	for (;;) {
		/* Send every request that is due, while fewer than n are out. */
		while (sent < planned && sent - done < n) {
			uint64_t slot = t_start + (uint64_t)((double)sent * period_cyc), now = tsc_now();

			if (now >= end_tsc && (!period_cyc || now - t_start >= 2 * (end_tsc - t_start))) {
				sh->rpc_unsent = planned - sent;
				planned = sent;		/* time is up (open loop: overloaded) */
				break;
			}
			if (period_cyc && slot > now)
				break;
			if (sh->rpc_cpu[ROLE_CLIENT])
				sh->rpc_cpu[ROLE_CLIENT][sent] = (uint16_t)(sched_getcpu() + 1);
			if ((ret = rpc_send(t, c, (uint32_t)(w + sent), &at)) < 0)
				return ret;
			due[sent % n] = period_cyc ? slot : at;
			sent++;
		}
		if (done == sent) {
			if (sent >= planned)
				break;
			sleep_until(start_ns + (uint64_t)((double)sent * period_ns));
			continue;
		}
		if ((ret = rpc_reply(t, c, (uint32_t)(w + done))) < 0)
			return ret;
		last = tsc_now();
		sh->rtt[done] = last - due[done % n];
		done++;
		if (!(done & 255))
			atomic_store_explicit(&sh->progress, w + done, memory_order_relaxed);
	}
	/* Open loop: the run spans its slots, each 1/rate long, so that n requests
	 * over n - 1 intervals do not read as a rate above the offered one. */
	if (period_cyc && t_start + (uint64_t)((double)sent * period_cyc) > last)
		last = t_start + (uint64_t)((double)sent * period_cyc);
	sh->elapsed_tsc = last - t_start;
	cpu_mark(&sh->cpu[ROLE_CLIENT], 1);
	sh->rpc_done = done;
	/* The end marker: published first, so the server knows it for what it is. */
	atomic_store_explicit(&sh->rpc_total, w + sent, memory_order_release);
	if ((ret = rpc_send(t, c, (uint32_t)(w + sent), &at)) < 0)
		return ret;
	/* Close only once the server has it: a close may overtake it. */
	while (!atomic_load_explicit(&sh->rpc_server_done, memory_order_acquire))
		usleep(100);
	atomic_store_explicit(&sh->progress, w + planned, memory_order_relaxed);
	atomic_store_explicit(&sh->client_done, 1, memory_order_release);
	return 0;
}

static int child(const struct transport *t, struct bt_ctx *c, int cpu)
{
	int ret;

	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			return bt_fail(c, errno, "%s: cannot pin to CPU %d: %s",
				       c->role ? "client" : "server", cpu, strerror(errno));
	}
	ret = t->open(c);
	if (ret < 0)
		return ret;
	if (c->role == ROLE_SERVER) {
		atomic_store_explicit(&c->sh->server_ready, 1, memory_order_release);
		if (t->accept && (ret = t->accept(c)) < 0)
			goto out;
		ret = c->spec->suite == SU_RPC ? rpc_serve(t, c) : bt_serve(t, c);
	} else {
		ret = c->spec->suite == SU_RPC ? rpc_drive(t, c) : bt_drive(t, c);
	}
out:
	t->close(c);
	return ret;
}

static pid_t spawn(const struct transport *t, struct bt_ctx *c, int cpu)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		/* A bench killed by a supervisor (not a terminal's whole group)
		 * takes its pair with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		_exit(child(t, c, cpu) < 0 ? 1 : 0);
	}
	return pid;
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Describe how child role ended, or "" when it exited 0. */
static void ended(const struct run_shared *sh, int role, int status, char *out, size_t n)
{
	const char *who = role ? "client" : "server";

	out[0] = 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return;
	if (sh->err[role][0])
		snprintf(out, n, "%s", sh->err[role]);
	else if (WIFSIGNALED(status))
		snprintf(out, n, "%s killed by signal %d (%s)", who, WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(out, n, "%s exited with status %d", who, WEXITSTATUS(status));
}

static void progress(const struct run_spec *s, const struct run_shared *sh, uint64_t total)
{
	uint64_t done = atomic_load_explicit(&sh->progress, memory_order_relaxed);

	fprintf(stderr, "\r  %-15s %-9s %-10s %3u%%", transports[s->transport]->name,
		placement_name[s->placement], suite_name[s->suite],
		(unsigned)(total ? done * 100 / total : 0));
}

/* Wait for both children; kill both on a failure or at the deadline. */
static void reap(const struct bench_opts *o, const struct run_spec *s, struct run_shared *sh,
		 pid_t pid[2], struct run_out *out)
{
	uint64_t deadline = mono_ns() + (uint64_t)o->timeout_s * 1000000000ull;
	uint64_t total = warm(s) + measured(s);
	int status[2] = { 0, 0 }, live = 2, fd[2];
	char why[2][300];

	for (int r = 0; r < 2; r++)
		fd[r] = pidfd_open_(pid[r]);
	while (live) {
		struct pollfd pfd[2];
		int n = 0, tmo, idx[2];
		uint64_t now = mono_ns();

		if (now >= deadline) {
			for (int r = 0; r < 2; r++)
				if (pid[r] > 0)
					kill(pid[r], SIGKILL);
			snprintf(out->err, sizeof(out->err),
				 "timed out after %u s (raise --timeout, lower --count)", o->timeout_s);
			o = NULL;
			deadline = UINT64_MAX;
			continue;
		}
		for (int r = 0; r < 2; r++) {
			if (pid[r] <= 0)
				continue;
			pfd[n] = (struct pollfd){ .fd = fd[r] >= 0 ? fd[r] : -1, .events = POLLIN };
			idx[n++] = r;
		}
		/* Without pidfds fall back to a 10 ms poll; with a tty, refresh 4x/s. */
		tmo = (fd[0] < 0 || fd[1] < 0) ? 10 : -1;
		if (o && o->progress)
			tmo = 250;
		if (deadline != UINT64_MAX) {
			uint64_t left = (deadline - now) / 1000000 + 1;

			if (tmo < 0 || (uint64_t)tmo > left)
				tmo = left > 1000000 ? 1000000 : (int)left;
		}
		poll(pfd, n, tmo);
		if (o && o->progress)
			progress(s, sh, total);
		for (int k = 0; k < n; k++) {
			int r = idx[k], st;

			if (waitpid(pid[r], &st, WNOHANG) != pid[r])
				continue;
			status[r] = st;
			pid[r] = 0;
			live--;
			ended(sh, r, st, why[r], sizeof(why[r]));
			/* One side failed: the other may wait forever (a spinner does). */
			if (why[r][0] && pid[!r] > 0)
				kill(pid[!r], SIGKILL);
		}
	}
	for (int r = 0; r < 2; r++)
		if (fd[r] >= 0)
			close(fd[r]);
	if (out->err[0])
		return;
	/* The first side to fail is the cause; the other was killed. */
	for (int r = 0; r < 2; r++) {
		ended(sh, r, status[r], why[r], sizeof(why[r]));
		if (why[r][0] && sh->err[r][0]) {
			snprintf(out->err, sizeof(out->err), "%.290s", why[r]);
			return;
		}
	}
	for (int r = 0; r < 2; r++)
		if (why[r][0]) {
			snprintf(out->err, sizeof(out->err), "%.290s", why[r]);
			return;
		}
}

double cdf_quantile(unsigned i)
{
	/* 100 linear steps up to 0.99, then 25 per decade of tail to 1 - 1e-6. */
	if (i < 100)
		return i / 100.0;
	return 1.0 - 0.01 * pow(10.0, -(double)(i - 100) / 25.0);
}

static void fill_result(struct result *r, const struct run_spec *s, enum metric m)
{
	*r = (struct result){
		.transport = s->transport, .placement = s->placement, .wait = s->wait,
		.suite = s->suite, .metric = m, .size = s->size, .zerocopy = s->zerocopy,
		.batch = s->suite == SU_THROUGHPUT ? s->batch : 1, .unit = "cycles",
	};
}

static void counts(const struct run_spec *s, const struct run_shared *sh, struct result *r)
{
	/* rpc: the requests answered, and the end marker. */
	double n = (double)(warm(s) + (s->suite == SU_RPC ? sh->rpc_done + 1 : measured(s)));

	r->has_counts = sh->has_counts;
	r->wakeups_per_msg = (double)(sh->wakeups[0] + sh->wakeups[1]) / n;
	r->sleeps_per_msg = (double)(sh->sleeps[0] + sh->sleeps[1]) / n;
}

/* Of the measured requests whose CPUs both sides recorded, the share sent
 * and received on one CPU; -1 where none was recorded (the Go transports). */
static double same_cpu_share(const struct run_shared *sh)
{
	uint64_t both = 0, same = 0;

	for (uint64_t j = 0; j < sh->rpc_done; j++) {
		uint16_t a = sh->rpc_cpu[ROLE_SERVER][j], b = sh->rpc_cpu[ROLE_CLIENT][j];

		if (a && b) {
			both++;
			same += a == b;
		}
	}
	return both ? (double)same / (double)both : -1;
}

static void collect(const struct run_spec *s, struct run_shared *sh, double hz, struct run_out *out)
{
	uint64_t n = measured(s);
	struct result *r = out->res;

	if (s->suite == SU_THROUGHPUT) {
		uint64_t nb = n / s->batch;
		struct stats st;

		/* Worst side first: p99 is the rate that 99 % of batches beat. */
		stats_compute(sh->rtt, nb, &st);
		fill_result(r, s, M_THROUGHPUT);
		r->unit = "msgs/s";
		r->st.count = n;
		r->tput = sh->elapsed_tsc ? (double)n * hz / (double)sh->elapsed_tsc : 0;
		r->st.mean = r->tput;
		r->st.min = st.min ? (uint64_t)(s->batch * hz / st.min) : 0;
		r->st.p50 = st.p50 ? (uint64_t)(s->batch * hz / st.p50) : 0;
		r->st.p99 = st.p99 ? (uint64_t)(s->batch * hz / st.p99) : 0;
		r->st.p999 = st.p999 ? (uint64_t)(s->batch * hz / st.p999) : 0;
		r->st.max = st.max ? (uint64_t)(s->batch * hz / st.max) : 0;
		counts(s, sh, r);
		out->nres = 1;
		return;
	}
	if (s->suite == SU_RPC) {
		uint64_t ns = sh->cpu[0].user_ns + sh->cpu[0].sys_ns + sh->cpu[1].user_ns +
			      sh->cpu[1].sys_ns;
		double wall = (double)sh->elapsed_tsc / hz;

		fill_result(r, s, M_RPC);
		stats_compute(sh->rtt, sh->rpc_done, &r->st);
		r->cpu[0] = sh->cpu[0];
		r->cpu[1] = sh->cpu[1];
		r->rate = s->rate;
		r->seconds = wall;
		r->concurrency = s->concurrency;
		r->work_ns = s->work_ns;
		r->unsent = s->rate > 0 ? sh->rpc_unsent : 0;
		r->achieved_rate = wall > 0 ? (double)sh->rpc_done / wall : 0;
		r->cpu_per_req_ns = sh->rpc_done ? (double)ns / (double)sh->rpc_done : 0;
		r->cpu_cores = wall > 0 ? (double)ns / 1e9 / wall : 0;
		r->same_cpu_share = same_cpu_share(sh);
		counts(s, sh, r);
		out->nres = 1;
		return;
	}
	if (s->suite == SU_CPU) {
		uint64_t ns = sh->cpu[0].user_ns + sh->cpu[0].sys_ns + sh->cpu[1].user_ns +
			      sh->cpu[1].sys_ns;

		fill_result(r, s, M_CPU);
		r->unit = "ns";
		r->st.count = n;
		r->st.mean = n ? (double)ns / (double)n : 0;
		r->st.min = r->st.p50 = r->st.p99 = r->st.p999 = r->st.max = (uint64_t)r->st.mean;
		r->cpu[0] = sh->cpu[0];
		r->cpu[1] = sh->cpu[1];
		r->rate = s->rate;
		r->seconds = s->rate > 0 ? (double)n / s->rate : 0;
		counts(s, sh, r);
		out->nres = 1;
		return;
	}
	fill_result(&r[0], s, M_ONEWAY);
	stats_compute(sh->oneway, n, &r[0].st);
	r[0].skew = sh->skew;
	counts(s, sh, &r[0]);
	for (unsigned i = 0; i < CDF_POINTS; i++)
		r[0].cdf[i] = stats_rank(sh->oneway, n, (uint32_t)(cdf_quantile(i) * 100000.0 + 0.5));
	fill_result(&r[1], s, M_RTT);
	stats_compute(sh->rtt, n, &r[1].st);
	counts(s, sh, &r[1]);
	for (unsigned i = 0; i < CDF_POINTS; i++)
		r[1].cdf[i] = stats_rank(sh->rtt, n, (uint32_t)(cdf_quantile(i) * 100000.0 + 0.5));
	out->nres = 2;
	/* Computed by the transport (rpal-hosted: call round trip, switch pair). */
	for (unsigned k = 0; k < sh->nextra && k < 2; k++) {
		fill_result(&r[2 + k], s, (enum metric)sh->extra[k].metric);
		r[2 + k].st = sh->extra[k].st;
		out->nres++;
	}
}

void run_one(const struct bench_opts *o, const struct run_spec *s, double hz, struct run_out *out)
{
	const struct transport *t = transports[s->transport];
	uint64_t n = measured(s);
	size_t head = (sizeof(struct run_shared) + 4095) & ~(size_t)4095;
	/* rpc keeps only the client's latencies, and both sides' CPUs. */
	size_t len = head + (s->suite == SU_RPC ? n * (sizeof(uint64_t) + 2 * sizeof(uint16_t))
						: 2 * n * sizeof(uint64_t));
	struct run_shared *sh;
	struct bt_ctx c = { .spec = s };
	pid_t pid[2] = { 0, 0 };
	int ret;

	memset(out, 0, sizeof(*out));
	/* Populated now, so no sample store takes a page fault mid-run. */
	sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (sh == MAP_FAILED) {
		snprintf(out->err, sizeof(out->err), "cannot map %zu bytes for samples: %s", len,
			 strerror(errno));
		return;
	}
	sh->oneway = (uint64_t *)((char *)sh + head);
	sh->rtt = s->suite == SU_RPC ? sh->oneway : sh->oneway + n;
	if (s->suite == SU_RPC) {
		sh->rpc_cpu[ROLE_SERVER] = (uint16_t *)(sh->rtt + n);
		sh->rpc_cpu[ROLE_CLIENT] = sh->rpc_cpu[ROLE_SERVER] + n;
	}
	sh->tsc_hz = hz;
	atomic_store(&sh->rpc_total, UINT64_MAX);
	c.sh = sh;
	c.role = ROLE_SERVER;
	ret = t->setup(&c);
	if (ret < 0) {
		snprintf(out->err, sizeof(out->err), "%s", sh->err[0][0] ? sh->err[0] : "set-up failed");
		goto unmap;
	}
	pid[0] = spawn(t, &c, s->cpu_server);
	if (pid[0] < 0) {
		snprintf(out->err, sizeof(out->err), "fork: %s", strerror(errno));
		goto teardown;
	}
	/* The client may only connect once the server listens. */
	for (uint64_t until = mono_ns() + (uint64_t)o->timeout_s * 1000000000ull;;) {
		int st;

		if (atomic_load_explicit(&sh->server_ready, memory_order_acquire))
			break;
		if (waitpid(pid[0], &st, WNOHANG) == pid[0]) {
			ended(sh, ROLE_SERVER, st, out->err, sizeof(out->err));
			if (!out->err[0])
				snprintf(out->err, sizeof(out->err), "server exited before it was ready");
			goto teardown;
		}
		if (mono_ns() > until) {
			kill(pid[0], SIGKILL);
			waitpid(pid[0], NULL, 0);
			snprintf(out->err, sizeof(out->err), "server not ready after %u s", o->timeout_s);
			goto teardown;
		}
		usleep(200);
	}
	c.role = ROLE_CLIENT;
	pid[1] = spawn(t, &c, s->cpu_client);
	if (pid[1] < 0) {
		snprintf(out->err, sizeof(out->err), "fork: %s", strerror(errno));
		kill(pid[0], SIGKILL);
		waitpid(pid[0], NULL, 0);
		goto teardown;
	}
	reap(o, s, sh, pid, out);
	if (o->progress)
		fprintf(stderr, "\r%60s\r", "");
	if (!out->err[0]) {
		collect(s, sh, hz, out);
		out->ok = 1;
	}
teardown:
	c.role = ROLE_SERVER;
	if (t->teardown)
		t->teardown(&c);
unmap:
	munmap(sh, len);
}
