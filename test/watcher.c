/* SPDX-License-Identifier: MIT */
/*
 * Description: the watcher thread sleeps while nothing happens.  Its kick
 * (a block starts to linger) is level-triggered: a kick that comes while
 * the watcher sweeps, for a block its sweep then frees, must still be read,
 * or the watcher would wake at once for ever, bumping watch_seq and with
 * it every sleeper without a wake page.  We stall the sweep on rpal_g.lock,
 * kick meanwhile, and count watch_seq's bumps once nothing lingers.
 */
#include <sys/socket.h>

#include "helpers.h"
#include "internal.h"

int main(void)
{
	int a[2], b[2], c[2];
	uint32_t seq0, seq1;

	t_ok(rpal_init(NULL));
	t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0, "socketpair");
	t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) == 0, "socketpair");
	t_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c) == 0, "socketpair");

	printf("a kick while the watcher's sweep waits for the lock, for nothing left to linger\n");
	pthread_mutex_lock(&rpal_g.lock);
	watch_linger(a[0]);             /* starts the watcher, which sweeps and waits for the lock */
	/* glibc's mutex word is 2 once a thread waits for it: the watcher,
	 * having read the first kick. */
	for (int i = 0; atomic_load((_Atomic int *)&rpal_g.lock.__data.__lock) != 2; i++) {
		if (i == 2000) {
			pthread_mutex_unlock(&rpal_g.lock);
			t_skip("the watcher never waited for the lock: the race cannot be set up");
		}
		usleep(1000);
	}
	watch_linger(b[0]);             /* the second kick, after the watcher read the first */
	pthread_mutex_unlock(&rpal_g.lock);
	usleep(50000);

	seq0 = atomic_load(&watch_seq);
	usleep(200000);
	seq1 = atomic_load(&watch_seq);
	printf("  watch_seq moved by %u in 200 ms with nothing happening\n", seq1 - seq0);
	t_check(seq1 - seq0 < 10, "the watcher keeps waking: watch_seq moved by %u", seq1 - seq0);

	printf("a hang-up still reaches it\n");
	t_ok(watch_add(c[0], EPOLLRDHUP, WATCH_CONN | (uint32_t)c[0]));
	close(c[1]);
	t_check(t_eventually(atomic_load(&watch_seq) != seq1, 2000), "the hang-up went unseen");

	watch_del(c[0]);
	close(c[0]);
	for (int i = 0; i < 2; i++) {
		close(a[i]);
		close(b[i]);
	}
	printf("PASS\n");
	return T_EXIT_PASS;
}
