/* SPDX-License-Identifier: MIT */
/*
 * hosted_bench.h - what tr_hosted.c (the relay, in `rpal bench`) shares with
 * bench_hosted.c (rpal-bench-hosted, the two programs `rpal run` hosts).
 * Private to cli/.
 *
 * The relay creates a results file (a memfd, fd HB_FD in `rpal run`) and
 * writes the header; the programs map it and run the cell with sh as their
 * run_shared.  Samples follow at HB_HEAD, each array count long: one-way,
 * round trip, then in the latency suite the call round trips and the switch
 * pairs.  Both sides are built from the same sources; magic, version and
 * sizes catch an rpal and an rpal-bench-hosted from different builds.
 */
#ifndef RPAL_CLI_HOSTED_BENCH_H
#define RPAL_CLI_HOSTED_BENCH_H

#include "bench.h"

#define HB_MAGIC   0x4448424c41505252ull	/* "RRPALBHD" */
#define HB_VERSION 1u
#define HB_FD      3

enum { HB_ONEWAY, HB_RTT, HB_CALL, HB_SWITCH, HB_NR };

struct hb_file {
	uint64_t magic;
	uint32_t version;
	uint32_t spec_size, shared_size;	/* sizeof(struct run_spec), sizeof(struct run_shared) */
	uint32_t narrays;			/* sample arrays: 2, or HB_NR in the latency suite */
	uint64_t count, warmup;			/* messages as run.c counts them */
	uint64_t calls;				/* client: RPAL calls seen in the timed call loop */
	_Atomic uint32_t done, closed;		/* programs past their loops, their rpal_close */
	struct run_spec spec;
	char service[64];
	struct run_shared sh;			/* oneway and rtt point into the server's mapping */
};

#define HB_HEAD (((sizeof(struct hb_file)) + 4095) & ~(size_t)4095)

static inline uint64_t *hb_samples(struct hb_file *f, unsigned array)
{
	return (uint64_t *)((char *)f + HB_HEAD) + (size_t)array * f->count;
}

/* bench_rpal.c: the rpal-connected transport under a given service name;
 * its close leaves rpal_fini to the program's exit. */
extern const struct transport tr_rpal_connected;
int rp_hosted_setup(struct bt_ctx *c, const char *service);
int rp_hosted_fd(struct bt_ctx *c);

#endif
