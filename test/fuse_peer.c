/* SPDX-License-Identifier: MIT */
/*
 * Description: a hostile client passes, as its arena or its doorbell, a
 * file of a FUSE file system it serves itself, then stops answering the
 * kernel.  Looking at such a file (fstat) or closing it (its flush) would
 * wait for that client: rpal_accept() refuses it without either, and an
 * honest client behind it gets in at once.  Several such files at once
 * leave nothing in our descriptor table (a fork would inherit it, and an
 * exec would wait on its flush).  Needs /dev/fuse and
 * the right to mount (root, in a mount namespace of its own): skipped
 * where those are missing.
 */
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rawpeer.h"

/* How long the hostile client holds its requests unanswered. */
#define HOLD_S 3
/* Files of one hostile client stalled at once. */
#define STALLED 24

static int fuse_fd;
static _Atomic int stalled;     /* from now on, leave the kernel's requests unanswered */

static void reply(uint64_t unique, int err, const void *p, size_t len)
{
	char b[512];
	struct fuse_out_header h = { .len = (uint32_t)(sizeof(h) + len), .error = err, .unique = unique };

	memcpy(b, &h, sizeof(h));
	if (len)
		memcpy(b + sizeof(h), p, len);
	(void)!write(fuse_fd, b, h.len);
}

static void attr_of(struct fuse_attr *a, uint64_t ino)
{
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	a->nlink = 1;
	a->blksize = 4096;
	a->mode = ino == 1 ? (S_IFDIR | 0755) : (S_IFREG | 0666);
	a->size = ino == 1 ? 0 : 1 << 20;
}

/* A file system of one file, ino 2, that answers others until stalled is
 * set. */
