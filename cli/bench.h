/* SPDX-License-Identifier: MIT */
/*
 * bench.h - `rpal bench`: private to cli/.
 *
 * A run is one (transport, placement, wait, suite, size, copy mode) cell.
 * The parent maps a shared area, forks the server, waits until it is
 * ready, forks the client, and waits for both.  The server stores one-way
 * samples and the client round-trip samples straight into the shared area;
 * the parent sorts them once both children have exited.
 */
#ifndef RPAL_CLI_BENCH_H
#define RPAL_CLI_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>
#include "stats.h"

enum placement { PL_SAME_CORE, PL_SPLIT, PL_UNPINNED, PL_NR };
enum suite { SU_LATENCY, SU_THROUGHPUT, SU_LARGE, SU_CPU, SU_RPC, SU_NR };
enum wait { WAIT_NONE = -1, WAIT_SLEEP = 0, WAIT_SPIN = 1, WAIT_ADAPTIVE = 2, WAIT_NR = 3 };

extern const char *const placement_name[PL_NR];
extern const char *const suite_name[SU_NR];
const char *wait_name(int wait);	/* NULL for WAIT_NONE */

/* Message layout: a 16-byte header, then the payload pattern. */
struct msg_hdr {
	uint64_t tsc;	/* client's rdtscp just before the send call */
	uint32_t seq;	/* message number, warm-up included */
	uint32_t len;	/* whole message, header included */
};
#define MSG_MIN ((size_t)sizeof(struct msg_hdr))
#define MSG_MAX ((size_t)64 << 20)

/* The rpc suite: request/response at offered rates (rpc in run.c). */
#define RPC_SIZE 1024			/* --size when not given */
#define RPC_MAX_RATES 16
#define RPC_MAX_CONC 64			/* requests in flight: every ring holds them */
#define RPC_MAX_INFLIGHT_BYTES 65536	/* concurrency x size: fits every buffer */

/* Options of one `rpal bench` invocation. */
struct bench_opts {
	unsigned transports;		/* bit i: transport i */
	unsigned placements;		/* bit per enum placement */
	unsigned waits;			/* bit 1 << enum wait */
	unsigned suites;		/* bit per enum suite */
	size_t size;
	uint64_t count;
	uint64_t large_count;		/* 0: derived from count and size */
	unsigned batch;
	double rate;
	double seconds;
	double rates[RPC_MAX_RATES];	/* rpc: offered requests/s; 0 = max (closed loop) */
	unsigned nrates;
	unsigned concurrency;		/* rpc: requests outstanding at most */
	uint64_t work_ns;		/* rpc: server busy-work per request */
	int size_set;			/* --size given (else rpc uses RPC_SIZE) */
	unsigned warmup;
	unsigned timeout_s;		/* per run */
	unsigned rounds;		/* runs of each cell, interleaved; median reported */
	unsigned spin_us;		/* rpal spin_us for --wait spin */
	const char *json_path;		/* NULL: none; "-": stdout, no table */
	const char *plot_path;
	int progress;
	int verbose;
	int ncpu;
	char cmdline[1024];
};

/* One run's request. */
struct run_spec {
	int transport;
	enum placement placement;
	int wait;
	enum suite suite;
	size_t size;
	int zerocopy;
	uint64_t count;			/* measured messages */
	unsigned warmup;		/* extra messages first, not recorded */
	unsigned batch;			/* throughput: messages per batch */
	double rate;			/* cpu: messages per second; rpc: offered, 0 = max */
	double seconds;			/* rpc: measured time (max) or requests / rate */
	unsigned concurrency;		/* rpc */
	uint64_t work_ns;		/* rpc: server busy-work per request */
	unsigned spin_us;		/* rpal: spin_us when wait is spin */
	int cpu_server, cpu_client;	/* -1: not pinned */
};

/* CPU time of one process over its measured loop, from getrusage(). */
struct cpu_use {
	uint64_t user_ns, sys_ns;
};

