/* SPDX-License-Identifier: MIT */
/*
 * Description: protect_peers, memory protection keys on peer arenas.  With
 * protection on, echoes of every size class between processes work
 * (one-copy and zero-copy, inline and buffer, plain calls and epoll); a
 * peer's buffer read outside a window faults with SEGV_PKUERR and reads
 * inside rpal_peer_window_open() or rpal_access_safely(); two peers get two
 * keys and a window on one leaves the other shut; windows nest and survive
 * a recovered fault; threads that existed before rpal_init are shut out
 * too; keys come back when peers go, over many cycles; with every key taken
 * peers share one and still work.  Off, peer memory reads as before.
 * Without PKU: RPAL_PROTECT_REQUIRE fails with -ENOTSUP, then "SKIP: no PKU".
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <sys/mman.h>

#include <sys/prctl.h>
#include "internal.h"      /* pkru_read, pkru_write */
#include "helpers.h"

#ifndef SEGV_PKUERR
#define SEGV_PKUERR 4
#endif

static const size_t sizes[] = { 1, 39, 40, 41, 100, 4096, 65536, 1 << 20 };

/* ------------------------------------------------------------- probing */

static __thread sigjmp_buf probe_jb;
static __thread volatile int probe_active, probe_code;

/* Installed before rpal's (which chains to it outside rpal's windows). */
static void probe_handler(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (!probe_active) {            /* a real crash: die of it */
		signal(sig, SIG_DFL);
		return;
	}
	probe_active = 0;
	probe_code = si->si_code;
	siglongjmp(probe_jb, 1);
}

/* Read the byte at p: 0 if it reads, else the si_code of the SIGSEGV.  The
 * handler left the kernel's default PKRU: put this thread's back. */
static int probe(const void *p)
{
	static __thread volatile uint32_t pkru;

	pkru = pkru_read();
	if (sigsetjmp(probe_jb, 1)) {
		pkru_write(pkru);
		return probe_code;
	}
	probe_active = 1;
	(void)*(const volatile unsigned char *)p;
	probe_active = 0;
	return 0;
}

static const char *code_str(int code)
{
	return code == 0 ? "reads" : code == SEGV_PKUERR ? "SEGV_PKUERR" : code == SEGV_MAPERR ? "SEGV_MAPERR" :
	       code == SEGV_ACCERR ? "SEGV_ACCERR" : "other fault";
}

#define t_probe(p, want, what) do { \
	int _c = probe(p); \
	t_check(_c == (want), "%s: %s, want %s", what, code_str(_c), code_str(want)); \
} while (0)

/* ------------------------------------------------------------ keys */

/* Disabled from the start: pkey_alloc(0, 0) would leave this thread's PKRU
 * open on that key number, and the threads it creates after it. */
static bool pku_available(void)
{
	int k = pkey_alloc(0, PKEY_DISABLE_ACCESS);

	if (k < 0)
		return false;
	pkey_free(k);
	return true;
}

/* Take every free key into keys[]; returns how many. */
static int keys_grab(int keys[16])
{
	int n = 0, k;

	while (n < 16 && (k = pkey_alloc(0, PKEY_DISABLE_ACCESS)) >= 0)
		keys[n++] = k;
	return n;
}

static void keys_drop(const int keys[16], int n)
{
	while (n--)
		pkey_free(keys[n]);
}

static int keys_free(void)
{
	int keys[16], n = keys_grab(keys);

	keys_drop(keys, n);
	return n;
}

/* The protection key of the mapping at addr (/proc/self/smaps), -1 if none. */
static int smaps_key(uintptr_t addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false;
	int key = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		/* A mapping's first line; field lines start with a capital
		 * word, never "hex-hex". */
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = addr >= lo && addr < hi;
			continue;
		}
		if (in && sscanf(line, "ProtectionKey: %d", &key) == 1)
			break;
	}
	fclose(f);
	return key;
}

/* ------------------------------------------------------------- servers */

/*
 * Echo server with protection required: a buffer message comes back as a
 * buffer of ours, copied inside a window on the client; a small one with
 * rpal_send(), "nap" after 50 ms.  Serves connections one after another
 * until one says "quit".
 */