static void *serve(void *arg)
{
	static char buf[(1 << 17) + 4096];

	(void)arg;
	for (;;) {
		ssize_t n = read(fuse_fd, buf, sizeof(buf));
		struct fuse_in_header *in = (void *)buf;

		if (n <= 0) {
			if (errno == EINTR || errno == ENOENT)
				continue;
			return NULL;
		}
		/* Our own requests are answered: a close of ours must never
		 * wait for us. */
		if (atomic_load(&stalled) && in->opcode != FUSE_INIT && in->pid != (uint32_t)getpid())
			continue;
		switch (in->opcode) {
		case FUSE_INIT: {
			struct fuse_init_in *ii = (void *)(in + 1);
			struct fuse_init_out o = { .major = 7, .minor = ii->minor < 31 ? ii->minor : 31,
						   .max_readahead = 4096, .max_write = 4096, .max_background = 8,
						   .congestion_threshold = 6, .time_gran = 1 };
			reply(in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_LOOKUP: {
			struct fuse_entry_out o = { .nodeid = 2, .generation = 1 };
			attr_of(&o.attr, 2);
			reply(in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out o = { 0 };
			attr_of(&o.attr, in->nodeid);
			reply(in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_OPEN: {
			struct fuse_open_out o = { .fh = 1 };
			reply(in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_FLUSH:
		case FUSE_RELEASE:
			reply(in->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break;
		default:
			reply(in->unique, -ENOSYS, NULL, 0);
		}
	}
}

/* The hostile client: writes 'r' to ready once its hello is sent, or 's'
 * where it cannot mount. */
static void hostile(int as_doorbell, int n, int ready)
{
	char mnt[] = "/tmp/rpal-fuse-XXXXXX", opts[128], path[64];
	struct rpal_block *blk;
	struct rpal_hello h;
	struct rpal_geom g;
	pthread_t th;
	int sv[2], fds[2], f, s;

	rpal_fini();
	t_ok(rpal_init(NULL));
	fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fuse_fd < 0 || unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    !mkdtemp(mnt)) {
		printf("SKIP: cannot set up a FUSE mount here (/dev/fuse, a mount namespace): %s\n", strerror(errno));
		(void)!write(ready, "s", 1);
		_exit(0);
	}
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fuse_fd);
	if (mount("rpalfuse", mnt, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
		printf("SKIP: cannot mount a FUSE file system: %s\n", strerror(errno));
		rmdir(mnt);
		(void)!write(ready, "s", 1);
		_exit(0);
	}
	t_check(pthread_create(&th, NULL, serve, NULL) == 0, "pthread_create");
	snprintf(path, sizeof(path), "%s/f", mnt);
	blk = block_create(64, 64);
	geom_self(&g);
	hello_fill(&h, &g, RPAL_HS_HELLO, blk, "fuse", 0);
	atomic_store(&stalled, 1);      /* our own requests are still answered */
	for (int i = 0; i < n; i++) {
		f = open(path, O_RDWR | O_CLOEXEC);
		t_check(f >= 0, "open %s: %s", path, strerror(errno));
		t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		fds[0] = as_doorbell ? rpal_g.memfd : f;
		fds[1] = as_doorbell ? f : sv[1];
		s = raw_connect("fuse");
		t_check(hs_sendmsg(s, &h, sizeof(h), fds, 2) == 0, "the hello");
		close(f);               /* the server's copy is the last */
		close(sv[0]);
		close(sv[1]);
	}
	(void)!write(ready, "r", 1);
	sleep(HOLD_S);
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	_exit(0);
}

int main(void)
{
	int lfd;

	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("fuse", NULL));
	for (int as_doorbell = 0; as_doorbell < 2; as_doorbell++) {
		int go[2], ready[2];
		pid_t honest, bad;
		char c = 0;
		long r;

		printf("a FUSE file that stops answering, as the hostile client's %s\n",
		       as_doorbell ? "doorbell" : "arena");
		t_check(pipe(go) == 0 && pipe(ready) == 0, "pipe");
		/* Forked first: a child forked later would inherit our copy of
		 * the hostile file, and its exit would wait on it. */
		honest = fork();
		if (honest == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			if (read(go[0], &c, 1) != 1 || c != 'g')
				_exit(0);
			uint64_t t0 = t_now_ns();
			r = rpal_connect("fuse", NULL, 0);
			t_check(r >= 0, "the honest client: %s", rpal_strerror((int)r));
			t_check(t_now_ns() - t0 < 1000000000ull, "the honest client waited %.1f s",
				(t_now_ns() - t0) / 1e9);
			_exit(0);
		}
		bad = fork();
		if (bad == 0)
			hostile(as_doorbell, 1, ready[1]);
		t_check(read(ready[0], &c, 1) == 1, "the hostile client's start");
		if (c == 's') {
			(void)!write(go[1], "q", 1);
			waitpid(honest, NULL, 0);
			waitpid(bad, NULL, 0);
			return 77;
		}
		(void)!write(go[1], "g", 1);    /* queued behind the hostile one */
		/* The hostile client's refusal may be returned, or passed over
		 * for the next client's connection: either way, at once. */
		uint64_t t0 = t_now_ns();
		struct rpal_conn_info ci;
		do {
			r = rpal_accept(lfd, 0);
			if (r < 0)
				printf("  refused after %.3f s: %s\n", (t_now_ns() - t0) / 1e9, rpal_strerror((int)r));
		} while (r < 0 && t_now_ns() - t0 < 5000000000ull);
		t_check(r >= 0, "no connection: %s", rpal_strerror((int)r));
		t_ok(rpal_conn_info((int)r, &ci));
		t_check(ci.peer_pid == honest, "accepted pid %d, not the honest client (%d)", (int)ci.peer_pid,
			(int)honest);
		printf("  the honest client got in after %.3f s\n", (t_now_ns() - t0) / 1e9);
		t_check(t_now_ns() - t0 < 1000000000ull, "the honest client got in after %.1f s",
			(t_now_ns() - t0) / 1e9);
		rpal_close((int)r);
		t_wait_ok(honest, "the honest client");
		t_wait_ok(bad, "the hostile client");
		for (int i = 0; i < 2; i++) {
			close(go[i]);
			close(ready[i]);
		}
	}
	printf("%d such files at once: none stays in our descriptor table, and a fork and exec runs at once\n",
	       STALLED);
	{
		int fds0, ready[2];
		pid_t bad;
		char c;

		t_check(pipe(ready) == 0, "pipe");
		fds0 = t_count_fds();
		bad = fork();
		if (bad == 0)
			hostile(0, STALLED, ready[1]);
		t_check(read(ready[0], &c, 1) == 1 && c == 'r', "the hostile client's start");
		/* Refusals after the first are passed over: a second of
		 * non-blocking accepts takes them all. */
		for (uint64_t t0 = t_now_ns(); t_now_ns() - t0 < 1000000000ull;) {
			long r = rpal_accept(lfd, RPAL_NONBLOCK);

			t_check(r < 0, "a hostile hello was accepted");
			if (r == -EAGAIN)
				usleep(1000);
		}
		t_check(t_eventually(t_count_fds() == fds0, 1000), "%d descriptors open, were %d", t_count_fds(),
			fds0);
		uint64_t t0 = t_now_ns();
		pid_t p = fork();
		int status;
		if (p == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		while (waitpid(p, &status, WNOHANG) == 0 && t_now_ns() - t0 < 5000000000ull)
			usleep(1000);
		printf("  fork and exec of true: %.3f s\n", (t_now_ns() - t0) / 1e9);
		t_check(t_now_ns() - t0 < 1000000000ull, "fork and exec took %.1f s", (t_now_ns() - t0) / 1e9);
		t_wait_ok(bad, "the hostile client");
		waitpid(p, NULL, 0);
		close(ready[0]);
		close(ready[1]);
	}
	printf("PASS\n");
	return 0;
}
