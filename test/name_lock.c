/* SPDX-License-Identifier: MIT */
/*
 * Description: a listener holds its name's lock file while it serves and
 * removes it, with the socket file, when it stops, so a runtime directory
 * keeps no file per name ever served; a live listener still keeps a second
 * one off the name, and one killed with SIGKILL leaves a file the next
 * listener takes.  A lock file replaced between a listener's open and its
 * lock (another listener stopped meanwhile, a third made the file anew) is
 * not held by mistake: the listener locks the file at the path.  The
 * replacement is made inside flock(2), wrapped (-Wl,--wrap).
 */
#include <stdbool.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"

int __real_flock(int fd, int op);

static bool replace_next;
static int flocks;

int __wrap_flock(int fd, int op)
{
	if (replace_next && (op & LOCK_EX)) {
		char link[64], path[512];
		ssize_t n;
		int nfd;

		replace_next = false;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, path, sizeof(path) - 1);
		t_check(n > 0, "readlink %s: %m", link);
		path[n] = 0;
		t_check(unlink(path) == 0, "unlink %s: %m", path);
		nfd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		t_check(nfd >= 0, "create %s: %m", path);
		close(nfd);
	}
	flocks++;
	return __real_flock(fd, op);
}

static char dir[108];

static bool exists(const char *name, const char *suffix)
{
	char p[256];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s%s", dir, name, suffix);
	return lstat(p, &st) == 0;
}

/* Is the file at NAME.sock.lock locked (by another open file)? */
static bool locked(const char *name)
{
	char p[256];
	int fd, r;

	snprintf(p, sizeof(p), "%s/%s.sock.lock", dir, name);
	fd = open(p, O_RDWR | O_CLOEXEC);
	t_check(fd >= 0, "open %s: %m", p);
	r = __real_flock(fd, LOCK_EX | LOCK_NB);
	close(fd);
	return r < 0;
}

int main(void)
{
	int lfd, r, ready[2], go[2];
	pid_t pid;
	char c;

	t_ok(rpal_init(NULL));
	t_ok(rpal_runtime_dir(NULL, dir, sizeof(dir)));

	printf("a listener's socket and lock file go when it stops\n");
	lfd = t_ok(rpal_listen("nl", NULL));
	t_check(exists("nl", ".sock") && exists("nl", ".sock.lock") && locked("nl"), "serving: socket or lock missing");
	rpal_close(lfd);
	t_check(!exists("nl", ".sock") && !exists("nl", ".sock.lock"), "stopped: a file is left");

	printf("a live listener keeps a second one off its name; once it stops, the name is free\n");
	t_check(pipe(ready) == 0 && pipe(go) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		rpal_fini();
		t_ok(rpal_init(NULL));
		lfd = t_ok(rpal_listen("nl", NULL));
		(void)!write(ready[1], "r", 1);
		(void)!read(go[0], &c, 1);         /* until the parent has tried */
		rpal_close(lfd);
		exit(0);
	}
	t_check(read(ready[0], &c, 1) == 1, "child did not listen");
	r = rpal_listen("nl", NULL);
	t_check(r == -EADDRINUSE, "second listener: %s", rpal_strerror(r));
	(void)!write(go[1], "g", 1);
	t_wait_ok(pid, "first listener");
	t_check(!exists("nl", ".sock.lock"), "the first listener left its lock file");
	lfd = t_ok(rpal_listen("nl", NULL));
	rpal_close(lfd);

	printf("a listener killed with SIGKILL leaves its files; the next one takes them and removes them\n");
	pid = fork();
	if (pid == 0) {
		rpal_fini();
		t_ok(rpal_init(NULL));
		t_ok(rpal_listen("nl", NULL));
		(void)!write(ready[1], "r", 1);
		pause();
		exit(0);
	}
	t_check(read(ready[0], &c, 1) == 1, "child did not listen");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t_check(exists("nl", ".sock.lock"), "no lock file after SIGKILL");
	lfd = t_ok(rpal_listen("nl", NULL));
	rpal_close(lfd);
	t_check(!exists("nl", ".sock") && !exists("nl", ".sock.lock"), "a file is left after the takeover");

	printf("a lock file replaced between the open and the lock: the file at the path is the one held\n");
	flocks = 0;
	replace_next = true;
	lfd = t_ok(rpal_listen("nl", NULL));
	t_check(flocks == 2, "%d locks taken, want 2 (the replaced file's, then the new one's)", flocks);
	t_check(locked("nl"), "the lock file at the path is not locked: a second listener could take the name");
	r = rpal_listen("nl", NULL);
	t_check(r == -EADDRINUSE, "second listener after the replacement: %s", rpal_strerror(r));
	rpal_close(lfd);
	t_check(!exists("nl", ".sock.lock"), "the lock file is left");
	printf("PASS\n");
	return 0;
}