/*
 * The area shared by the parent and both children (MAP_SHARED, populated
 * before fork).  Samples follow the struct.
 */
struct run_shared {
	_Alignas(64) atomic_uint server_ready;	/* server may be connected to */
	_Alignas(64) atomic_uint_fast64_t progress;	/* client: messages done */
	atomic_uint client_done;		/* client: last echo received */
	_Alignas(64) char err[2][256];		/* [role] first error, if any */
	uint64_t skew;				/* one-way samples < 0 (TSC skew), clamped */
	uint64_t bad;				/* payload mismatches */
	struct cpu_use cpu[2];			/* [role] */
	uint64_t elapsed_tsc;			/* client: measured loop */
	uint64_t nbatch;			/* throughput: batches recorded */
	int has_counts;				/* the transport filled these: */
	uint64_t wakeups[2], sleeps[2];		/* [role] wake-up syscalls made, sleeps taken */
	uint64_t *oneway;			/* count: server */
	uint64_t *rtt;				/* count: client (or per batch) */
	double tsc_hz;				/* rpc: the parent's calibration */
	_Alignas(64) atomic_uint_fast64_t rpc_total;	/* rpc: requests sent; the next is the end */
	atomic_uint rpc_server_done;		/* rpc: the server has the end marker */
	uint64_t rpc_done;			/* rpc: measured requests answered */
	uint64_t rpc_unsent;			/* rpc: scheduled but not sent by the deadline */
	/* rpc: per measured request, the CPU the client sent it from and the
	 * one the server received it on, plus 1 (0: not recorded).  NULL in
	 * rpal-hosted's programs, where the server runs on the client's thread. */
	uint16_t *rpc_cpu[2];			/* [role] */
	unsigned nextra;			/* latency metrics beyond oneway and rtt: */
	struct {
		int metric;			/* enum metric */
		struct stats st;		/* cycles */
	} extra[2];
};

enum { ROLE_SERVER, ROLE_CLIENT };

/* What a transport sees in each process. */
struct bt_ctx {
	const struct run_spec *spec;
	struct run_shared *sh;
	int role;
	void *priv;			/* the transport's, set by setup() */
};

/*
 * A transport: one server and one client, each in its own process.
 * send/recv move one message of spec->size bytes.  tx_buf() gives the
 * buffer the next message is built in (private memory for a copying send,
 * the transport's own for zero copy); recv() returns the received message
 * (valid until release()).  more = 1 says another message of this batch
 * follows, so a transport may defer its wake-up or coalesce writes.
 * Errors: negative errno, after bt_fail() said what went wrong.
 */
struct transport {
	const char *name;
	const char *what;		/* one line for --list and --help */
	const char *(*unavailable)(void);	/* reason, or NULL when usable */
	unsigned flags;
#define TF_WAIT 0x1			/* honours --wait */
#define TF_ZEROCOPY 0x2			/* has a zero-copy path */
#define TF_RPC_ONLY 0x4			/* request/response only: the rpc suite */
	const char *no_rpc;		/* why the rpc suite does not run it, or NULL */
	const char *baseline;		/* its own baseline for the round-by-round comparison, or NULL */
	int (*setup)(struct bt_ctx *);		/* parent, before fork */
	int (*open)(struct bt_ctx *);		/* child, pinned */
	int (*accept)(struct bt_ctx *);		/* server, after ready; may be NULL */
	void *(*tx_buf)(struct bt_ctx *);
	int (*send)(struct bt_ctx *, void *buf, int more);
	const void *(*recv)(struct bt_ctx *);
	void (*release)(struct bt_ctx *);
	void (*close)(struct bt_ctx *);		/* child */
	void (*teardown)(struct bt_ctx *);	/* parent, after both exit */
};

extern const struct transport *const transports[];
extern const unsigned nr_transports;
int transport_find(const char *name);