static int server(const char *name, int ready)
{
	struct rpal_config cfg;
	struct rpal_msg m[16];
	int lfd, fd, n, i;
	bool quit = false;

	rpal_config_default(&cfg);
	cfg.protect_peers = RPAL_PROTECT_REQUIRE;
	t_ok(rpal_init(&cfg));
	lfd = t_ok(rpal_listen(name, NULL));
	(void)!write(ready, "r", 1);
	close(ready);
	while (!quit) {
		fd = t_ok(rpal_accept(lfd, 0));
		while ((n = rpal_recv_msg(fd, m, 16, 0)) != 0) {
			t_check(n > 0, "%s recv: %s", name, rpal_strerror(n));
			for (i = 0; i < n; i++) {
				if (m[i].flags & RPAL_MSG_BUF) {
					void *b = rpal_buf_alloc(m[i].len);
					long w;

					t_check(b, "%s: rpal_buf_alloc", name);
					w = t_ok(rpal_peer_window_open(fd));
					t_check(w > 0, "%s: a window had to open", name);
					memcpy(b, m[i].data, m[i].len);
					rpal_peer_window_close(w);
					t_ok(rpal_send_buf(fd, b, m[i].len, 0));
				} else {
					quit |= m[i].len == 4 && !memcmp(m[i].data, "quit", 4);
					if (m[i].len == 3 && !memcmp(m[i].data, "nap", 3))
						usleep(50000);  /* the client sleeps meanwhile */
					t_ok(rpal_send(fd, m[i].data, m[i].len, 0));
				}
			}
			t_ok(rpal_msg_release(fd, m, (unsigned)n));
		}
		t_ok(rpal_close(fd));
	}
	rpal_close(lfd);
	rpal_fini();
	return 0;
}

static pid_t server_start(const char *name)
{
	int pfd[2];
	pid_t pid;
	char c;

	t_check(pipe(pfd) == 0, "pipe");
	pid = fork();
	t_check(pid >= 0, "fork");
	if (pid == 0) {
		close(pfd[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);       /* a failed test leaves no server behind */
		exit(server(name, pfd[1]));
	}
	close(pfd[1]);          /* a server that dies early reads as EOF, not a hang */
	t_check(read(pfd[0], &c, 1) == 1, "server %s did not start", name);
	close(pfd[0]);
	return pid;
}

static void server_stop(const char *name, pid_t pid)
{
	int fd = t_ok(rpal_connect(name, NULL, 0));
	char buf[8];

	t_ok(rpal_send(fd, "quit", 4, 0));
	t_check(t_ok(rpal_recv(fd, buf, sizeof(buf), 0)) == 4, "quit echo");
	t_ok(rpal_shutdown(fd, SHUT_WR));
	t_check(rpal_recv(fd, buf, sizeof(buf), 0) == 0, "end of stream");
	t_ok(rpal_close(fd));
	t_wait_ok(pid, name);
}

/* ------------------------------------------------------------ echoes */

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		if (!(i & 7))
			t_rand(&seed);
		p[i] = (unsigned char)(seed >> (8 * (i & 7)));
	}
}

/* A zero-copy message back from fd: a buffer from the peer when large. */
static void recv_held(int fd, struct rpal_msg *m, size_t len)
{
	t_check(t_ok(rpal_recv_msg(fd, m, 1, 0)) == 1, "one message");
	t_check(m->len == len, "length %u, want %zu", m->len, len);
	if (len > RPAL_INLINE_MAX)
		t_check(m->flags & RPAL_MSG_BUF, "a %zu-byte message not by pointer", len);
}

/* Every size, one-copy then zero-copy; zero-copy data read in a window. */
static void echo_all(int fd, const char *who)
{
	static unsigned char out[1 << 20], in[1 << 20];
	struct rpal_msg m;
	size_t k;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		fill(out, sizes[k], k + 1);
		t_check(t_ok(rpal_send(fd, out, sizes[k], 0)) == (long)sizes[k], "short send");
		t_check(t_ok(rpal_recv(fd, in, sizeof(in), 0)) == (long)sizes[k], "echo length");
		t_check(!memcmp(in, out, sizes[k]), "%s: one-copy echo of %zu differs", who, sizes[k]);
	}
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		unsigned char *b = rpal_buf_alloc(sizes[k]);
		long w;

		t_check(b, "rpal_buf_alloc(%zu)", sizes[k]);
		fill(b, sizes[k], 100 + k);
		fill(out, sizes[k], 100 + k);
		t_ok(rpal_send_buf(fd, b, sizes[k], 0));
		recv_held(fd, &m, sizes[k]);
		w = t_ok(rpal_peer_window_open(fd));
		t_check(!memcmp(m.data, out, sizes[k]), "%s: zero-copy echo of %zu differs", who, sizes[k]);
		rpal_peer_window_close(w);
		t_ok(rpal_msg_release(fd, &m, 1));
	}
}

