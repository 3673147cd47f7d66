/* SPDX-License-Identifier: MIT */
/*
 * Description: the address map.  The region is reserved PROT_NONE, our
 * arena is a sealed memfd mapped read-write at our slot, a peer's arena is
 * mapped read-only at the peer's slot (writing faults, mprotect cannot add
 * write), and a pointer-rich structure built by the peer is walked through
 * its raw pointers.  Also: config validation names the bad field, an
 * RLIMIT_AS too small for the region is named as the cause, and so is a
 * map count at vm.max_map_count (at rpal_init, and at a client's connect,
 * while the server goes on serving), a world-writable runtime directory is
 * refused, a forked child inherits no mapping and no descriptor across exec
 * and may init afresh, and a stale socket left by a killed server is
 * replaced.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "internal.h"
#include "helpers.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Take every mapping the kernel allows this process (vm.max_map_count). */
static void fill_map_count(void)
{
	/* Every other page of one reservation made readable: a mapping
	 * each, until the kernel refuses more. */
	size_t pages = 1 << 18, i;
	char *area = mmap(NULL, pages * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	t_check(area != MAP_FAILED, "mmap: %s", strerror(errno));
	for (i = 0; i < pages; i += 2)
		if (mprotect(area + i * 4096, 4096, PROT_READ))
			break;
	t_check(i < pages && errno == ENOMEM, "%zu mappings and no ENOMEM (%s)", i / 2, strerror(errno));
	/* A split needs two; single pages take what is left. */
	while (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED)
		;
}

struct node {
	struct node *next;
	uint64_t value;
};

static sigjmp_buf jb;

static void on_segv(int sig)
{
	(void)sig;
	siglongjmp(jb, 1);
}

static void expect_bad(struct rpal_config *c, const char *field)
{
	int r = rpal_init(c);

	t_check(r == -EINVAL, "bad %s accepted (%d)", field, r);
	t_check(strstr(rpal_strerror(r), field), "error for %s does not name it: %s", field, rpal_strerror(r));
	printf("  %-13s -> %s\n", field, rpal_strerror(r));
}

static void config_checks(void)
{
	struct rpal_config c;

	printf("config: each bad field is refused by name\n");
	rpal_config_default(&c); c.slot_size = 3 << 20;         expect_bad(&c, "slot_size");
	rpal_config_default(&c); c.nr_slots = 1;                 expect_bad(&c, "nr_slots");
	rpal_config_default(&c); c.region_base += 4096;          expect_bad(&c, "region_base");
	rpal_config_default(&c); c.arena_size = c.slot_size * 2; expect_bad(&c, "arena_size");
	rpal_config_default(&c); c.ring_entries = 100;           expect_bad(&c, "ring_entries");
	rpal_config_default(&c); c.handshake_ms = 0;             expect_bad(&c, "handshake_ms");
	rpal_config_default(&c); c.nr_slots = 4096; c.slot_size = 1ULL << 36; expect_bad(&c, "region");

	setenv("RPAL_RING_ENTRIES", "1024", 1);
	setenv("RPAL_SPIN_US", "010", 1);
	setenv("RPAL_SLOT_SIZE", "0x200000000", 1);
	rpal_config_default(&c);
	t_check(c.ring_entries == 1024 && c.spin_us == 10 && c.slot_size == 0x200000000ull,
		"environment overrides: %u %u %#llx", c.ring_entries, c.spin_us, (unsigned long long)c.slot_size);
	setenv("RPAL_SPIN_US", "fast", 1);
	rpal_config_default(&c);
	int e = rpal_init(&c);
	t_check(e == -EINVAL && strstr(rpal_strerror(e), "RPAL_SPIN_US"), "bad RPAL_SPIN_US: %s", rpal_strerror(e));
	printf("  RPAL_SPIN_US=fast -> %s\n", rpal_strerror(e));
	unsetenv("RPAL_SPIN_US");
	unsetenv("RPAL_SLOT_SIZE");
	unsetenv("RPAL_RING_ENTRIES");
	setenv("RPAL_HANDSHAKE_MS", "0", 1);
	rpal_config_default(&c);
	e = rpal_init(&c);
	t_check(e == -EINVAL && strstr(rpal_strerror(e), "(from RPAL_HANDSHAKE_MS=0)"), "RPAL_HANDSHAKE_MS=0: %s",
		rpal_strerror(e));
	unsetenv("RPAL_HANDSHAKE_MS");
	/* Out of range, not malformed: refused by the field's check, which
	 * names the variable.  The base: aligned, its last slot past 2^47. */
	char top_base[32];
	rpal_config_default(&c);
	snprintf(top_base, sizeof(top_base), "%#llx", (unsigned long long)((1ULL << 47) - c.slot_size));
	const char *const out_of_range[][3] = {
		{ "RPAL_SPIN_US", "10000001", "at most 10 s" },
		{ "RPAL_PROTECT_PEERS", "3", "must be 0 (off)" },
		{ "RPAL_REGION_BASE", top_base, "47-bit" },
	};
	for (unsigned i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
		char want[64];

		setenv(out_of_range[i][0], out_of_range[i][1], 1);
		rpal_config_default(&c);
		e = rpal_init(&c);
		snprintf(want, sizeof(want), "(from %s=%s)", out_of_range[i][0], out_of_range[i][1]);
		t_check(e == -EINVAL && strstr(rpal_strerror(e), want) && strstr(rpal_strerror(e), out_of_range[i][2]),
			"%s=%s: %s", out_of_range[i][0], out_of_range[i][1], rpal_strerror(e));
		printf("  %s=%s -> %s\n", out_of_range[i][0], out_of_range[i][1], rpal_strerror(e));
		unsetenv(out_of_range[i][0]);
	}

	printf("under an RLIMIT_AS smaller than the region, the error names the limit\n");
	pid_t pid = 0;
	if (!t_skip_emulated("RLIMIT_AS", "setrlimit(RLIMIT_AS) does not bound the emulated process")) {
		pid = fork();
		if (pid == 0) {
			struct rlimit as = { 1ULL << 30, 1ULL << 30 };

			t_check(setrlimit(RLIMIT_AS, &as) == 0, "setrlimit: %s", strerror(errno));
			e = rpal_init(NULL);
			printf("  -> %s\n", rpal_strerror(e));
			t_check(e == -ENOMEM && strstr(rpal_strerror(e), "RLIMIT_AS"), "under RLIMIT_AS: %d %s", e,
				rpal_strerror(e));
			_exit(0);
		}
		t_wait_ok(pid, "rpal_init under RLIMIT_AS");
	}

	printf("with the process's mappings at vm.max_map_count, the error names the map count\n");
	if (!t_skip_emulated("max_map_count", "the emulator's own mappings share the count")) {
		pid = fork();
		if (pid == 0) {
			fill_map_count();
			e = rpal_init(NULL);
			printf("  -> %s\n", rpal_strerror(e));
			t_check(e == -ENOMEM && strstr(rpal_strerror(e), "max_map_count"), "at the map count: %d %s", e,
				rpal_strerror(e));
			_exit(0);
		}
		t_wait_ok(pid, "rpal_init at the map count");
	}

	printf("a world-writable runtime directory is refused\n");
	char dir[] = "/tmp/rpal-test-open-XXXXXX";
	t_check(mkdtemp(dir), "mkdtemp");
	chmod(dir, 0777);
	rpal_config_default(&c);
	snprintf(c.runtime_dir, sizeof(c.runtime_dir), "%s", dir);
	int r = rpal_init(&c);
	t_check(r == -EPERM, "0777 runtime dir accepted: %d", r);
	printf("  -> %s\n", rpal_strerror(r));
	rmdir(dir);
}

/* Descriptors open before the test started (",3,10,"): not ours to judge. */
static char preexisting[4096] = ",";

static void note_preexisting(void)
{
	char path[64];

	for (int fd = 3; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (access(path, F_OK) == 0 && strlen(preexisting) < sizeof(preexisting) - 8)
			snprintf(preexisting + strlen(preexisting), 8, "%d,", fd);
	}
}

/* After exec: fail if any new descriptor above stderr is one of rpal's kinds. */
static int check_fds(const char *skip)
{
	static const char *const kinds[] = { "memfd:rpal", "pipe:", "socket:", "eventpoll", "pidfd", "slots.lock" };
	char path[64], link[256];
	int bad = 0;

	for (int fd = 3; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		char me[16];
		snprintf(me, sizeof(me), ",%d,", fd);
		if (strstr(skip, me))
			continue;
		for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
			if (strstr(link, kinds[k])) {
				printf("  inherited across exec: fd %d -> %s\n", fd, link);
				bad = 1;
			}
	}
	return bad;
}

int main(int argc, char **argv)
{
	struct rpal_config cfg;
	void *base;
	size_t size;
	unsigned slot;
	char perms[5];
	int lfd, fd, p[2];
	pid_t pid;

	if (argc > 2 && !strcmp(argv[1], "--check-fds"))
		return check_fds(argv[2]);
	note_preexisting();
	config_checks();

	printf("our arena: sealed memfd, read-write at our slot; the rest reserved\n");
	rpal_config_default(&cfg);
	t_ok(rpal_init(&cfg));
	t_check(rpal_init(&cfg) == -EALREADY, "second rpal_init");
	t_ok(rpal_self(&slot, &base, &size));
	t_check((uintptr_t)base == cfg.region_base + slot * cfg.slot_size, "arena at %p, not at its slot", base);
	t_check(t_mapping_perms((uintptr_t)base, perms) == 1 && !strcmp(perms, "rw-s"), "arena maps as %s", perms);
	t_check(t_mapping_perms((uintptr_t)cfg.region_base + (slot ^ 1) * cfg.slot_size, perms) == 1 &&
		!strcmp(perms, "---p"), "another slot maps as %s", perms);
	int seals = fcntl(rpal_g.memfd, F_GET_SEALS);
	t_check((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) ==
		(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), "seals %#x", seals);
	t_check(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rpal_g.memfd, 0) == MAP_FAILED,
		"a second writable mapping of our arena was allowed");

	printf("a peer's linked list, walked by its raw pointers in our read-only view\n");
	lfd = t_ok(rpal_listen("map", NULL));
	t_check(pipe2(p, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		unsigned s2;
		t_check(t_mapping_perms((uintptr_t)base, perms) == 0,
			"a forked child still maps the parent's arena (%s)", perms);
		t_check(t_mapping_perms((uintptr_t)cfg.region_base, perms) == 0, "a forked child kept the region");
		t_ok(rpal_init(NULL));
		t_ok(rpal_self(&s2, NULL, NULL));
		t_check(s2 != slot, "child got the parent's slot %u", slot);
		int c = t_ok(rpal_connect("map", NULL, 0));
		struct node *head = NULL;
		for (int i = 0; i < 1000; i++) {
			struct node *n = rpal_buf_alloc(sizeof(*n));
			t_check(n, "alloc");
			n->next = head;
			n->value = (uint64_t)i * 7;
			head = n;
		}
		t_ok(rpal_send(c, &head, sizeof(head), 0));
		char b;
		t_check(read(p[0], &b, 1) == 1, "wait");
		_exit(0);
	}
	fd = t_ok(rpal_accept(lfd, 0));
	struct node *head;
	t_check(t_ok(rpal_recv(fd, &head, sizeof(head), 0)) == sizeof(head), "pointer");
	struct rpal_conn_info ci;
	t_ok(rpal_conn_info(fd, &ci));
	t_check((uintptr_t)head >= cfg.region_base + ci.peer_slot * cfg.slot_size &&
		(uintptr_t)head < cfg.region_base + (ci.peer_slot + 1) * cfg.slot_size, "pointer not in the peer's slot");
	uint64_t sum = 0, count = 0;
	for (struct node *n = head; n; n = n->next) {
		sum += n->value;
		count++;
	}
	t_check(count == 1000 && sum == 7ull * 999 * 1000 / 2, "walked %lu nodes, sum %lu", (unsigned long)count,
		(unsigned long)sum);
	t_check(t_mapping_perms((uintptr_t)head, perms) == 1 && !strcmp(perms, "r--s"), "peer arena maps as %s", perms);

	printf("the peer's arena is read-only to us: a write faults, mprotect cannot add write\n");
	signal(SIGSEGV, on_segv);
	if (sigsetjmp(jb, 1) == 0) {
		*(volatile uint64_t *)&head->value = 1;
		t_fail("wrote into the peer's arena");
	}
	signal(SIGSEGV, SIG_DFL);
	uintptr_t page = (uintptr_t)head & ~(uintptr_t)4095;
	t_check(mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) < 0, "mprotect added write to a peer's arena");
	(void)!write(p[1], "q", 1);
	t_wait_ok(pid, "peer");
	t_ok(rpal_close(fd));
	t_check(t_mapping_perms(page, perms) == 1 && !strcmp(perms, "---p"), "after close the peer slot maps as %s", perms);

	printf("a client at vm.max_map_count: its connect fails naming the map count, the server goes on\n");
	if (!t_skip_emulated("max_map_count", "the emulator's own mappings share the count")) {
		pid = fork();
		if (pid == 0) {
			t_ok(rpal_init(NULL));
			fill_map_count();
			int e = rpal_connect("map", NULL, 0);
			printf("  -> %s\n", rpal_strerror(e));
			t_check(e == -ENOMEM && strstr(rpal_strerror(e), "max_map_count"), "connect at the map count: %d %s",
				e, rpal_strerror(e));
			_exit(0);
		}
		/* The server may finish its side first: then the connection
		 * ends when the client gives up. */
		fd = rpal_accept(lfd, 0);
		if (fd >= 0) {
			char b;
			ssize_t n = rpal_recv(fd, &b, 1, 0);
			t_check(n <= 0, "a message from a client that failed to connect");
			t_ok(rpal_close(fd));
		}
		t_wait_ok(pid, "connect at the map count");
		/* Still serving: a new client connects and is heard. */
		pid = fork();
		if (pid == 0) {
			t_ok(rpal_init(NULL));
			int c = t_ok(rpal_connect("map", NULL, 0));
			t_ok(rpal_send(c, "ok", 2, 0));
			_exit(0);
		}
		fd = t_ok(rpal_accept(lfd, 0));
		char got[2];
		t_check(t_ok(rpal_recv(fd, got, 2, 0)) == 2 && !memcmp(got, "ok", 2), "the next client was not heard");
		t_wait_ok(pid, "a client after the one at the map count");
		t_ok(rpal_close(fd));
	}

	printf("exec: no rpal descriptor crosses it\n");
	pid = fork();
	if (pid == 0) {
		char *args[] = { "region", "--check-fds", preexisting, NULL };

		t_execv("/proc/self/exe", args);
		_exit(2);
	}
	t_wait_ok(pid, "exec'd child found an inherited rpal descriptor");

	printf("a stale socket left by a killed server is replaced\n");
	pid = fork();
	if (pid == 0) {
		rpal_fini();
		t_ok(rpal_init(NULL));
		t_ok(rpal_listen("stale", NULL));
		(void)!write(p[1], "r", 1);
		pause();
		_exit(0);
	}
	char b;
	t_check(read(p[0], &b, 1) == 1, "server up");
	t_check(rpal_listen("stale", NULL) == -EADDRINUSE, "a live server's name was taken");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	char path[256];
	snprintf(path, sizeof(path), "%s/stale.sock", rpal_g.rundir);
	t_check(access(path, F_OK) == 0, "the killed server left no socket file (test is moot)");
	int l2 = rpal_listen("stale", NULL);
	t_check(l2 >= 0, "stale socket not replaced: %s", rpal_strerror(l2));
	rpal_close(l2);
	rpal_close(lfd);

	printf("a peer's written pages: one memfd lookup notes every page up to its first hole\n");
	{
		const size_t asize = 4u << 20, written = 1u << 20;
		struct rpal_peer peer = { .base = 1u << 30, .size = asize };
		int mfd = memfd_create("written", MFD_CLOEXEC);
		char *m;

		t_check(mfd >= 0 && ftruncate(mfd, (off_t)asize) == 0, "memfd: %m");
		m = mmap(NULL, written, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		t_check(m != MAP_FAILED, "mmap: %m");
		memset(m, 1, written);
		peer.memfd = mfd;
		peer.written = calloc(asize / RPAL_PAGE / 64, sizeof(*peer.written));
		t_check(!peer_pages_known(&peer, peer.base + 8192, 100), "a page known before any lookup");
		t_check(peer_pages_check(&peer, peer.base + 8192, 100), "written page refused");
		t_check(peer_pages_known(&peer, peer.base + 300 * 1024, 64) &&
			peer_pages_known(&peer, peer.base + written - 64, 64),
			"the pages after the one looked up, up to the hole, are not noted as written");
		t_check(!peer_pages_check(&peer, peer.base + written - 64, 128), "a range into the hole accepted");
		t_check(!peer_pages_check(&peer, peer.base + written + 4096, 1), "a page of the hole accepted");
		munmap(m, written);
		close(mfd);
		free((void *)peer.written);
	}
	rpal_fini();
	t_check(t_mapping_perms(cfg.region_base, perms) == 0, "region still mapped after rpal_fini");
	printf("PASS\n");
	return 0;
}
