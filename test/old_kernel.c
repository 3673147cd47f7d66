/* SPDX-License-Identifier: MIT */
/*
 * Description: run a test as if on an older kernel, by making the system
 * calls that kernel lacks fail as it would, with a seccomp filter that this
 * process and everything it starts inherit.
 *
 *   old_kernel 6.1 PROGRAM [ARG...]    no SO_PASSRIGHTS (before 6.16)
 *   old_kernel 5.15 PROGRAM [ARG...]   that, and no futex_waitv (before 5.16)
 *
 * Before 6.16, setsockopt(SOL_SOCKET, SO_PASSRIGHTS) fails with
 * ENOPROTOOPT, so a doorbell takes passed descriptors; before 5.16,
 * futex_waitv() is ENOSYS.  Only what the filter changes is checked: a
 * host that really is older answers the same way.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

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
	/* setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, ...) */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_setsockopt, 0, 5);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_SOCKET, 0, 3);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_PASSRIGHTS, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOPROTOOPT);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

	struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
}

/* The filter must be what the test sees, or it tests nothing. */
static int check(int hide_waitv)
{
	int s = socket(AF_UNIX, SOCK_STREAM, 0), no = 0;
	long r;

	if (s < 0)
		return -1;
	r = setsockopt(s, SOL_SOCKET, SO_PASSRIGHTS, &no, sizeof(no));
	close(s);
	if (r != -1 || errno != ENOPROTOOPT)
		return -1;
	if (!hide_waitv)
		return 0;
	r = syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0);
	return r == -1 && errno == ENOSYS ? 0 : -1;
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
	printf("as on Linux %s: no SO_PASSRIGHTS%s\n", argv[1],
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
