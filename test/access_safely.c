/* SPDX-License-Identifier: MIT */
/*
 * Description: rpal_access_safely() turns a fault inside fn into -EFAULT: a
 * read through a garbage pointer, a write into a connected peer's
 * read-only arena, a read of a peer arena that was unmapped; the normal
 * case returns fn's value; windows nest; after a recovered fault a fault
 * outside any window still kills (a child) exactly as without rpal; two
 * threads recover 10000 faults each at once.
 */
#include <pthread.h>
#include <fcntl.h>

#include "helpers.h"

/* Hide a constant address from the compiler (no -Warray-bounds on 0x10). */
static inline uintptr_t launder(uintptr_t p)
{
	__asm__ __volatile__("" : "+r"(p));
	return p;
}

static int read_at(void *arg)
{
	return *(volatile const int *)launder((uintptr_t)arg);
}

static int write_at(void *arg)
{
	*(volatile unsigned char *)launder((uintptr_t)arg) = 0x5a;
	return 1;
}

static int ret_value(void *arg)
{
	return (int)(intptr_t)arg;
}

static int send_segv(void *arg)
{
	return kill(getpid(), SIGSEGV);
}

static int nested(void *arg)
{
	int inner = rpal_access_safely(read_at, (void *)0x10);
	int *out = arg;

	*out = inner;
	return 7;
}

static int nested_outer_fault(void *arg)
{
	int inner = rpal_access_safely(ret_value, (void *)3);

	*(int *)arg = inner;
	return *(volatile int *)launder(0x18);   /* faults in the outer window */
}

/* Fault outside any window in a child; return its wait status. */
static int fault_child(void)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);   /* ASan's report, if any, is not ours to show */
		(void)read_at((void *)0x20);
		_exit(0);
	}
	t_check(pid > 0, "fork");
	t_check(waitpid(pid, &st, 0) == pid, "waitpid");
	return st;
}

static void *thread_faults(void *arg)
{
	long n = (long)(intptr_t)arg, i;

	for (i = 0; i < n; i++) {
		int r = rpal_access_safely(read_at, (void *)(uintptr_t)(0x1000 + 8 * (i & 255)));
		if (r != -EFAULT) {
			fprintf(stderr, "FAIL: thread fault %ld returned %d\n", i, r);
			return (void *)1;
		}
		if (rpal_access_safely(ret_value, (void *)(intptr_t)(i & 0xffff)) != (i & 0xffff)) {
			fprintf(stderr, "FAIL: thread call %ld wrong value\n", i);
			return (void *)1;
		}
	}
	return NULL;
}

/* The peer: sends one zero-copy buffer, then echoes until end of stream. */
static int server(int ready)
{
	struct rpal_msg m[8];
	int lfd = t_ok(rpal_listen("safely", NULL)), fd, n;
	unsigned char *b;

	(void)!write(ready, "r", 1);
	fd = t_ok(rpal_accept(lfd, 0));
	b = rpal_buf_alloc(4096);
	t_check(b, "rpal_buf_alloc");
	memset(b, 0xab, 4096);
	t_ok(rpal_send_buf(fd, b, 4096, 0));
	for (;;) {
		n = rpal_recv_msg(fd, m, 8, 0);
		if (n == 0)
			break;
		t_check(n > 0, "server recv: %s", rpal_strerror(n));
		for (int i = 0; i < n; i++)
			t_ok(rpal_send(fd, m[i].data, m[i].len, 0));
		t_ok(rpal_msg_release(fd, m, (unsigned)n));
	}
	rpal_close(fd);
	rpal_close(lfd);
	return 0;
}

/* Read through a variable, so the compiler cannot see the bad address. */
static volatile uintptr_t bad_addr = 0x18;

static void app_siginfo(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	_exit(42);
}

static void app_plain(int sig)
{
	(void)sig;
	_exit(43);
}

/*
 * Re-executed: the application's own handler comes first, rpal's second;
 * a fault outside any window must reach the application's.
 */