/* Send a 4096-byte buffer; keep the echo (the peer's buffer) unreleased. */
static const unsigned char *hold_peer_buffer(int fd, struct rpal_msg *m, unsigned char pattern)
{
	unsigned char *b = rpal_buf_alloc(4096);

	t_check(b, "rpal_buf_alloc");
	memset(b, pattern, 4096);
	t_ok(rpal_send_buf(fd, b, 4096, 0));
	recv_held(fd, m, 4096);
	return m->data;
}

static uintptr_t peer_arena(int fd, const struct rpal_config *cfg)
{
	struct rpal_conn_info ci;

	t_ok(rpal_conn_info(fd, &ci));
	return (uintptr_t)(cfg->region_base + (uint64_t)ci.peer_slot * cfg->slot_size);
}

static void wait_unmapped(void)
{
	struct rpal_stats st;

	t_check(t_eventually((rpal_stats(&st), st.nr_peers_mapped == 0), 5000),
		"%u peer arenas still mapped", st.nr_peers_mapped);
}

/*
 * The server answers "nap" after 50 ms; we wait in rpal_recv (ep < 0) or
 * rpal_epoll_wait, asleep on the server's futex word.  A futex wait outside
 * a window fails with EFAULT and the wait spins: it would burn the 50 ms.
 */
static void nap(int fd, int ep)
{
	struct timespec t0, t1;
	double cpu_ms = 0;
	char buf[8];

	for (int i = 0; i < 3; i++) {
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		t_ok(rpal_send(fd, "nap", 3, 0));
		if (ep >= 0) {
			struct epoll_event ev;
			t_check(rpal_epoll_wait(ep, &ev, 1, 5000) == 1 && ev.data.fd == fd, "epoll nap");
		}
		t_check(t_ok(rpal_recv(fd, buf, sizeof(buf), 0)) == 3, "nap echo");
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
		cpu_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
		printf("  %.2f ms of CPU for a 50 ms wait\n", cpu_ms);
		if (cpu_ms < 5)
			break;          /* a preempted try may cost more; a spinning one always does */
	}
	t_check(cpu_ms < 5, "a 50 ms wait burnt %.1f ms of CPU: the futex sleep failed", cpu_ms);
}

/* ------------------------------------------------------------ threads */

/* A thread started before rpal_init: probes what it is sent. */
static int job_fd[2], res_fd[2];

static void *early_thread(void *arg)
{
	const void *p;

	(void)arg;
	while (read(job_fd[0], &p, sizeof(p)) == sizeof(p)) {
		int code = p ? probe(p) : 0;
		(void)!write(res_fd[1], &code, sizeof(code));
	}
	return NULL;
}

static int early_probe(const void *p)
{
	int code;

	t_check(write(job_fd[1], &p, sizeof(p)) == sizeof(p), "job");
	t_check(read(res_fd[0], &code, sizeof(code)) == sizeof(code), "result");
	return code;
}

struct own_window { int fd; const void *p; int outside, inside; };

/* A thread created now: shut out, until it opens a window of its own. */
static void *new_thread(void *arg)
{
	struct own_window *o = arg;
	long w;

	o->outside = probe(o->p);
	w = rpal_peer_window_open(o->fd);
	o->inside = w > 0 ? probe(o->p) : -1;
	rpal_peer_window_close(w);
	return NULL;
}

/* ------------------------------------------------------------ the rest */

static int read_two(void *arg)
{
	const unsigned char *const *p = arg;

	return p[0][0] + p[1][4095];
}

