/* SPDX-License-Identifier: MIT */
/* config.c - defaults, RPAL_* environment overrides and one validator. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"

/* The first malformed RPAL_* variable, reported by rpal_config_check(). */
static __thread char env_error[96];

/* Decimal, or hexadecimal with 0x (never octal: "010" is ten). */
static bool env_parse(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;
	int base = 10;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		base = 16;
	errno = 0;
	x = strtoull(s, &end, base);
	if (errno || *end || s[0] == '-')
		return false;
	*v = x;
	return true;
}

static void env_u64(const char *name, uint64_t *v)
{
	const char *s = getenv(name);

	if (s && *s && !env_parse(s, v) && !env_error[0])
		snprintf(env_error, sizeof(env_error), "%s=%.40s is not a number", name, s);
}

static void env_uint(const char *name, unsigned *v)
{
	uint64_t x = *v;

	env_u64(name, &x);
	if (x <= UINT32_MAX)
		*v = (unsigned)x;
	else if (!env_error[0])
		snprintf(env_error, sizeof(env_error), "%s=%llu is too large", name, (unsigned long long)x);
}

static void env_wait_policy(unsigned *v)
{
	static const char *const names[] = { "adaptive", "spin", "sleep" };
	const char *e = getenv("RPAL_WAIT");

	if (!e || !*e)
		return;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(e, names[i])) {
			*v = i;
			return;
		}
	if (!env_error[0])
		snprintf(env_error, sizeof(env_error), "RPAL_WAIT=%.32s is not adaptive, spin or sleep", e);
}

RPAL_EXPORT void rpal_config_default(struct rpal_config *cfg)
{
	const char *dir;

	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	env_error[0] = 0;
	cfg->region_base = RPAL_DEFAULT_REGION_BASE;
	cfg->slot_size = RPAL_DEFAULT_SLOT_SIZE;
	cfg->nr_slots = RPAL_DEFAULT_NR_SLOTS;
	cfg->arena_size = RPAL_DEFAULT_ARENA_SIZE;
	cfg->ring_entries = RPAL_DEFAULT_RING_ENTRIES;
	cfg->spin_us = RPAL_DEFAULT_SPIN_US;
	cfg->handshake_ms = RPAL_DEFAULT_HANDSHAKE_MS;

	env_u64("RPAL_REGION_BASE", &cfg->region_base);
	env_u64("RPAL_SLOT_SIZE", &cfg->slot_size);
	env_uint("RPAL_NR_SLOTS", &cfg->nr_slots);
	env_u64("RPAL_ARENA_SIZE", &cfg->arena_size);
	env_uint("RPAL_RING_ENTRIES", &cfg->ring_entries);
	env_uint("RPAL_SPIN_US", &cfg->spin_us);
	env_uint("RPAL_HANDSHAKE_MS", &cfg->handshake_ms);
	env_uint("RPAL_PROTECT_PEERS", &cfg->protect_peers);
	env_u64("RPAL_CONN_BUDGET", &cfg->conn_budget);
	env_wait_policy(&cfg->wait_policy);
	dir = getenv("RPAL_RUNTIME_DIR");
	if (dir && strlen(dir) < sizeof(cfg->runtime_dir))
		strcpy(cfg->runtime_dir, dir);
}

static bool pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* " (from NAME=value)" where the variable is set and reads as value, the
 * likely source of a field rpal_config_check() refuses; else "". */
static const char *env_note(const char *name, uint64_t value)
{
	static __thread char note[80];
	const char *s = getenv(name);
	uint64_t x;

	note[0] = 0;
	if (s && *s && env_parse(s, &x) && x == value)
		snprintf(note, sizeof(note), " (from %s=%.40s)", name, s);
	return note;
}