/* Record the first error of this process's role; returns -err (err > 0). */
int bt_fail(struct bt_ctx *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Spin politely: pause, and after a while yield so a peer on this CPU runs. */
void bt_relax(unsigned *spins);

/* run.c's server and client loops, for a transport that runs them elsewhere. */
int bt_serve(const struct transport *t, struct bt_ctx *c);
int bt_drive(const struct transport *t, struct bt_ctx *c);
int rpc_serve(const struct transport *t, struct bt_ctx *c);	/* the rpc suite's loops */
int rpc_drive(const struct transport *t, struct bt_ctx *c);

/* Results, one per metric of a run. */
enum metric { M_ONEWAY, M_RTT, M_THROUGHPUT, M_CPU, M_CALL_RTT, M_SWITCH_PAIR, M_RPC, M_NR };
extern const char *const metric_name[M_NR];

#define CDF_POINTS 201			/* quantiles kept for --plot */
#define MAX_ROUNDS 64			/* --rounds */

struct result {
	int transport;
	enum placement placement;
	int wait;
	enum suite suite;
	enum metric metric;
	size_t size;
	int zerocopy;
	unsigned batch;
	const char *unit;
	struct stats st;		/* in unit */
	double tput;			/* throughput: overall msgs/s */
	struct cpu_use cpu[2];		/* cpu: per role */
	double rate, seconds;		/* rpc: offered (0 = max), wall seconds measured */
	double achieved_rate;		/* rpc: requests answered / seconds */
	double cpu_per_req_ns, cpu_cores;	/* rpc: both processes' CPU per request, per wall s */
	unsigned concurrency;		/* rpc */
	uint64_t work_ns;		/* rpc */
	uint64_t unsent;		/* rpc: open loop overloaded, given up at 2 x --seconds */
	uint64_t skew;
	int has_counts;			/* wake-ups and sleeps per message, both sides */
	double wakeups_per_msg, sleeps_per_msg;
	double same_cpu_share;		/* rpc: requests sent and received on one CPU; < 0: unknown */
	uint64_t cdf[CDF_POINTS];	/* oneway: cycles at quantile i/(N-1), tail-weighted */
	unsigned rounds;		/* runs behind it: it is the median one by round_key (rpc CPU: by round_cpu) */
	double round_key[MAX_ROUNDS];	/* each run's p50 (throughput, CPU: mean) */
	double round_cpu[MAX_ROUNDS];	/* rpc: each run's CPU per request, ns */
};

struct run_out {
	int ok;
	char err[300];
	struct result res[4];
	unsigned nres;
};

/* Run one cell; fills out (ok = 0 with err on failure). */
void run_one(const struct bench_opts *o, const struct run_spec *s, double tsc_hz, struct run_out *out);

/* Quantile of point i of the --plot curve (0..1), tail-weighted. */
double cdf_quantile(unsigned i);

/* report.c */
struct report {
	double tsc_hz;
	uint64_t tsc_step;		/* tsc_step(): samples are multiples of it */
	int invariant, hypervisor;
	const struct bench_opts *o;
	struct result *res;
	unsigned nres;
	char errs[64][480];		/* runs that failed, for the table and JSON */
	unsigned nerrs;
};
void report_table(const struct report *r, FILE *f);
int report_json(const struct report *r, FILE *f);
int report_plot(const struct report *r, const char *path);

int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);	/* cmd_run.c: `rpal run` */
int cmd_doctor(int argc, char **argv);	/* doctor.c: `rpal doctor` */
void jstr(FILE *f, const char *s);	/* report.c: s as a JSON string */
void jstrn(FILE *f, const char *s, size_t n);	/* its first n bytes */
int cmd_host(int argc, char **argv);	/* cmd_host.c: `rpal host`, `rpal join`, `rpal ps` */
int cmd_join(int argc, char **argv);
int cmd_ps(int argc, char **argv);

#endif
