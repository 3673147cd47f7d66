/* SPDX-License-Identifier: MIT */
/* runcmd.h - run a program, capture stdout and stderr; for the CLI tests. */
#ifndef RUNCMD_H
#define RUNCMD_H

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

struct out {
	char *buf[2];		/* stdout, stderr; NUL-terminated */
	size_t len[2];
	int status;		/* exit status, or 128 + signal */
};

static int runcmd(char *const argv[], struct out *o)
{
	int fd[2][2];
	pid_t pid;

	memset(o, 0, sizeof(*o));
	if (pipe(fd[0]) || pipe(fd[1]))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		dup2(fd[0][1], 1);
		dup2(fd[1][1], 2);
		close(fd[0][0]);
		close(fd[1][0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd[0][1]);
	close(fd[1][1]);
	for (int open = 2; open;) {
		struct pollfd p[2] = { { fd[0][0], POLLIN, 0 }, { fd[1][0], POLLIN, 0 } };

		if (poll(p, 2, -1) < 0)
			continue;
		for (int i = 0; i < 2; i++) {
			char chunk[4096];
			ssize_t n;

			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
				continue;
			n = read(p[i].fd, chunk, sizeof(chunk));
			if (n <= 0) {
				close(fd[i][0]);
				fd[i][0] = -1;
				open--;
				continue;
			}
			o->buf[i] = realloc(o->buf[i], o->len[i] + (size_t)n + 1);
			if (!o->buf[i])
				return -1;
			memcpy(o->buf[i] + o->len[i], chunk, (size_t)n);
			o->len[i] += (size_t)n;
			o->buf[i][o->len[i]] = 0;
		}
	}
	for (int i = 0; i < 2; i++)
		if (!o->buf[i])
			o->buf[i] = calloc(1, 1);
	if (waitpid(pid, &o->status, 0) != pid)
		return -1;
	o->status = WIFEXITED(o->status) ? WEXITSTATUS(o->status) : 128 + WTERMSIG(o->status);
	return 0;
}

static void out_free(struct out *o)
{
	free(o->buf[0]);
	free(o->buf[1]);
}

#endif
