/* SPDX-License-Identifier: MIT */
/*
 * Description: an application's mistakes get a clear error and lose
 * nothing.  NULL pointers to the send and receive calls return -EINVAL;
 * a release of a message that was not received on that connection (a
 * forged token, a copy of a released struct, another connection's
 * message) returns -EINVAL and sends the peer nothing, so the connection
 * keeps working.  rpal_epoll_ctl() mistakes (a second set, removal from
 * a set the connection is not in) leave their own detail for
 * rpal_strerror(), not an earlier call's of the same errno.
 */
#include "helpers.h"

static void echo_works(int a, int b, const char *after)
{
	char buf[8];

	t_ok(rpal_send(a, "ping", 4, 0));
	t_check(rpal_recv(b, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "ping", 4), "no echo after %s", after);
}

int main(void)
{
	static char big[1000];
	struct rpal_msg m, copy, other;
	struct rpal_conn_info ci;
	struct iovec iov = { NULL, 4 };
	int a, b, a2, b2;

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
	echo_works(a, b, "NULL arguments");

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
	printf("PASS\n");
	return T_EXIT_PASS;
}