static int chain_child(const char *kind)
{
	struct sigaction sa;
	int ok = 0;

	memset(&sa, 0, sizeof(sa));
	if (!strcmp(kind, "siginfo")) {
		sa.sa_sigaction = app_siginfo;
		sa.sa_flags = SA_SIGINFO;
	} else {
		sa.sa_handler = app_plain;
	}
	sigaction(SIGSEGV, &sa, NULL);
	if (rpal_access_safely(read_at, &ok) != 0)     /* rpal installs its handler now */
		return 2;
	return *(volatile int *)bad_addr;               /* outside a window */
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[1], "--chain"))
		return chain_child(argv[2]);
	{
		static const char *const kinds[] = { "siginfo", "plain" };
		printf("a fault outside a window reaches the application's earlier handler\n");
		for (int k = 0; k < 2; k++) {
			int st;
			pid_t c = fork();
			if (c == 0) {
				char *args[] = { "access_safely", "--chain", (char *)kinds[k], NULL };

				t_execv("/proc/self/exe", args);
				_exit(3);
			}
			waitpid(c, &st, 0);
			t_check(WIFEXITED(st) && WEXITSTATUS(st) == 42 + k, "%s handler not reached: status %#x",
				kinds[k], st);
		}
	}

	int baseline, st, r, inner, pfd[2], fd;
	struct rpal_msg m;
	struct rpal_stats rs;
	pid_t pid;
	char c, buf[64];
	long per_thread = 10000;

	/* How a fault outside rpal kills a child before any handler exists:
	 * SIGSEGV normally, ASan's report and exit under ASan. */
	baseline = fault_child();
	printf("baseline: a faulting child %s %d\n", WIFSIGNALED(baseline) ? "is killed by signal" : "exits",
	       WIFSIGNALED(baseline) ? WTERMSIG(baseline) : WEXITSTATUS(baseline));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	t_check(WIFSIGNALED(baseline) && WTERMSIG(baseline) == SIGSEGV, "baseline child not killed by SIGSEGV");