static int read_at(void *arg)
{
	uintptr_t a = (uintptr_t)arg;

	__asm__ __volatile__("" : "+r"(a));
	return *(volatile const unsigned char *)a;
}

/* With protection off, zero-copy data reads without a window. */
static int off_child(void)
{
	struct rpal_config cfg;
	struct rpal_msg m;
	const unsigned char *p;
	int fd;

	rpal_config_default(&cfg);
	cfg.protect_peers = RPAL_PROTECT_OFF;
	t_ok(rpal_init(&cfg));
	fd = t_ok(rpal_connect("mpk-a", NULL, 0));
	p = hold_peer_buffer(fd, &m, 0x3c);
	t_check(probe(p) == 0 && p[0] == 0x3c && p[4095] == 0x3c, "off: peer buffer does not read");
	t_check(rpal_peer_window_open(fd) == 0, "off: a window opened");
	t_check(smaps_key((uintptr_t)p) == 0, "off: the peer arena has key %d", smaps_key((uintptr_t)p));
	t_ok(rpal_msg_release(fd, &m, 1));
	t_ok(rpal_close(fd));
	rpal_fini();
	return 0;
}

int main(void)
{
	struct rpal_config cfg;
	struct rpal_msg ma, mb;
	struct sigaction sa;
	const unsigned char *pa, *pb;
	pthread_t early;
	pid_t sa_pid, sb_pid, pid;
	int fa, fb, ka, kb, base, r, i, grabbed[16], ngrab;
	long wa, wb, cycles = t_scaled(200);

	printf("config: RPAL_PROTECT_PEERS is read; out of range is EINVAL\n");
	setenv("RPAL_PROTECT_PEERS", "2", 1);
	rpal_config_default(&cfg);
	t_check(cfg.protect_peers == RPAL_PROTECT_REQUIRE, "RPAL_PROTECT_PEERS=2 read as %u", cfg.protect_peers);
	unsetenv("RPAL_PROTECT_PEERS");
	rpal_config_default(&cfg);
	t_check(cfg.protect_peers == RPAL_PROTECT_OFF, "off by default");
	cfg.protect_peers = 3;
	r = rpal_init(&cfg);
	t_check(r == -EINVAL, "protect_peers=3: %d", r);
	printf("  rpal_strerror: %s\n", rpal_strerror(r));

	if (!pku_available()) {
		cfg.protect_peers = RPAL_PROTECT_REQUIRE;
		r = rpal_init(&cfg);
		t_check(r == -ENOTSUP || r == -ENOSPC, "RPAL_PROTECT_REQUIRE without PKU: %d, want -ENOTSUP", r);
		printf("  without PKU: %s\n", rpal_strerror(r));
		cfg.protect_peers = RPAL_PROTECT_AUTO;
		t_ok(rpal_init(&cfg));
		rpal_fini();
		t_skip("no PKU");
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = probe_handler;
	sa.sa_flags = SA_SIGINFO;
	t_check(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
	t_check(pipe(job_fd) == 0 && pipe(res_fd) == 0, "pipe");
	t_check(pthread_create(&early, NULL, early_thread, NULL) == 0, "thread");
	t_check(early_probe(NULL) == 0, "early thread runs");

	sa_pid = server_start("mpk-a");
	sb_pid = server_start("mpk-b");

	printf("protection off: zero-copy data reads without a window, no key\n");
	pid = fork();
	if (pid == 0)
		exit(off_child());
	t_wait_ok(pid, "off child");

	rpal_config_default(&cfg);
	cfg.protect_peers = RPAL_PROTECT_REQUIRE;
	t_ok(rpal_init(&cfg));
	base = keys_free();
	printf("protection required: rpal_init holds one key, %d left free\n", base);

	printf("two peers get two distinct keys\n");
	fa = t_ok(rpal_connect("mpk-a", NULL, 0));
	fb = t_ok(rpal_connect("mpk-b", NULL, 0));
	ka = smaps_key(peer_arena(fa, &cfg));
	kb = smaps_key(peer_arena(fb, &cfg));
	printf("  keys %d and %d\n", ka, kb);
	t_check(ka > 0 && kb > 0 && ka != kb, "peer keys %d and %d", ka, kb);

	printf("echo of %zu sizes, one-copy and zero-copy, with both peers\n", sizeof(sizes) / sizeof(sizes[0]));
	echo_all(fa, "a");
	echo_all(fb, "b");

	printf("a receiver sleeps on its peer's futex word (the kernel obeys PKRU too)\n");
	nap(fa, -1);

	printf("outside a window a peer's buffer faults with SEGV_PKUERR\n");
	pa = hold_peer_buffer(fa, &ma, 0xa1);
	pb = hold_peer_buffer(fb, &mb, 0xb2);
	t_probe(pa, SEGV_PKUERR, "a, outside");
	t_probe(pb, SEGV_PKUERR, "b, outside");

	printf("a window on a opens a, not b\n");
	wa = t_ok(rpal_peer_window_open(fa));
	t_check(wa > 0, "window cookie %ld", wa);
	t_probe(pa, 0, "a, in a's window");
	t_check(pa[0] == 0xa1 && pa[4095] == 0xa1, "a's buffer");
	t_probe(pb, SEGV_PKUERR, "b, in a's window");

	printf("windows nest: b inside a, closed in reverse order\n");
	wb = t_ok(rpal_peer_window_open(fb));
	t_probe(pb, 0, "b, in both");
	t_probe(pa, 0, "a, in both");
	t_check(rpal_peer_window_open(fa) == 0, "opening an open window changes nothing");
	rpal_peer_window_close(wb);
	t_probe(pa, 0, "a, after b's close");
	t_probe(pb, SEGV_PKUERR, "b, after b's close");

	printf("a recovered fault inside rpal_access_safely keeps the caller's windows\n");
	r = rpal_access_safely(read_at, (void *)0x10);
	t_check(r == -EFAULT, "garbage read: %d", r);
	t_probe(pa, 0, "a, after the recovered fault");
	t_probe(pb, SEGV_PKUERR, "b, after the recovered fault");

	printf("a thread started before rpal_init is shut out while we hold a window\n");
	i = early_probe(pa);
	t_check(i == SEGV_PKUERR, "early thread on a: %s", code_str(i));
	rpal_peer_window_close(wa);
	t_probe(pa, SEGV_PKUERR, "a, after its close");
	t_probe(pb, SEGV_PKUERR, "b, after all closes");

	printf("a new thread is shut out until it opens its own window\n");
	{
		struct own_window o = { .fd = fa, .p = pa };
		pthread_t t;

		t_check(pthread_create(&t, NULL, new_thread, &o) == 0 && pthread_join(t, NULL) == 0, "thread");
		t_check(o.outside == SEGV_PKUERR && o.inside == 0, "new thread: outside %s, inside %s",
			code_str(o.outside), code_str(o.inside));
		t_check(early_probe(pa) == SEGV_PKUERR, "early thread after the new one's window");
	}

	printf("rpal_access_safely opens every peer for fn, then shuts them again\n");
	{
		const unsigned char *two[2] = { pa, pb };

		t_check(rpal_access_safely(read_two, two) == 0xa1 + 0xb2, "reading both in rpal_access_safely");
		t_probe(pa, SEGV_PKUERR, "a, after rpal_access_safely");
		t_probe(pb, SEGV_PKUERR, "b, after rpal_access_safely");
	}

	printf("a key that rpal does not hold faults inside rpal_access_safely: -EFAULT\n");
	{
		int k = pkey_alloc(0, PKEY_DISABLE_ACCESS);
		void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		t_check(k > 0 && page != MAP_FAILED, "own key and page");
		t_check(pkey_mprotect(page, 4096, PROT_READ, k) == 0, "pkey_mprotect");
		r = rpal_access_safely(read_at, page);
		printf("  rpal_strerror: %s\n", rpal_strerror(r));
		t_check(r == -EFAULT && strstr(rpal_strerror(r), "protection key"), "own key read: %d", r);
		munmap(page, 4096);
		pkey_free(k);
	}
	t_ok(rpal_msg_release(fa, &ma, 1));
	t_ok(rpal_msg_release(fb, &mb, 1));

	printf("rpal_epoll_wait with protected peers\n");
	{
		int ep = rpal_epoll_create(0);
		struct epoll_event ev = { .events = EPOLLIN }, out[2];
		char buf[64];
		int got = 0;

		t_check(ep >= 0, "rpal_epoll_create");
		ev.data.fd = fa;
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fa, &ev) == 0, "add a");
		ev.data.fd = fb;
		t_check(rpal_epoll_ctl(ep, EPOLL_CTL_ADD, fb, &ev) == 0, "add b");
		t_ok(rpal_send(fa, "ping a", 6, 0));
		t_ok(rpal_send(fb, "ping b", 6, 0));
		while (got < 2) {
			int n = rpal_epoll_wait(ep, out, 2, 5000);
			t_check(n > 0, "rpal_epoll_wait: %d", n);
			for (i = 0; i < n; i++) {
				while (rpal_recv(out[i].data.fd, buf, sizeof(buf), RPAL_NONBLOCK) == 6)
					got++;
			}
		}
		t_probe(pa, SEGV_PKUERR, "a, after rpal_epoll_wait");
		printf("  and sleeps on the peers' futex words\n");
		nap(fa, ep);
		t_ok(rpal_close(ep));
	}

	printf("keys come back when peers go\n");
	t_ok(rpal_close(fa));
	t_ok(rpal_close(fb));
	wait_unmapped();
	t_check(keys_free() == base, "%d keys free, %d before the peers came", keys_free(), base);

	printf("%ld cycles of connect, echo, close with two peers: no key leaks\n", cycles);
	for (long c = 0; c < cycles; c++) {
		struct rpal_msg m;

		fa = t_ok(rpal_connect("mpk-a", NULL, 0));
		fb = t_ok(rpal_connect("mpk-b", NULL, 0));
		ka = smaps_key(peer_arena(fa, &cfg));
		kb = smaps_key(peer_arena(fb, &cfg));
		t_check(ka > 0 && kb > 0 && ka != kb, "cycle %ld: keys %d and %d", c, ka, kb);
		pa = hold_peer_buffer(fa, &m, (unsigned char)c);
		t_probe(pa, SEGV_PKUERR, "cycle: outside");
		wa = rpal_peer_window_open(fa);
		t_check(pa[100] == (unsigned char)c, "cycle %ld: content", c);
		rpal_peer_window_close(wa);
		t_ok(rpal_msg_release(fa, &m, 1));
		t_ok(rpal_close(fa));
		t_ok(rpal_close(fb));
		wait_unmapped();
	}
	t_check(keys_free() == base, "%d keys free after the cycles, %d before", keys_free(), base);

	printf("every key taken: the two peers share rpal's key and still work\n");
	ngrab = keys_grab(grabbed);
	printf("  took the %d free keys\n", ngrab);
	fa = t_ok(rpal_connect("mpk-a", NULL, 0));
	fb = t_ok(rpal_connect("mpk-b", NULL, 0));
	ka = smaps_key(peer_arena(fa, &cfg));
	kb = smaps_key(peer_arena(fb, &cfg));
	t_check(ka > 0 && ka == kb, "shared keys %d and %d", ka, kb);
	echo_all(fa, "a, shared key");
	echo_all(fb, "b, shared key");
	pa = hold_peer_buffer(fa, &ma, 0x11);
	pb = hold_peer_buffer(fb, &mb, 0x22);
	t_probe(pa, SEGV_PKUERR, "a, shared, outside");
	wa = rpal_peer_window_open(fa);
	t_probe(pb, 0, "b, in a's window on a shared key");
	rpal_peer_window_close(wa);
	t_probe(pb, SEGV_PKUERR, "b, shared, outside");
	t_ok(rpal_msg_release(fa, &ma, 1));
	t_ok(rpal_msg_release(fb, &mb, 1));
	t_ok(rpal_close(fa));
	t_ok(rpal_close(fb));
	wait_unmapped();
	keys_drop(grabbed, ngrab);
	t_check(keys_free() == base, "%d keys free after sharing, %d before", keys_free(), base);

	server_stop("mpk-a", sa_pid);
	server_stop("mpk-b", sb_pid);
	rpal_fini();
	t_check(keys_free() == base + 1, "rpal_fini left %d keys free, want %d", keys_free(), base + 1);
	close(job_fd[1]);
	pthread_join(early, NULL);
	printf("PASS\n");
	return T_EXIT_PASS;
}
