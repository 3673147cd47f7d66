/* SPDX-License-Identifier: MIT */
/*
 * Description: an application's mistakes get a clear error and lose
 * nothing.  A call before rpal_init() says so, whatever an earlier call
 * left for rpal_strerror().  NULL pointers to the send, receive, info
 * and stats calls, or in a policy, return -EINVAL; so do flag bits a
 * call does not know, and a batch with a bad entry, which sends nothing;
 * a release of a message that was not received on that connection (a
 * forged token, a copy of a released struct, another connection's
 * message) returns -EINVAL and sends the peer nothing, so the connection
 * keeps working.  rpal_epoll_ctl() mistakes (a second set, removal from
 * a set the connection is not in) leave their own detail for
 * rpal_strerror(), not an earlier call's of the same errno.  A path
 * service's rpal_listen() removes a stale listener's socket only: a file,
 * a directory or a foreign lock file in the way stay, and it fails EEXIST;
 * a live socket there without its lock file (another program's, or an
 * rpal listener's whose lock file was removed) stays and still answers,
 * and it fails EADDRINUSE; the connection it probed with is no news to
 * that listener's rpal_accept().
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "helpers.h"

static void echo_works(int a, int b, const char *after)
{
	char buf[8];

	t_ok(rpal_send(a, "ping", 4, 0));
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "ping", 4), "no echo after %s", after);
}

/* The text of file path, or "" (at most 63 bytes). */
static const char *file_text(const char *path)
{
	static char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* A path service never removes what is not a stale listener's: a file, a
 * directory, or a lock file that is not an empty one, are left as they
 * were, and the listen fails with EEXIST; a stale socket is taken over. */
static void listen_paths(void)
{
	char dir[] = "/tmp/rpal-misuse-XXXXXX", path[128], lock[140];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, e;

	printf("a path service leaves a file, a directory or a foreign lock file where it is (EEXIST)\n");
	t_check(mkdtemp(dir), "mkdtemp");
	snprintf(path, sizeof(path), "%s/svc", dir);
	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	t_check(fd >= 0 && write(fd, "important", 9) == 9, "write %s", path);
	close(fd);
	e = rpal_listen(path, NULL);
	printf("  a file: %s\n", rpal_strerror(e));
	t_check(e == -EEXIST && strstr(rpal_strerror(e), "is in the way"), "listen over a file: %d", e);
	t_check(!strcmp(file_text(path), "important") && access(lock, F_OK) < 0, "the file was touched, or a lock left");
	unlink(path);

	t_check(mkdir(path, 0700) == 0, "mkdir");
	e = rpal_listen(path, NULL);
	t_check(e == -EEXIST && access(path, F_OK) == 0, "listen over an empty directory: %d", e);
	rmdir(path);

	fd = open(lock, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	t_check(fd >= 0 && write(fd, "notes", 5) == 5, "write %s", lock);
	close(fd);
	e = rpal_listen(path, NULL);
	printf("  a foreign lock file: %s\n", rpal_strerror(e));
	t_check(e == -EEXIST && !strcmp(file_text(lock), "notes") && access(path, F_OK) < 0,
		"listen beside a foreign lock file: %d", e);
	unlink(lock);

	printf("a live socket at the path, with no lock file, is left serving (EADDRINUSE)\n");
	memcpy(sa.sun_path, path, strlen(path) + 1);     /* well under sun_path's 108 bytes */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	t_check(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 4) == 0,
		"a foreign stream listener");
	e = rpal_listen(path, NULL);
	printf("  another program's socket: %s\n", rpal_strerror(e));
	t_check(e == -EADDRINUSE && strstr(rpal_strerror(e), "is live"), "listen over a live socket: %d", e);
	t_check(access(lock, F_OK) < 0, "a lock file was left");
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	t_check(probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		"the foreign listener no longer answers: %s", strerror(errno));
	close(probe);
	close(fd);
	unlink(path);

	int first = t_ok(rpal_listen(path, NULL));
	t_check(unlink(lock) == 0, "remove the first listener's lock file");
	e = rpal_listen(path, NULL);
	printf("  an rpal listener's whose lock file was removed: %s\n", rpal_strerror(e));
	t_check(e == -EADDRINUSE, "a second listener of one path: %d", e);
	e = rpal_accept(first, RPAL_NONBLOCK);
	t_check(e == -EAGAIN, "the probe's connection reached the first listener's accept: %s", rpal_strerror(e));
	pthread_t th;
	void *r;
	t_check(pthread_create(&th, NULL, t_accept_one, &first) == 0, "pthread_create");
	int c = rpal_connect(path, NULL, 0);
	t_check(c >= 0, "the first listener no longer answers: %s", rpal_strerror(c));
	pthread_join(th, &r);
	int s = (int)(intptr_t)r;
	echo_works(c, s, "a second listen");
	rpal_close(c);
	rpal_close(s);
	rpal_close(first);

	printf("a stale socket at the path is taken over\n");
	memcpy(sa.sun_path, path, strlen(path) + 1);     /* well under sun_path's 108 bytes */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	t_check(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind a stale socket");
	close(fd);
	fd = t_ok(rpal_listen(path, NULL));
	rpal_close(fd);
	t_check(access(path, F_OK) < 0 && access(lock, F_OK) < 0, "the listener's files outlive it");
	rmdir(dir);
}

int main(void)
{
	static char big[1000];
	struct rpal_msg m, copy, other;
	struct rpal_conn_info ci;
	struct iovec iov = { NULL, 4 };
	int a, b, a2, b2;

	printf("calls before rpal_init() say so, not what an earlier failure said\n");
	t_check(rpal_send(-1, "x", 1, 0) < 0, "rpal_send(-1)");
	t_check(rpal_self(NULL, NULL, NULL) == -ENOTCONN, "rpal_self before rpal_init");
	printf("  %s\n", rpal_strerror(-ENOTCONN));
	t_check(strstr(rpal_strerror(-ENOTCONN), "rpal_init"), "rpal_self's detail: %s", rpal_strerror(-ENOTCONN));
	t_check(rpal_stats(NULL) == -ENOTCONN, "rpal_stats before rpal_init");
	t_check(strstr(rpal_strerror(-ENOTCONN), "rpal_stats"), "rpal_stats's detail: %s", rpal_strerror(-ENOTCONN));

	t_self_pair("misuse", &a, &b);
	t_self_pair("misuse2", &a2, &b2);

	printf("NULL buffers and arrays return EINVAL\n");
	t_check(rpal_send(a, NULL, 4, 0) == -EINVAL, "rpal_send(NULL)");
	t_check(rpal_send_batch(a, NULL, 1, 0) == -EINVAL, "rpal_send_batch(NULL)");
	t_check(rpal_send_batch(a, &iov, 1, 0) == -EINVAL, "rpal_send_batch with a NULL base");
	t_check(rpal_recv(b, NULL, 16, RPAL_NONBLOCK) == -EINVAL, "rpal_recv(NULL)");
	t_check(rpal_recv_msg(b, NULL, 1, RPAL_NONBLOCK) == -EINVAL, "rpal_recv_msg(NULL)");
	t_check(rpal_msg_release(b, NULL, 1) == -EINVAL, "rpal_msg_release(NULL)");
	printf("  %s\n", rpal_strerror(-EINVAL));
	t_ok(rpal_msg_release(b, NULL, 0));
	t_check(rpal_conn_info(a, NULL) == -EINVAL, "rpal_conn_info(NULL)");
	t_check(rpal_stats(NULL) == -EINVAL, "rpal_stats(NULL)");
	t_check(rpal_runtime_dir(NULL, NULL, 100) == -EINVAL, "rpal_runtime_dir(NULL out)");
	printf("  %s\n", rpal_strerror(-EINVAL));
	rpal_config_default(NULL);
	{
		struct rpal_policy p = { .nr_uids = 3 };

		t_check(rpal_listen("misuse-policy", &p) == -EINVAL, "rpal_listen with nr_uids and no uids");
		printf("  %s\n", rpal_strerror(-EINVAL));
		p = (struct rpal_policy){ .nr_gids = 1 };
		t_check(rpal_connect("misuse", &p, 0) == -EINVAL, "rpal_connect with nr_gids and no gids");
	}
	echo_works(a, b, "NULL arguments");

	printf("flag bits a call does not know return EINVAL, and nothing is sent\n");
	{
		struct iovec two[2] = { { "ab", 2 }, { "cd", 0 } };
		char buf[8];
		void *ab = rpal_buf_alloc(8);
		int lfd = t_ok(rpal_listen("misuse-flags", NULL));

		t_check(ab, "rpal_buf_alloc");
		t_check(rpal_send(a, "x", 1, 0x100) == -EINVAL, "rpal_send flags 0x100");
		printf("  %s\n", rpal_strerror(-EINVAL));
		t_check(rpal_send_batch(a, two, 1, 0x100) == -EINVAL, "rpal_send_batch flags 0x100");
		t_check(rpal_send_buf(a, ab, 8, 0x100) == -EINVAL, "rpal_send_buf flags 0x100");
		t_ok(rpal_send_buf(a, ab, 8, 0));
		t_check(rpal_recv_msg(b, &m, 1, RPAL_NONBLOCK | RPAL_MORE) == -EINVAL, "rpal_recv_msg with RPAL_MORE");
		t_check(rpal_recv(b, buf, sizeof(buf), 0x100) == -EINVAL, "rpal_recv flags 0x100");
		t_check(rpal_recv_msg(b, &m, 1, 0) == 1 && m.len == 8, "the one buffer sent");
		t_ok(rpal_msg_release(b, &m, 1));
		t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == -EAGAIN, "nothing else arrived");
		t_check(rpal_accept(lfd, 0x80 | RPAL_NONBLOCK) == -EINVAL, "rpal_accept flags 0x81");

		printf("a batch with an empty entry fails whole\n");
		t_check(rpal_send_batch(a, two, 2, 0) == -EINVAL, "rpal_send_batch with an empty second entry");
		printf("  %s\n", rpal_strerror(-EINVAL));
		t_check(rpal_recv(b, buf, sizeof(buf), RPAL_NONBLOCK) == -EAGAIN, "the batch's first entry was not sent");
		rpal_close(lfd);
	}
	echo_works(a, b, "unknown flags");

	printf("releases of messages not received here return EINVAL and reach no peer\n");
	memset(big, 'b', sizeof(big));
	t_ok(rpal_send(a, big, sizeof(big), 0));
	t_check(rpal_recv_msg(b, &m, 1, 0) == 1 && (m.flags & RPAL_MSG_BUF), "a buffer message");
	copy = m;
	other = m;
	t_check(rpal_msg_release(b2, &other, 1) == -EINVAL, "release on another connection");
	printf("  another connection's message: %s\n", rpal_strerror(-EINVAL));
	other.token = m.token + 64;
	t_check(rpal_msg_release(b, &other, 1) == -EINVAL, "forged token");
	printf("  a forged token: %s\n", rpal_strerror(-EINVAL));
	t_ok(rpal_conn_info(a, &ci));
	t_check(ci.bufs_outstanding == 1, "the sender's buffer is still out (%u)", ci.bufs_outstanding);
	t_ok(rpal_msg_release(b, &m, 1));
	t_check(m.token == 0, "token cleared");
	t_ok(rpal_msg_release(b, &m, 1));       /* the same struct again: nothing to do */
	t_check(rpal_msg_release(b, &copy, 1) == -EINVAL, "release through a copy");
	printf("  a copy of a released struct: %s\n", rpal_strerror(-EINVAL));

	printf("epoll_ctl mistakes say what they were, not what an earlier call said\n");
	{
		int ep1 = t_ok(rpal_epoll_create(0)), ep2 = t_ok(rpal_epoll_create(0));
		struct epoll_event ev = { .events = EPOLLIN };
		void *buf = rpal_buf_alloc(64);

		t_check(buf, "rpal_buf_alloc");
		t_ok(rpal_send_buf(a, buf, 64, 0));
		t_check(rpal_send_buf(a, buf, 64, 0) == -EBUSY, "a buffer in flight sent again");
		t_ok(rpal_epoll_ctl(ep1, EPOLL_CTL_ADD, b, &ev));
		t_check(rpal_epoll_ctl(ep2, EPOLL_CTL_ADD, b, &ev) == -1 && errno == EBUSY, "a second set");
		printf("  %s\n", rpal_strerror(-EBUSY));
		t_check(strstr(rpal_strerror(-EBUSY), "another rpal epoll set"), "EBUSY's detail is an earlier call's");
		t_check(rpal_epoll_ctl(ep2, EPOLL_CTL_DEL, b, NULL) == -1 && errno == ENOENT, "removal from a set it is not in");
		t_check(strstr(rpal_strerror(-ENOENT), "not in this set"), "ENOENT's detail: %s", rpal_strerror(-ENOENT));
		t_ok(rpal_epoll_ctl(ep1, EPOLL_CTL_DEL, b, NULL));
		t_check(rpal_recv_msg(b, &m, 1, 0) == 1, "the buffer message");
		t_ok(rpal_msg_release(b, &m, 1));
		rpal_close(ep1);
		rpal_close(ep2);
	}

	printf("both connections still work\n");
	echo_works(a, b, "bad releases");
	echo_works(a2, b2, "bad releases");
	listen_paths();
	printf("PASS\n");
	return T_EXIT_PASS;
}
