/* SPDX-License-Identifier: MIT */
/*
 * Description: the server refuses every malformed or lying hello with a
 * clear reason sent to the client, and afterwards holds nothing of it: no
 * mapping, no descriptor, no arena memory; a lingering TCP socket the
 * client hid (in the doorbell, at the bottom of Unix sockets nested 8
 * deep, in the backlog of a listening socket, in a message behind the
 * hello, next to it or after an empty one) never holds up the refusal or
 * the next client's answer.  A connected client's second hello that
 * claims another arena size (its block past what is mapped) is refused
 * before the block is read.  Also: credentials by policy
 * (same uid, allow-lists, a second uid), a client that stalls, a client
 * killed mid-handshake, a server whose WELCOME carries a bad wake page (the
 * client refuses it), a client without a wake page killed while we sleep
 * on it, a client that gave up before the server looked (reported as
 * gone), a burst of clients larger than the handshakes kept in progress
 * (none dropped), silent clients filling them (a speaking one still gets
 * in), and a good client after all of them.
 */
#include <pthread.h>
#include <sys/epoll.h>

#include "rawpeer.h"

#define BURST 100

static int lfd;

struct sleeper {
	int ep, n;
	struct epoll_event ev;
};

static void *sleep_in_set(void *p)
{
	struct sleeper *s = p;

	s->n = rpal_epoll_wait(s->ep, &s->ev, 1, 3000);
	return NULL;
}
static char last_why[320];     /* rpal_strerror() of the last failure, taken at once */

/* Run the server side until the client child exits; return accept's last error. */
static int serve_until_exit(pid_t child, int *child_status)
{
	int last = 0;

	for (;;) {
		int r = rpal_accept(lfd, RPAL_NONBLOCK);
		if (r >= 0)
			t_fail("accepted a connection that should have been refused");
		if (r != -EAGAIN) {
			last = r;
			snprintf(last_why, sizeof(last_why), "%s", rpal_strerror(r));
		}
		if (waitpid(child, child_status, WNOHANG) == child) {
			/* Finish any refusal still in flight. */
			for (int i = 0; i < 50; i++) {
				r = rpal_accept(lfd, RPAL_NONBLOCK);
				t_check(r < 0, "accepted after the child left");
				if (r != -EAGAIN) {
					last = r;
					snprintf(last_why, sizeof(last_why), "%s", rpal_strerror(r));
				}
				usleep(1000);
			}
			return last;
		}
		usleep(500);
	}
}

/* In a forked client: librpal afresh, waiting handshake_ms for its answer. */
static void client_init(unsigned handshake_ms)
{
	struct rpal_config cfg;

	rpal_fini();
	rpal_config_default(&cfg);
	cfg.handshake_ms = handshake_ms;
	t_ok(rpal_init(&cfg));
}

/* Our descriptor count once it has stayed the same for 100 ms (1 s at most):
 * what a refused peer passed is closed on librpal's threads. */
static int settled_fds(void)
{
	int n = t_count_fds(), same = 0;

	for (int i = 0; i < 100 && same < 10; i++) {
		usleep(10000);
		same = t_count_fds() == n ? same + 1 : 0;
		n = t_count_fds();
	}
	return n;
}

static void check_clean(int fds0, size_t used0, const char *what)
{
	struct rpal_stats st;

	t_ok(rpal_stats(&st));
	t_check(st.nr_conns == 0 && st.nr_peers_mapped == 0, "%s: %u conns, %u peers left", what, st.nr_conns,
		st.nr_peers_mapped);
	t_check(st.arena_used == used0, "%s: arena use %zu, was %zu", what, st.arena_used, used0);
	/* What is neither a socket nor a memfd (a pipe, here) is closed on a
	 * thread of its own: it leaves the table once that thread runs. */
	t_check(t_eventually(t_count_fds() == fds0, 1000), "%s: %d descriptors open, was %d", what, t_count_fds(),
		fds0);
}