/* Names the first bad field and its limit. */
int rpal_config_check(const struct rpal_config *c)
{
	const uint64_t user_top = 1ULL << 47;

	if (env_error[0])
		return rpal_fail(EINVAL, "environment: %s", env_error);
	if (!pow2(c->slot_size) || c->slot_size < (1ULL << 20))
		return rpal_fail(EINVAL, "config: slot_size %" PRIu64 " (%#" PRIx64 ") must be a power of two >= 1 MiB%s",
				 c->slot_size, c->slot_size, env_note("RPAL_SLOT_SIZE", c->slot_size));
	if (c->nr_slots < 2 || c->nr_slots > 4096)
		return rpal_fail(EINVAL, "config: nr_slots %u must be in 2..4096%s", c->nr_slots,
				 env_note("RPAL_NR_SLOTS", c->nr_slots));
	if (c->region_base == 0 || c->region_base % c->slot_size)
		return rpal_fail(EINVAL, "config: region_base %#" PRIx64 " must be non-zero and slot_size aligned%s",
				 c->region_base, env_note("RPAL_REGION_BASE", c->region_base));
	if (c->slot_size > user_top / c->nr_slots || c->region_base > user_top - c->slot_size * c->nr_slots)
		return rpal_fail(EINVAL, "config: region %#" PRIx64 " + %u x %#" PRIx64 " passes the 47-bit user address limit%s",
				 c->region_base, c->nr_slots, c->slot_size, env_note("RPAL_REGION_BASE", c->region_base));
	if (c->arena_size < (1ULL << 20) || c->arena_size > c->slot_size || c->arena_size % RPAL_PAGE)
		return rpal_fail(EINVAL, "config: arena_size %" PRIu64 " (%#" PRIx64 ") must be a page multiple in 1 MiB..slot_size%s",
				 c->arena_size, c->arena_size, env_note("RPAL_ARENA_SIZE", c->arena_size));
	if (!pow2(c->ring_entries) || c->ring_entries < 8 || c->ring_entries > 65536)
		return rpal_fail(EINVAL, "config: ring_entries %u must be a power of two in 8..65536%s", c->ring_entries,
				 env_note("RPAL_RING_ENTRIES", c->ring_entries));
	if (c->spin_us > 10u * 1000 * 1000)
		return rpal_fail(EINVAL, "config: spin_us %u must be at most 10 s%s", c->spin_us,
				 env_note("RPAL_SPIN_US", c->spin_us));
	if (c->wait_policy > RPAL_WAIT_POLICY_SLEEP)
		return rpal_fail(EINVAL, "config: wait_policy %u must be 0 (adaptive), 1 (spin) or 2 (sleep)",
				 c->wait_policy);
	if (c->conn_budget && (c->conn_budget < (64u << 10) || c->conn_budget > c->arena_size))
		return rpal_fail(EINVAL, "config: conn_budget %" PRIu64 " must be 0 (arena_size / 4) or in 64 KiB..arena_size%s",
				 c->conn_budget, env_note("RPAL_CONN_BUDGET", c->conn_budget));
	if (c->handshake_ms == 0 || c->handshake_ms > 60000)
		return rpal_fail(EINVAL, "config: handshake_ms %u must be in 1..60000%s", c->handshake_ms,
				 env_note("RPAL_HANDSHAKE_MS", c->handshake_ms));
	if (memchr(c->runtime_dir, 0, sizeof(c->runtime_dir)) == NULL)
		return rpal_fail(EINVAL, "config: runtime_dir is not NUL-terminated");
	if (c->protect_peers > RPAL_PROTECT_REQUIRE)
		return rpal_fail(EINVAL, "config: protect_peers %u must be 0 (off), 1 (where the CPU has PKU) "
				 "or 2 (required)%s", c->protect_peers, env_note("RPAL_PROTECT_PEERS", c->protect_peers));
	return 0;
}

/* Where sockets and locks live; see struct rpal_config. */
RPAL_EXPORT int rpal_runtime_dir(const struct rpal_config *cfg, char *out, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct rpal_config def;
	int n;

	if (!out || !len)
		return rpal_fail(EINVAL, "rpal_runtime_dir: %s", out ? "len is 0" : "out is NULL");
	if (!cfg) {
		rpal_config_default(&def);
		cfg = &def;
	}
	if (cfg->runtime_dir[0])
		n = snprintf(out, len, "%s", cfg->runtime_dir);
	else if (xdg && xdg[0] == '/')
		n = snprintf(out, len, "%s/rpal", xdg);
	else
		n = snprintf(out, len, "/tmp/rpal-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return rpal_fail(ENAMETOOLONG, "runtime directory name is too long");
	return 0;
}
