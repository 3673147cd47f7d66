/* SPDX-License-Identifier: MIT */
/*
 * Description: run a test as if on an older kernel, by making the system
 * calls that kernel lacks fail as it would, with a seccomp filter that this
 * process and everything it starts inherit.
 *
 *   old_kernel 6.1 PROGRAM [ARG...]    pipes refuse RWF_NOWAIT (before 6.4)
 *   old_kernel 5.15 PROGRAM [ARG...]   that, and no futex_waitv (before 5.16)
 *
 * Before 6.4, preadv2() and pwritev2() with RWF_NOWAIT fail on a pipe with
 * EOPNOTSUPP; the filter makes them fail so on any file (the library uses
 * the flag on pipes only).  Before 5.16, futex_waitv() is ENOSYS.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#endif

#if defined(THIS_ARCH) && defined(SYS_futex_waitv)
/* The low word of system call argument i (both arches are little-endian). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

static int install(int hide_waitv)
{
	struct sock_filter f[16];
	unsigned n = 0;

	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	if (hide_waitv) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex_waitv, 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
	}
	/* preadv2, pwritev2 (fd, iov, n, pos_l, pos_h, flags) with RWF_NOWAIT */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_preadv2, 1, 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pwritev2, 0, 3);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(5));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, RWF_NOWAIT, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EOPNOTSUPP);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

	struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
}

/* The filter must be what the test sees, or it tests nothing. */
static int check(int hide_waitv)
{
	char b = 0;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	int p[2];
	long r;

	if (pipe(p) < 0)
		return -1;
	r = pwritev2(p[1], &iov, 1, -1, RWF_NOWAIT);
	close(p[0]);
	close(p[1]);
	if (r != -1 || errno != EOPNOTSUPP)
		return -1;
	r = syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0);
	return hide_waitv ? (r == -1 && errno == ENOSYS ? 0 : -1) : (r == -1 && errno != ENOSYS ? 0 : -1);
}
#endif

int main(int argc, char **argv)
{
	int hide_waitv;

	if (argc < 3 || (strcmp(argv[1], "6.1") && strcmp(argv[1], "5.15"))) {
		fprintf(stderr, "usage: %s 6.1|5.15 PROGRAM [ARG...]\n", argv[0]);
		return 2;
	}
	hide_waitv = !strcmp(argv[1], "5.15");
#if defined(THIS_ARCH) && defined(SYS_futex_waitv)
	int ret = install(hide_waitv);
	if (ret) {
		printf("SKIP: cannot install a seccomp filter: %s\n", strerror(-ret));
		return 77;
	}
	if (check(hide_waitv)) {
		fprintf(stderr, "old_kernel: the filter does not act as Linux %s would\n", argv[1]);
		return 1;
	}
	printf("as on Linux %s: pipes refuse RWF_NOWAIT%s\n", argv[1],
	       hide_waitv ? ", futex_waitv() is ENOSYS" : "");
	fflush(stdout);
	execvp(argv[2], argv + 2);
	fprintf(stderr, "%s: %s\n", argv[2], strerror(errno));
	return 1;
#else
	(void)hide_waitv;
	printf("SKIP: no seccomp emulation of older kernels on this architecture\n");
	return 77;
#endif
}