#endif

	printf("the normal case returns fn's value\n");
	t_check(rpal_access_safely(ret_value, (void *)42) == 42, "fn's value");
	t_check(rpal_access_safely(ret_value, (void *)0) == 0, "fn's zero");
	t_check(rpal_access_safely(ret_value, (void *)-5) == -5, "fn's negative value passes through");
	t_check(rpal_access_safely(NULL, NULL) == -EINVAL, "NULL fn");

	printf("a read through a garbage pointer (0x10) returns -EFAULT\n");
	r = rpal_access_safely(read_at, (void *)0x10);
	t_check(r == -EFAULT, "garbage read returned %d", r);
	printf("  rpal_strerror: %s\n", rpal_strerror(r));
	t_check(strstr(rpal_strerror(r), "0x10") != NULL, "detail names the address");

	printf("the signal mask is restored: SIGSEGV and SIGBUS unblocked, others as before\n");
	{
		sigset_t set, now;
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		t_check(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0, "block SIGUSR1");
		t_check(rpal_access_safely(read_at, (void *)0x10) == -EFAULT, "fault with SIGUSR1 blocked");
		t_check(pthread_sigmask(SIG_SETMASK, NULL, &now) == 0, "get mask");
		t_check(sigismember(&now, SIGUSR1) == 1, "SIGUSR1 no longer blocked");
		t_check(sigismember(&now, SIGSEGV) == 0 && sigismember(&now, SIGBUS) == 0, "SIGSEGV/SIGBUS left blocked");
		t_check(pthread_sigmask(SIG_UNBLOCK, &set, NULL) == 0, "unblock SIGUSR1");
	}

	printf("windows nest: an inner fault returns to the inner call, an outer one to the outer\n");
	inner = 0;
	t_check(rpal_access_safely(nested, &inner) == 7 && inner == -EFAULT, "nested inner fault");
	inner = 0;
	t_check(rpal_access_safely(nested_outer_fault, &inner) == -EFAULT && inner == 3, "nested outer fault");
	t_check(rpal_access_safely(read_at, (void *)0x10) == -EFAULT, "after nesting");

	printf("a write into a connected peer's read-only arena returns -EFAULT\n");
	t_check(pipe(pfd) == 0, "pipe");
	pid = fork();
	if (pid == 0)
		exit(server(pfd[1]));
	close(pfd[1]);          /* a server that dies early reads as EOF, not a hang */
	t_check(read(pfd[0], &c, 1) == 1, "server did not start");
	fd = t_ok(rpal_connect("safely", NULL, 0));
	t_check(t_ok(rpal_recv_msg(fd, &m, 1, 0)) == 1, "one message");
	t_check((m.flags & RPAL_MSG_BUF) && m.len == 4096, "a buffer in the peer's arena");
	r = rpal_access_safely(write_at, (void *)m.data);
	t_check(r == -EFAULT, "write into the peer's arena returned %d", r);
	printf("  rpal_strerror: %s\n", rpal_strerror(r));
	t_check(rpal_access_safely(read_at, (void *)m.data) == (int)0xabababab, "reading the peer's arena works");
	t_check(((const unsigned char *)m.data)[4095] == 0xab, "the buffer is intact");
	const void *stale = m.data;
	t_ok(rpal_msg_release(fd, &m, 1));
	printf("the process goes on: an echo over the same connection\n");
	t_ok(rpal_send(fd, "still here", 10, 0));
	t_check(t_ok(rpal_recv(fd, buf, sizeof(buf), 0)) == 10 && memcmp(buf, "still here", 10) == 0, "echo");

	printf("a peer arena that was unmapped: reading it returns -EFAULT\n");
	t_ok(rpal_shutdown(fd, SHUT_WR));
	t_check(rpal_recv(fd, buf, sizeof(buf), 0) == 0, "end of stream");
	t_wait_ok(pid, "server");
	t_ok(rpal_close(fd));
	t_ok(rpal_stats(&rs));
	t_check(rs.nr_peers_mapped == 0, "peer arena still mapped");
	r = rpal_access_safely(read_at, (void *)stale);
	t_check(r == -EFAULT, "read of a retired arena returned %d", r);

	printf("after recovered faults, a fault outside rpal_access_safely still kills as before\n");
	st = fault_child();
	printf("  the child %s %d\n", WIFSIGNALED(st) ? "is killed by signal" : "exits",
	       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	t_check(st == baseline, "child status %#x, without rpal's handler %#x", st, baseline);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	t_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "child not killed by SIGSEGV");
#endif
	printf("  and a SIGSEGV sent with kill() is not swallowed inside a window\n");
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 2);
		/* kill() from inside fn: a signal, not a fault. */
		(void)rpal_access_safely(send_segv, NULL);
		_exit(0);
	}
	t_check(waitpid(pid, &st, 0) == pid, "waitpid");
	printf("  the child %s %d\n", WIFSIGNALED(st) ? "is killed by signal" : "exits",
	       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	t_check(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "a sent SIGSEGV was swallowed");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	t_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "child not killed by SIGSEGV");
#endif

	printf("two threads recover %ld faults each at once\n", per_thread);
	{
		pthread_t th[2];
		void *res;
		uint64_t t0 = t_now_ns();
		for (int i = 0; i < 2; i++)
			t_check(pthread_create(&th[i], NULL, thread_faults, (void *)(intptr_t)per_thread) == 0, "thread");
		for (int i = 0; i < 2; i++) {
			t_check(pthread_join(th[i], &res) == 0, "join");
			t_check(res == NULL, "thread %d failed", i);
		}
		printf("  %.2f us per recovered fault\n", (double)(t_now_ns() - t0) / 1e3 / (double)per_thread);
	}

	{
		uint64_t t0 = t_now_ns();
		long n = 1000000;
		for (long i = 0; i < n; i++)
			if (rpal_access_safely(ret_value, (void *)1) != 1)
				t_fail("fast path");
		printf("fast path: %.1f ns per call\n", (double)(t_now_ns() - t0) / (double)n);
	}
	printf("PASS\n");
	return T_EXIT_PASS;
}