int main(void)
{
	struct rpal_stats st;
	unsigned myslot;
	int fds0, f, status, r;
	size_t used0;

	printf("a peer's refusal text is shown as printable ASCII only\n");
	{
		struct rpal_refuse rf;
		char why[200];
		int err;

		refuse_fill(&rf, -5, "");
		memset(rf.reason, 0x80, sizeof(rf.reason));     /* no NUL at all */
		memcpy(rf.reason, "\x1b[2J%n\r\n\x7f", 9);
		t_check(refuse_parse(&rf, sizeof(rf), &err, why, sizeof(why)) == 0, "refuse_parse");
		t_check(err == EPROTO, "errno %d passed on", err);
		t_check(strlen(why) == sizeof(rf.reason) - 1, "reason of %zu bytes", strlen(why));
		for (size_t i = 0; why[i]; i++)
			t_check(why[i] >= 0x20 && why[i] < 0x7f, "byte %#x at %zu", (unsigned char)why[i], i);
		printf("  %.24s...\n", why);
	}

	t_ok(rpal_init(NULL));
	lfd = t_ok(rpal_listen("hs", NULL));
	t_ok(rpal_self(&myslot, NULL, NULL));
	t_ok(rpal_stats(&st));
	used0 = st.arena_used;
	fds0 = t_count_fds();

	for (f = RAW_GARBAGE; f < RAW_NR; f++) {
		pid_t pid = fork();
		if (pid == 0) {
			char why[128] = "";
			int s, err;
			rpal_fini();
			t_ok(rpal_init(NULL));
			s = raw_hello("hs", (enum raw_fault)f, myslot);
			err = raw_answer(s, why, sizeof(why));
			printf("  %-32s -> refused: %s (%s)\n", raw_fault_name[f], why, strerror(err));
			if (f >= RAW_LINGER_IN_BELL) {
				/* We still hold what keeps the hidden socket lingering:
				 * a server blocked on it would not answer this. */
				int s2 = raw_hello("hs", RAW_GARBAGE, myslot);
				char why2[128];
				t_check(raw_answer(s2, why2, sizeof(why2)) > 0, "%s: the next client was not answered",
					raw_fault_name[f]);
			}
			if (f == RAW_NO_FUTURE_WRITE)
				t_check(err == EPROTO && strstr(why, "future writes"), "an arena that can have holes: %s", why);
			if (f == RAW_HUGETLB && !strstr(why, "(no seals)")) {
				/* Refused before its mapping, which could fail after
				 * our reservation of the slot was given up for it. */
				t_check(err == EPROTO && strstr(why, "hugetlb"), "hugetlb arena: %s", why);
			}
			exit(err > 0 ? 0 : 2);
		}
		uint64_t t0 = t_now_ns();
		r = serve_until_exit(pid, &status);
		/* A doorbell set to linger 30 s must not hold our close. */
		t_check(t_now_ns() - t0 < 5000000000ull, "%s: the refusal took %.1f s", raw_fault_name[f],
			(t_now_ns() - t0) / 1e9);
		t_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the client was not told why", raw_fault_name[f]);
		t_check(r < 0, "%s: accept reported no error", raw_fault_name[f]);
		t_check(strlen(last_why) > 30, "%s: unclear error '%s'", raw_fault_name[f], last_why);
		check_clean(fds0, used0, raw_fault_name[f]);
	}

	printf("a connected peer's second hello that claims another arena size is refused, its first connection works on\n");
	{
		int sv[2], fds1;
		char buf[16], go;

		t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		pid_t pid = fork();
		if (pid == 0) {
			char why[128] = "";
			close(sv[0]);
			rpal_fini();
			t_ok(rpal_init(NULL));
			int fd = t_ok(rpal_connect("hs", NULL, 0));
			/* The server maps our arena with its real size for fd; the
			 * same incarnation then says it is twice that. */
			t_check(read(sv[1], &go, 1) == 1, "sync");
			int s = raw_hello("hs", RAW_SIZE_MIX, myslot);
			int err = raw_answer(s, why, sizeof(why));
			printf("  -> refused: %s (%s)\n", why, strerror(err));
			t_check(read(sv[1], &go, 1) == 1, "sync");
			t_check(rpal_send(fd, "still here", 10, 0) == 10, "send on the first connection");
			exit(err == EPROTO ? 0 : 2);
		}
		close(sv[1]);
		int fd = -EAGAIN;
		uint64_t t0 = t_now_ns();
		while (fd == -EAGAIN && t_now_ns() - t0 < 5000000000ull) {
			fd = rpal_accept(lfd, RPAL_NONBLOCK);
			usleep(500);
		}
		t_check(fd >= 0, "the first connection: %s", rpal_strerror(fd));
		fds1 = t_count_fds();   /* the connection's, and the watcher's from now on */
		t_check(write(sv[0], "1", 1) == 1, "sync");
		r = -EAGAIN;
		while (r == -EAGAIN && t_now_ns() - t0 < 5000000000ull) {
			r = rpal_accept(lfd, RPAL_NONBLOCK);
			usleep(500);
		}
		t_check(r == -EPROTO, "the second hello: %d (%s), want EPROTO", r, rpal_strerror(r));
		t_check(t_eventually(t_count_fds() == fds1, 1000), "the refusal left %d descriptors open",
			t_count_fds() - fds1);
		t_check(write(sv[0], "2", 1) == 1, "sync");
		t_check(rpal_recv(fd, buf, sizeof(buf), 0) == 10 && !memcmp(buf, "still here", 10),
			"the first connection after the refusal");
		t_check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
			"the client was not told EPROTO");
		close(sv[0]);
		r = (int)rpal_recv(fd, buf, sizeof(buf), 0);     /* the client's exit: nothing lingers */
		t_check(r == 0 || r == -ECONNRESET, "after the client's exit: %d (%s)", r, rpal_strerror(r));
		t_ok(rpal_close(fd));
		t_ok(rpal_stats(&st));
		t_check(st.nr_conns == 0 && st.nr_peers_mapped == 0 && st.arena_used == used0,
			"%u conns, %u peers, arena use %zu (was %zu) left", st.nr_conns, st.nr_peers_mapped,
			st.arena_used, used0);
		/* librpal's watcher runs from the first connection on; what the
		 * refused hellos passed may still be with the closer thread. */
		fds0 = settled_fds();
	}

	printf("a client that connects and says nothing is dropped after handshake_ms without blocking\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			int s = raw_connect("hs");
			sleep(3);
			close(s);
			exit(0);
		}
		uint64_t t0 = t_now_ns();
		r = -EAGAIN;
		while (r == -EAGAIN && t_now_ns() - t0 < 2500000000ull) {
			r = rpal_accept(lfd, RPAL_NONBLOCK);
			usleep(1000);
		}
		t_check(r == -ETIMEDOUT, "stalled client: got %d (%s), want ETIMEDOUT", r, rpal_strerror(r));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		check_clean(fds0, used0, "stalled client");
	}

	printf("  and an event loop that calls rpal_accept only when the listener is ready drops it too\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			int s = raw_connect("hs");
			struct pollfd p = { .fd = s, .events = POLLRDHUP };
			/* Exit 0 once the server hangs up on us. */
			exit(poll(&p, 1, 5000) == 1 ? 0 : 1);
		}
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		uint64_t t0 = t_now_ns();
		int st2, polls = 0;
		r = -EAGAIN;
		while (r == -EAGAIN && t_now_ns() - t0 < 4000000000ull) {
			if (poll(&p, 1, 4000) == 1) {
				polls++;
				r = rpal_accept(lfd, RPAL_NONBLOCK);
			}
		}
		t_check(r == -ETIMEDOUT, "silent client: got %d (%s) after %d wake-ups, want ETIMEDOUT", r,
			rpal_strerror(r), polls);
		printf("  dropped after %.2f s and %d wake-ups of the listener\n", (t_now_ns() - t0) / 1e9, polls);
		t_check(polls <= 3, "the listener woke %d times for one silent client", polls);
		t_check(waitpid(pid, &st2, 0) == pid && WIFEXITED(st2) && WEXITSTATUS(st2) == 0,
			"the silent client was not hung up on");
		t_check(rpal_accept(lfd, RPAL_NONBLOCK) == -EAGAIN, "the listener has nothing else");
		t_check(poll(&p, 1, 0) == 0, "the listener stays readable after the drop");
		check_clean(fds0, used0, "silent client");
	}

	printf("a client whose hello is an empty datagram with descriptors: a hang-up, the descriptors closed\n");
	for (int round = 0; round < 20; round++) {
		int s = raw_connect("hs"), sv[2];

		t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
		t_check(hs_sendmsg(s, "", 0, sv, 2) == 0, "the empty hello: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		r = rpal_accept(lfd, 0);
		t_check(r < 0, "an empty hello was accepted");
		close(s);
	}
	check_clean(fds0, used0, "empty hello with descriptors");

	printf("a client killed mid-handshake\n");
	for (int round = 0; round < 20; round++) {
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			rpal_connect("hs", NULL, 0);
			exit(0);
		}
		usleep((useconds_t)(round * 150));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		for (int i = 0; i < 200; i++) {
			r = rpal_accept(lfd, RPAL_NONBLOCK);
			if (r >= 0) {
				/* It finished before the kill: the hang-up must show. */
				char b[8];
				t_check(rpal_recv(r, b, sizeof(b), 0) == -ECONNRESET, "dead client's connection not reset");
				rpal_close(r);
			}
			usleep(200);
		}
		check_clean(fds0, used0, "killed client");
	}

	printf("credentials: a policy that excludes our uid refuses us, on both sides\n");
	{
		uid_t other = 12345;
		struct rpal_policy only_other = { .allow_same_uid = 0, .uids = &other, .nr_uids = 1 };
		int l2 = t_ok(rpal_listen("strict", &only_other));
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			r = rpal_connect("strict", NULL, 0);
			printf("  refused: %s\n", rpal_strerror(r));
			exit(r == -EACCES ? 0 : 2);
		}
		do
			r = rpal_accept(l2, RPAL_NONBLOCK);
		while (r == -EAGAIN);
		t_check(r == -EACCES, "strict server: %d", r);
		t_wait_ok(pid, "client under a strict policy");
		rpal_close(l2);

		/* And a client whose policy refuses the server. */
		pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			r = rpal_connect("hs", &only_other, 0);
			exit(r == -EACCES ? 0 : 2);
		}
		serve_until_exit(pid, &status);
		t_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client did not refuse the server");
		check_clean(fds0, used0, "client-side refusal");
	}

	printf("credentials: a second uid is refused by default and accepted when allowed\n");
	if (geteuid() != 0) {
		printf("  SKIP (part): not root, cannot drop to a second uid\n");
	} else {
		for (int allow = 0; allow < 2; allow++) {
			uid_t nobody = 65534, root = 0;
			struct rpal_policy pol = { .allow_same_uid = 1, .uids = &nobody, .nr_uids = allow };
			char name[64], dir[] = "/tmp/rpal-test-nobody-XXXXXX";
			int l3, p[2];
			snprintf(name, sizeof(name), "@rpal-test-uid-%d-%d", (int)getpid(), allow);
			/* The child's runtime directory: made and removed here. */
			t_check(mkdtemp(dir), "mkdtemp");
			t_check(chown(dir, nobody, nobody) == 0, "chown");
			l3 = t_ok(rpal_listen(name, &pol));
			t_check(pipe(p) == 0, "pipe");
			pid_t pid;
			/*
			 * The child keeps its lock files apart from ours, so it
			 * could pick our slot: fork again until its pid maps to
			 * another one.
			 */
			for (;;) {
				pid = fork();
				if (pid != 0 && (unsigned)pid % RPAL_DEFAULT_NR_SLOTS == myslot) {
					waitpid(pid, &status, 0);
					continue;
				}
				break;
			}
			if (pid == 0) {
				struct rpal_policy cpol = { .allow_same_uid = 1, .uids = &root, .nr_uids = 1 };
				if ((unsigned)getpid() % RPAL_DEFAULT_NR_SLOTS == myslot)
					_exit(3);
				rpal_fini();
				setenv("RPAL_RUNTIME_DIR", dir, 1);
				t_check(setgid(nobody) == 0 && setuid(nobody) == 0, "drop to uid %u", nobody);
				t_ok(rpal_init(NULL));
				r = rpal_connect(name, &cpol, 0);
				if (r >= 0) {
					char b[8];
					t_check(rpal_recv(r, b, sizeof(b), 0) == 2, "message from root");
				}
				exit(allow ? (r >= 0 ? 0 : 2) : (r == -EACCES ? 0 : 2));
			}
			for (;;) {
				r = rpal_accept(l3, RPAL_NONBLOCK);
				if (r != -EAGAIN)
					break;
				if (waitpid(pid, &status, WNOHANG) == pid)
					break;
				usleep(500);
			}
			if (allow) {
				struct rpal_conn_info ci;
				t_check(r >= 0, "uid %u allowed but refused: %s", nobody, rpal_strerror(r));
				t_ok(rpal_conn_info(r, &ci));
				t_check(ci.peer_uid == nobody, "peer uid %u", (unsigned)ci.peer_uid);
				t_ok(rpal_send(r, "hi", 2, 0));
				waitpid(pid, &status, 0);
				rpal_close(r);
			} else {
				if (r == -EAGAIN && WIFEXITED(status))
					printf("  the client exited with %d before it was refused\n", WEXITSTATUS(status));
				t_check(r == -EACCES, "uid %u not allowed but got %d", nobody, r);
				waitpid(pid, &status, 0);
			}
			t_rmdir_files(dir);
			t_check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
				"second-uid client (allow=%d) failed: %d", allow, WEXITSTATUS(status));
			rpal_close(l3);
			close(p[0]);
			close(p[1]);
		}
	}

	printf("a server whose WELCOME carries a bad wake page, or too many descriptors, is refused, and an empty answer with descriptors is a hang-up; the client keeps nothing\n");
	{
		static const char *const bad_page[] = { "an unsealed memfd", "a sealed memfd of 8 KiB", "a pipe",
							"no third descriptor", "a fourth descriptor",
							"a memfd sealed against writes", "a read-only memfd",
							"an empty answer with descriptors" };
		char path[64];
		int ls, fds1 = t_count_fds();  /* the watcher thread may have started since fds0 */
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(path, sizeof(path), "/tmp/rpal-hs-welcome-%d.sock", (int)getpid());
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		unlink(path);
		ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		t_check(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(ls, 4) == 0,
			"raw server socket");
		for (f = 0; f < 8; f++) {
			pid_t pid = fork();
			if (pid == 0) {
				rpal_fini();
				t_ok(rpal_init(NULL));
				int before = t_count_fds();
				int c = rpal_connect(path, NULL, 0);
				printf("  %-24s -> %s\n", bad_page[f], rpal_strerror(c));
				/* The pipe passed as the doorbell is closed on a thread of its own. */
				exit(c == (f == 7 ? -ECONNREFUSED : -EPROTO) && t_eventually(t_count_fds() == before, 1000) ? 0 : 2);
			}
			int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC), in[4], nin = 0, out[3], p[2], bad = -1;
			unsigned char buf[256];
			struct pollfd pf = { .fd = s, .events = POLLIN };
			struct rpal_hello hello, w;
			struct rpal_block *blk = block_create(64, 64);
			char why[128] = "";

			t_check(s >= 0 && blk && pipe2(p, O_CLOEXEC) == 0, "raw accept");
			t_check(poll(&pf, 1, 5000) == 1, "no hello");
			r = hs_recvmsg(s, buf, sizeof(buf), in, 4, &nin);
			while (nin)
				close(in[--nin]);
			t_check(r == (int)sizeof(hello), "hello of %d bytes", r);
			memcpy(&hello, buf, sizeof(hello));
			t_check(hello.features & RPAL_FEAT_WAKE_PAGE, "the client did not offer a wake page");
			switch (f) {
			case 0:
				bad = memfd_create("unsealed", MFD_CLOEXEC);
				t_check(ftruncate(bad, RPAL_WAKE_PAGE_SIZE) == 0, "ftruncate");
				break;
			case 1:
				bad = memfd_create("big", MFD_CLOEXEC | MFD_ALLOW_SEALING);
				t_check(ftruncate(bad, 2 * RPAL_WAKE_PAGE_SIZE) == 0, "ftruncate");
				fcntl(bad, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
				break;
			case 2:
			case 4:
				bad = dup(p[0]);
				break;
			case 5:
			case 6: {
				int m = memfd_create("ro", MFD_CLOEXEC | MFD_ALLOW_SEALING);
				char self[64];

				t_check(ftruncate(m, RPAL_WAKE_PAGE_SIZE) == 0, "ftruncate");
				fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | (f == 5 ? F_SEAL_WRITE : 0));
				snprintf(self, sizeof(self), "/proc/self/fd/%d", m);
				bad = f == 5 ? m : open(self, O_RDONLY | O_CLOEXEC);
				if (f == 6)
					close(m);
				break;
			}
			}
			struct rpal_geom g;
			geom_self(&g);
			hello_fill(&w, &g, RPAL_HS_WELCOME, blk, NULL, RPAL_FEAT_WAKE_PAGE);
			out[0] = rpal_g.memfd;
			out[1] = p[1];
			out[2] = bad;
			if (f == 4) {       /* hs_sendmsg() sends at most 3 */
				union {
					char buf[CMSG_SPACE(4 * sizeof(int))];
					struct cmsghdr align;
				} u = { 0 };
				struct iovec iov = { &w, sizeof(w) };
				struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
						     .msg_controllen = sizeof(u.buf) };
				struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
				int four[4] = { out[0], out[1], bad, p[0] };

				cm->cmsg_level = SOL_SOCKET;
				cm->cmsg_type = SCM_RIGHTS;
				cm->cmsg_len = CMSG_LEN(sizeof(four));
				memcpy(CMSG_DATA(cm), four, sizeof(four));
				t_check(sendmsg(s, &mh, 0) == (ssize_t)sizeof(w), "raw welcome: %s", strerror(errno));
			} else if (f == 7) {
				t_check(hs_sendmsg(s, "", 0, out, 2) == 0, "the empty answer");
			} else {
				t_check(hs_sendmsg(s, &w, sizeof(w), out, bad >= 0 ? 3 : 2) == 0, "raw welcome");
			}
			if (f != 7) {   /* the client refuses the others; that one it just hangs up */
				r = raw_answer(s, why, sizeof(why));
				t_check(r == EPROTO && (strstr(why, "wake page") || strstr(why, "expected 3") ||
							strstr(why, "more than 3")),
					"%s: the client answered %d (%s)", bad_page[f], r, why);
			}
			if (bad >= 0)
				close(bad);
			close(p[0]);
			close(p[1]);
			close(s);
			block_destroy(blk);
			t_wait_ok(pid, bad_page[f]);
		}
		close(ls);
		unlink(path);
		check_clean(fds1, used0, "bad wake pages");
	}

	printf("a client without a wake page (as the Go package is) killed while a thread sleeps on it in a set: EPOLLHUP within a second\n");
	{
		int ready[2];
		char c;
		t_check(pipe(ready) == 0, "pipe");
		pid_t pid = fork();
		if (pid == 0) {
			char why[128] = "";
			rpal_fini();
			t_ok(rpal_init(NULL));
			int s = raw_hello("hs", RAW_NONE, myslot);
			t_check(raw_answer(s, why, sizeof(why)) == 0, "raw client refused: %s", why);
			(void)!write(ready[1], "k", 1);
			pause();
			exit(0);
		}
		int fd;
		do
			fd = rpal_accept(lfd, RPAL_NONBLOCK);
		while (fd == -EAGAIN);
		t_check(fd >= 0, "raw client refused: %s", rpal_strerror(fd));
		t_check(read(ready[0], &c, 1) == 1, "the raw client did not get its welcome");
		struct sleeper s = { .ep = rpal_epoll_create(0) };
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 77 };
		pthread_t th;
		t_check(s.ep >= 0 && rpal_epoll_ctl(s.ep, EPOLL_CTL_ADD, fd, &ev) == 0, "set");
		t_check(pthread_create(&th, NULL, sleep_in_set, &s) == 0, "pthread_create");
		usleep(100000);                 /* asleep on futexes: the peer's wake_seq and our own word */
		uint64_t t0 = t_now_ns();
		kill(pid, SIGKILL);
		pthread_join(th, NULL);
		waitpid(pid, NULL, 0);
		t_check(s.n == 1 && s.ev.data.u64 == 77 && (s.ev.events & EPOLLHUP), "the sleeper returned %d (events %#x)",
			s.n, s.ev.events);
		t_check(t_now_ns() - t0 < 1000000000ull, "the sleeper took over a second to see the death");
		rpal_close(fd);
		rpal_close(s.ep);
		close(ready[0]);
		close(ready[1]);
	}

	printf("a client that gave up waiting before the server looked is reported as gone, not as lying\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			client_init(50);
			exit(rpal_connect("hs", NULL, 0) == -ETIMEDOUT ? 0 : 1);
		}
		t_wait_ok(pid, "a client that times out");
		r = rpal_accept(lfd, RPAL_NONBLOCK);
		printf("  %s\n", rpal_strerror(r));
		t_check(r == -ECONNRESET && strstr(rpal_strerror(r), "hung up"), "a client gone before we looked: %d (%s)",
			r, rpal_strerror(r));
	}

	printf("a burst of %d clients whose hellos all wait before the server looks, more than the %d handshakes it keeps in progress: every one is accepted\n",
	       BURST, RPAL_PENDING_MAX);
	/* Connections made above started the watcher thread, with descriptors
	 * of its own; the last client's may still be with the closer thread. */
	fds0 = settled_fds();
	{
		pid_t pids[BURST];
		int ready[2], accepted = 0, failed = 0;
		char b;

		t_check(pipe(ready) == 0, "pipe");
		for (int k = 0; k < BURST; k++) {
			pids[k] = fork();
			if (pids[k] == 0) {
				client_init(20000);       /* the server's pace is what is tested */
				(void)!write(ready[1], "r", 1);
				exit(rpal_connect("hs", NULL, 0) >= 0 ? 0 : 1);
			}
		}
		for (int k = 0; k < BURST; k++)
			t_check(read(ready[0], &b, 1) == 1, "a client's start");
		usleep(300000);                 /* each connects and sends its hello */
		uint64_t t0 = t_now_ns();
		while (accepted < BURST && t_now_ns() - t0 < 10000000000ull) {
			r = rpal_accept(lfd, RPAL_NONBLOCK);
			if (r >= 0) {
				accepted++;
				rpal_close(r);
			} else if (r != -EAGAIN) {
				failed++;
				printf("  accept: %s\n", rpal_strerror(r));
			}
		}
		for (int k = 0; k < BURST; k++) {
			t_check(waitpid(pids[k], &status, 0) == pids[k], "waitpid");
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				failed++;
		}
		printf("  %d accepted, %d failures\n", accepted, failed);
		t_check(accepted == BURST && !failed, "burst: %d of %d accepted, %d failures", accepted, BURST, failed);
		close(ready[0]);
		close(ready[1]);
		check_clean(fds0, used0, "burst");
	}

	printf("%d clients that connect and say nothing fill the handshakes in progress: a client with a hello still gets in\n",
	       RPAL_PENDING_MAX);
	{
		int silent[RPAL_PENDING_MAX], fd = -EAGAIN;

		for (int k = 0; k < RPAL_PENDING_MAX; k++)
			silent[k] = raw_connect("hs");
		t_check(rpal_accept(lfd, RPAL_NONBLOCK) == -EAGAIN, "a silent client was settled");
		pid_t pid = fork();
		if (pid == 0) {
			client_init(20000);
			exit(rpal_connect("hs", NULL, 0) >= 0 ? 0 : 1);
		}
		uint64_t t0 = t_now_ns();
		while (fd < 0 && t_now_ns() - t0 < 10000000000ull)
			fd = rpal_accept(lfd, RPAL_NONBLOCK);   /* silent ones time out meanwhile: errors */
		t_check(fd >= 0, "the client with a hello: %s", rpal_strerror(fd));
		rpal_close(fd);
		t_wait_ok(pid, "client among silent ones");
		for (int k = 0; k < RPAL_PENDING_MAX; k++)
			close(silent[k]);
		t0 = t_now_ns();
		while (rpal_accept(lfd, RPAL_NONBLOCK) != -EAGAIN && t_now_ns() - t0 < 5000000000ull)
			;
		check_clean(fds0, used0, "silent clients");
	}

	printf("a good client still connects\n");
	{
		pid_t pid = fork();
		if (pid == 0) {
			rpal_fini();
			t_ok(rpal_init(NULL));
			int fd = t_ok(rpal_connect("hs", NULL, 0));
			t_ok(rpal_send(fd, "ok", 2, 0));
			char b[4];
			t_check(rpal_recv(fd, b, sizeof(b), 0) == 0, "end of stream");
			exit(0);
		}
		int fd;
		do
			fd = rpal_accept(lfd, RPAL_NONBLOCK);
		while (fd == -EAGAIN);
		t_check(fd >= 0, "good client refused: %s", rpal_strerror(fd));
		char b[4];
		t_check(rpal_recv(fd, b, sizeof(b), 0) == 2 && !memcmp(b, "ok", 2), "message");
		rpal_close(fd);
		t_wait_ok(pid, "good client");
	}
	rpal_close(lfd);
	printf("PASS\n");
	return 0;
}
