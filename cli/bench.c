/* SPDX-License-Identifier: MIT */
/* bench.c - `rpal bench`: options, the run matrix, reporting. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "tsc.h"

const char *const placement_name[PL_NR] = { "same-core", "split", "unpinned" };
const char *const suite_name[SU_NR] = { "latency", "throughput", "large", "cpu", "rpc" };
const char *const metric_name[M_NR] = { "oneway", "rtt", "throughput", "cpu_per_msg", "call_rtt",
					 "switch_pair", "rpc" };
static const size_t large_sizes[] = { 4096, 65536, 1048576 };

const char *wait_name(int wait)
{
	return wait == WAIT_SPIN ? "spin" : wait == WAIT_SLEEP ? "sleep" : wait == WAIT_ADAPTIVE ? "adaptive" : NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: rpal bench [options]\n"
"\n"
"Runs a server and a client as two processes per transport and reports the\n"
"one-way latency (client rdtscp in the message to server receipt, in TSC\n"
"cycles and ns), the round trip, throughput and CPU cost.  See docs/BENCH.md.\n"
"\n"
"  -t, --transport LIST  comma list of transports, or \"all\" (default: all);\n"
"                        see --list\n"
"  -p, --placement LIST  same-core, split (server on one CPU, client on another)\n"
"                        and/or unpinned (default: split; same-core with 1 CPU)\n"
"  -s, --size BYTES      message size, header included, >= 16 (default 32);\n"
"                        k/m suffixes are powers of 1024\n"
"  -n, --count N         measured messages per run (default 1000000)\n"
"  -w, --wait LIST       rpal consumers: adaptive (librpal's default: spin\n"
"                        only while cheaper than a sleep), spin (awake: spin\n"
"                        up to --spin-us before sleeping), sleep (sleep at\n"
"                        once) (default: all three)\n"
"      --spin-us N       rpal spin_us for --wait spin (default 1000000);\n"
"                        librpal does not spin for a peer on its own CPU\n"
"  -S, --suite LIST      latency (ping-pong: one-way + round trip), throughput\n"
"                        (batches, msgs/s), large (4 KiB, 64 KiB, 1 MiB, one-copy\n"
"                        and zero-copy), cpu (CPU per message at --rate), rpc\n"
"                        (request/response at --rates: latency and CPU), or\n"
"                        all (the first four; name rpc to add it)\n"
"                        (default: latency,throughput)\n"
"  -b, --batch N         throughput: messages sent before waiting (default 32)\n"
"      --large-count N   large: messages per size (default: --count scaled down\n"
"                        by size, at least 100)\n"
"  -r, --rate N          cpu: messages per second (default 1000); adds cpu\n"
"  -T, --seconds T       cpu, and rpc per rate: duration (default 2); adds cpu\n"
"                        unless rpc is asked for\n"
"      --rates LIST      rpc: offered requests/s, comma list; max = closed loop,\n"
"                        as fast as replies come (default 1000,10000,max);\n"
"                        adds rpc.  Open loop: request i is due at start + i/rate\n"
"                        and its latency counts from then, not from its send\n"
"      --concurrency N   rpc: requests outstanding at most, 1..64 (default 1);\n"
"                        N x size must be at most 64 KiB\n"
"      --work NS         rpc: server busy-work per request, ns (default 0)\n"
"                        rpc's --size is 1024 unless given\n"
"  -R, --rounds N        run every case N times (default 1), interleaved: each\n"
"                        case once, then each again, and so on; report each\n"
"                        case's median run (by p50; throughput and CPU by mean;\n"
"                        an rpc row's CPU figures: its median run by CPU).\n"
"                        On a VM whose speed drifts, a slow spell that hits a\n"
"                        minority of a case's runs then does not show; rpal\n"
"                        rows are also compared round by round with futex's\n"
"                        run of the same round (latency) or uds-epoll's (CPU);\n"
"                        rpc rows by p50 and by CPU per request\n"
"      --warmup N        unrecorded messages before each run (default 1000)\n"
"      --timeout S       kill a run after S seconds (default 600)\n"
"      --json[=FILE]     write results as JSON to FILE, or to stdout instead\n"
"                        of the table\n"
"      --plot FILE.svg   draw one-way latency distributions (log scale); with\n"
"                        rpc, also FILE-rpc.svg: p50 and CPU per request\n"
"                        against the rate achieved\n"
"      --progress / --no-progress\n"
"                        progress on stderr (default: when stderr is a tty)\n"
"  -l, --list            list transports and whether each is available\n"
"  -v, --verbose         one line per run on stderr\n"
"  -h, --help            this text\n"
"\n"
"Placement split pins the server to the second allowed CPU and the client to\n"
"the first; same-core pins both to the first.  Tests of the bench check its\n"
"logic, never its speed: numbers come only from runs like this one.\n"
"\n"
"A full run (every transport, wait and suite, 10^6 messages each) takes\n"
"minutes.  A first look in seconds:\n"
"  rpal bench -t futex,rpal-connected -w adaptive -n 20000\n"
"and the request/response sweep of docs/BENCH.md:\n"
"  rpal bench -t uds-epoll,futex,rpal-connected -w adaptive -S rpc --rates 1000,10000,max -T 1\n");
}

static int list_transports(void)
{
	for (unsigned i = 0; i < nr_transports; i++) {
		const struct transport *t = transports[i];
		const char *why = t->unavailable ? t->unavailable() : NULL;

		printf("%-15s %s%s%s\n", t->name, t->what, why ? "\n                not available: " : "",
		       why ? why : "");
	}
	return 0;
}

/* Parse "12", "4k", "1m", "1e6"; 0 on garbage. */
static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	if (*end == 'k' || *end == 'K')
		v *= 1024, end++;
	else if (*end == 'm' || *end == 'M')
		v *= 1024 * 1024, end++;
	if (*end || v > 1e15)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

/* Set bits for each comma-separated name found by find(); -1 names the bad one. */
static int parse_list(const char *arg, const char *what, int (*find)(const char *), unsigned *bits)
{
	char buf[512], *save, *tok;

	snprintf(buf, sizeof(buf), "%s", arg);
	*bits = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int i = find(tok);

		if (i == -2) {
			*bits = ~0u;
			continue;
		}
		if (i < 0) {
			fprintf(stderr, "rpal bench: unknown %s \"%s\" (see rpal bench --help)\n", what, tok);
			return -1;
		}
		*bits |= 1u << i;
	}
	if (!*bits) {
		fprintf(stderr, "rpal bench: empty %s list\n", what);
		return -1;
	}
	return 0;
}

static int find_transport(const char *s)
{
	return !strcmp(s, "all") ? -2 : transport_find(s);
}

static int find_in(const char *s, const char *const *names, int n)
{
	if (!strcmp(s, "all"))
		return -2;
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static int find_placement(const char *s) { return find_in(s, placement_name, PL_NR); }
static int find_suite(const char *s) { return find_in(s, suite_name, SU_NR); }
static int find_wait(const char *s)
{
	static const char *const w[WAIT_NR] = { "sleep", "spin", "adaptive" };

	return find_in(s, w, WAIT_NR);
}

/* The first two CPUs we may run on. */
static int pick_cpus(int cpu[2])
{
	cpu_set_t set;
	int n = 0;

	cpu[0] = cpu[1] = -1;
	if (sched_getaffinity(0, sizeof(set), &set))
		return 0;
	for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
		if (CPU_ISSET(i, &set))
			cpu[n++] = i;
	return CPU_COUNT(&set);
}

static uint64_t large_count(const struct bench_opts *o, size_t size)
{
	uint64_t n = o->count * 64 / size;

	if (o->large_count)
		return o->large_count;
	if (n > o->count)
		n = o->count;
	return n < 100 ? 100 : n;
}

enum {
	OPT_LARGE_COUNT = 256, OPT_WARMUP, OPT_TIMEOUT, OPT_JSON, OPT_PLOT, OPT_PROGRESS,
	OPT_NO_PROGRESS, OPT_SPIN_US, OPT_RATES, OPT_CONCURRENCY, OPT_WORK,
};

/* --rates: "1000,10k,max"; max is 0 (closed loop).  -1 on garbage. */
static int parse_rates(const char *arg, struct bench_opts *o)
{
	char buf[512], *save, *tok, *end;

	snprintf(buf, sizeof(buf), "%s", arg);
	o->nrates = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		double v = 0;

		if (o->nrates == RPC_MAX_RATES) {
			fprintf(stderr, "rpal bench: --rates takes at most %d rates\n", RPC_MAX_RATES);
			return -1;
		}
		if (strcmp(tok, "max")) {
			v = strtod(tok, &end);
			if (*end || !(v >= 1 && v <= 1e7)) {
				fprintf(stderr, "rpal bench: --rates: \"%s\" is not max or 1..1e7 requests/s\n",
					tok);
				return -1;
			}
		}
		o->rates[o->nrates++] = v;
	}
	if (!o->nrates) {
		fprintf(stderr, "rpal bench: empty --rates list\n");
		return -1;
	}
	return 0;
}

/* Is name one of the comma-separated words of list? */
static bool list_has(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

static int parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option lo[] = {
		{ "transport", required_argument, NULL, 't' },
		{ "placement", required_argument, NULL, 'p' },
		{ "size", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "spin-us", required_argument, NULL, OPT_SPIN_US },
		{ "suite", required_argument, NULL, 'S' },
		{ "batch", required_argument, NULL, 'b' },
		{ "large-count", required_argument, NULL, OPT_LARGE_COUNT },
		{ "rate", required_argument, NULL, 'r' },
		{ "seconds", required_argument, NULL, 'T' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "rates", required_argument, NULL, OPT_RATES },
		{ "concurrency", required_argument, NULL, OPT_CONCURRENCY },
		{ "work", required_argument, NULL, OPT_WORK },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "json", optional_argument, NULL, OPT_JSON },
		{ "plot", required_argument, NULL, OPT_PLOT },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		{ "list", no_argument, NULL, 'l' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int cpu[2], c, cpu_opt = 0, rpc_opt = 0, seconds_opt = 0;
	uint64_t v;
	char *end;

	*o = (struct bench_opts){
		.transports = ~0u, .placements = 1u << PL_SPLIT, .waits = (1u << WAIT_NR) - 1,
		.suites = 1u << SU_LATENCY | 1u << SU_THROUGHPUT, .size = 32, .count = 1000000,
		.batch = 32, .rate = 1000, .seconds = 2, .warmup = 1000, .timeout_s = 600,
		.spin_us = 1000000, .rounds = 1,
		.rates = { 1000, 10000, 0 }, .nrates = 3, .concurrency = 1,
		.progress = isatty(2),
	};
	o->ncpu = pick_cpus(cpu);
	if (o->ncpu < 2)
		o->placements = 1u << PL_SAME_CORE;
	/* argv[0] is "bench": the command as typed, for the record. */
	for (int i = 0, n = 0; i < argc && n + 2 < (int)sizeof(o->cmdline); i++)
		n += snprintf(o->cmdline + n, sizeof(o->cmdline) - n, "%s%s", i ? " " : "rpal ", argv[i]);

	optind = 1;
	while ((c = getopt_long(argc, argv, "t:p:s:n:w:S:b:r:T:R:lvh", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			if (parse_list(optarg, "transport", find_transport, &o->transports))
				return -1;
			break;
		case 'p':
			if (parse_list(optarg, "placement", find_placement, &o->placements))
				return -1;
			break;
		case 'w':
			if (parse_list(optarg, "wait", find_wait, &o->waits))
				return -1;
			break;
		case 'S':
			if (parse_list(optarg, "suite", find_suite, &o->suites))
				return -1;
			/* "all" is the classic four: an rpc sweep is long, and asked for by name. */
			if (o->suites == ~0u && !list_has(optarg, "rpc"))
				o->suites &= ~(1u << SU_RPC);
			break;
		case 's':
			if (parse_u64(optarg, &v) || v < MSG_MIN || v > MSG_MAX) {
				fprintf(stderr, "rpal bench: --size must be %zu..%zu bytes, not \"%s\"\n",
					MSG_MIN, MSG_MAX, optarg);
				return -1;
			}
			o->size = v;
			o->size_set = 1;
			break;
		case 'n':
			/* Every sample is kept: 16 bytes a message, shared and populated. */
			if (parse_u64(optarg, &v) || v < 1 || v > 100000000) {
				fprintf(stderr, "rpal bench: --count must be 1..1e8, not \"%s\"\n", optarg);
				return -1;
			}
			o->count = v;
			break;
		case 'b':
			if (parse_u64(optarg, &v) || v < 1 || v > 256) {
				fprintf(stderr, "rpal bench: --batch must be 1..256, not \"%s\"\n", optarg);
				return -1;
			}
			o->batch = (unsigned)v;
			break;
		case OPT_LARGE_COUNT:
			if (parse_u64(optarg, &v) || v < 1 || v > 100000000) {
				fprintf(stderr, "rpal bench: --large-count must be 1..1e8\n");
				return -1;
			}
			o->large_count = v;
			break;
		case 'r':
			o->rate = strtod(optarg, &end);
			if (*end || !(o->rate >= 1 && o->rate <= 1e7)) {
				fprintf(stderr, "rpal bench: --rate must be 1..1e7 messages/s\n");
				return -1;
			}
			cpu_opt = 1;
			break;
		case 'T':
			o->seconds = strtod(optarg, &end);
			if (*end || !(o->seconds > 0 && o->seconds <= 3600)) {
				fprintf(stderr, "rpal bench: --seconds must be in (0, 3600]\n");
				return -1;
			}
			seconds_opt = 1;
			break;
		case 'R':
			if (parse_u64(optarg, &v) || v < 1 || v > MAX_ROUNDS) {
				fprintf(stderr, "rpal bench: --rounds must be 1..%d, not \"%s\"\n", MAX_ROUNDS,
					optarg);
				return -1;
			}
			o->rounds = (unsigned)v;
			break;
		case OPT_RATES:
			if (parse_rates(optarg, o))
				return -1;
			rpc_opt = 1;
			break;
		case OPT_CONCURRENCY:
			if (parse_u64(optarg, &v) || v < 1 || v > RPC_MAX_CONC) {
				fprintf(stderr, "rpal bench: --concurrency must be 1..%d, not \"%s\"\n",
					RPC_MAX_CONC, optarg);
				return -1;
			}
			o->concurrency = (unsigned)v;
			break;
		case OPT_WORK:
			if (parse_u64(optarg, &v) || v > 100000000) {
				fprintf(stderr, "rpal bench: --work must be 0..1e8 ns, not \"%s\"\n", optarg);
				return -1;
			}
			o->work_ns = v;
			break;
		case OPT_WARMUP:
			if (parse_u64(optarg, &v) || v > 1000000) {
				fprintf(stderr, "rpal bench: --warmup must be 0..1e6\n");
				return -1;
			}
			o->warmup = (unsigned)v;
			break;
		case OPT_TIMEOUT:
			if (parse_u64(optarg, &v) || v < 1 || v > 86400) {
				fprintf(stderr, "rpal bench: --timeout must be 1..86400 s\n");
				return -1;
			}
			o->timeout_s = (unsigned)v;
			break;
		case OPT_SPIN_US:
			if (parse_u64(optarg, &v) || v > 10000000) {
				fprintf(stderr, "rpal bench: --spin-us must be 0..10000000 (10 s, librpal's limit)\n");
				return -1;
			}
			o->spin_us = (unsigned)v;
			break;
		case OPT_JSON:
			o->json_path = optarg ? optarg : "-";
			break;
		case OPT_PLOT:
			o->plot_path = optarg;
			break;
		case OPT_PROGRESS:
			o->progress = 1;
			break;
		case OPT_NO_PROGRESS:
			o->progress = 0;
			break;
		case 'l':
			exit(list_transports());
		case 'v':
			o->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			fprintf(stderr, "rpal bench: see rpal bench --help\n");
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rpal bench: unexpected argument \"%s\"\n", argv[optind]);
		return -1;
	}
	if (rpc_opt)
		o->suites |= 1u << SU_RPC;
	/* --seconds is also rpc's: it asks for cpu only where rpc is not run. */
	if (cpu_opt || (seconds_opt && !(o->suites & (1u << SU_RPC))))
		o->suites |= 1u << SU_CPU;
	o->transports &= (1u << nr_transports) - 1;
	o->placements &= (1u << PL_NR) - 1;
	o->suites &= (1u << SU_NR) - 1;
	o->waits &= (1u << WAIT_NR) - 1;
	if ((o->suites & (1u << SU_RPC)) &&
	    o->concurrency * (o->size_set ? o->size : RPC_SIZE) > RPC_MAX_INFLIGHT_BYTES) {
		/* Every reply in flight must fit the reply path, or the server
		 * blocks in its send while the client blocks in its own: deadlock. */
		fprintf(stderr, "rpal bench: --concurrency x --size must be at most %d bytes\n",
			RPC_MAX_INFLIGHT_BYTES);
		return -1;
	}
	if ((o->placements & (1u << PL_SPLIT)) && o->ncpu < 2) {
		fprintf(stderr, "rpal bench: placement split needs 2 CPUs; %d allowed here\n", o->ncpu);
		return -1;
	}
	return 0;
}

static void spec_cpus(struct run_spec *s)
{
	int cpu[2];

	pick_cpus(cpu);
	switch (s->placement) {
	case PL_SAME_CORE:
		s->cpu_server = s->cpu_client = cpu[0];
		break;
	case PL_SPLIT:
		s->cpu_server = cpu[1];
		s->cpu_client = cpu[0];
		break;
	default:
		s->cpu_server = s->cpu_client = -1;
	}
}

static void describe(const struct run_spec *s, char *buf, size_t n)
{
	const char *w = wait_name(s->wait);

	int l = snprintf(buf, n, "%s %s%s%s %s %zu B%s", transports[s->transport]->name,
			 placement_name[s->placement], w ? " wait=" : "", w ? w : "", suite_name[s->suite],
			 s->size, s->zerocopy ? " zero-copy" : "");

	if (s->suite == SU_RPC && l > 0 && (size_t)l < n) {
		if (s->rate > 0)
			snprintf(buf + l, n - l, " rate=%.0f", s->rate);
		else
			snprintf(buf + l, n - l, " rate=max");
	}
}

/* Run one case once; false (error filed) if it failed. */
static bool run_case(const struct bench_opts *o, struct run_spec *s, struct report *r, struct run_out *out)
{
	char what[160];

	spec_cpus(s);
	describe(s, what, sizeof(what));
	run_one(o, s, r->tsc_hz, out);
	if (!out->ok) {
		fprintf(stderr, "rpal bench: %s: %s\n", what, out->err);
		if (r->nerrs < sizeof(r->errs) / sizeof(r->errs[0]))
			snprintf(r->errs[r->nerrs++], sizeof(r->errs[0]), "%s: %s", what, out->err);
		return false;
	}
	if (out->res[0].skew)
		fprintf(stderr, "rpal bench: %s: %llu one-way samples < 0 (TSC skew between CPUs), "
			"clamped to 0\n", what, (unsigned long long)out->res[0].skew);
	if (o->verbose)
		fprintf(stderr, "  %-48s p50 %llu %s\n", what, (unsigned long long)out->res[0].st.p50,
			out->res[0].unit);
	return true;
}

/* The key a run is ranked by among its rounds. */
static double round_key(const struct result *x)
{
	return x->metric == M_THROUGHPUT || x->metric == M_CPU ? x->st.mean : (double)x->st.p50;
}

/* File a case's median run, per figure, among its n runs. */
static void file_case(struct run_out *runs, unsigned n, struct report *r, size_t *cap)
{
	if (r->nres + runs[0].nres > *cap) {
		*cap = *cap * 2 + 16;
		r->res = realloc(r->res, *cap * sizeof(*r->res));
		if (!r->res) {
			fprintf(stderr, "rpal bench: out of memory\n");
			exit(1);
		}
	}
	for (unsigned i = 0; i < runs[0].nres; i++) {
		double key[MAX_ROUNDS];
		struct result *x = &r->res[r->nres++];

		for (unsigned k = 0; k < n; k++)
			key[k] = round_key(&runs[k].res[i]);
		*x = runs[stats_median_index(key, n)].res[i];
		x->rounds = n;
		memcpy(x->round_key, key, n * sizeof(key[0]));
		if (x->metric == M_RPC) {
			const struct result *c;

			for (unsigned k = 0; k < n; k++)
				x->round_cpu[k] = runs[k].res[i].cpu_per_req_ns;
			/* Its CPU figures from its median run by CPU: a run whose
			 * p50 is the median may be the one a slow spell hit. */
			c = &runs[stats_median_index(x->round_cpu, n)].res[i];
			x->cpu_per_req_ns = c->cpu_per_req_ns;
			x->cpu_cores = c->cpu_cores;
			memcpy(x->cpu, c->cpu, sizeof(x->cpu));
		}
	}
}

/*
 * An rpc case at one offered rate.  count is the sample store: the
 * requests of the schedule, or for max (closed loop) room for a fast
 * transport's --seconds; a run that fills it ends early, and its rate is
 * still requests / the time they took.
 */
static void rpc_spec(const struct bench_opts *o, struct run_spec *s, double rate)
{
	double n = rate > 0 ? ceil(rate * o->seconds) : o->seconds * 5e6;

	s->size = o->size_set ? o->size : RPC_SIZE;
	s->rate = rate;
	s->seconds = o->seconds;
	s->concurrency = o->concurrency;
	s->work_ns = o->work_ns;
	s->count = n < 1000 && rate <= 0 ? 1000 : n > 3e7 ? 30000000 : (uint64_t)n;
	if (!s->count)
		s->count = 1;
}

/* Every case the options ask for, in report order. */
static struct run_spec *plan(const struct bench_opts *o, unsigned *n)
{
	struct run_spec *v = NULL;
	unsigned cap = 0;

	*n = 0;
	for (int pl = 0; pl < PL_NR; pl++) {
		if (!(o->placements & (1u << pl)))
			continue;
		for (int su = 0; su < SU_NR; su++) {
			if (!(o->suites & (1u << su)))
				continue;
			for (unsigned ti = 0; ti < nr_transports; ti++) {
				const struct transport *t = transports[ti];

				if (!(o->transports & (1u << ti)) || (t->unavailable && t->unavailable()) ||
				    (su == SU_RPC && t->no_rpc) || (su != SU_RPC && (t->flags & TF_RPC_ONLY)))
					continue;
				for (int w = WAIT_SLEEP; w < WAIT_NR; w++) {
					struct run_spec s = {
						.transport = (int)ti, .placement = pl, .suite = su,
						.wait = (t->flags & TF_WAIT) ? w : WAIT_NONE,
						.size = o->size, .count = o->count, .warmup = o->warmup,
						.batch = o->batch, .rate = o->rate,
						.spin_us = o->spin_us,
					};

					if ((t->flags & TF_WAIT) && !(o->waits & (1u << w)))
						continue;
					if (!(t->flags & TF_WAIT) && w != WAIT_SLEEP)
						continue;
					if (su == SU_CPU) {
						s.count = (uint64_t)(o->rate * o->seconds);
						if (!s.count)
							s.count = 1;
						s.warmup = o->warmup < 100 ? o->warmup : 100;
					}
					/* large: a case per size; rpc: per offered rate */
					unsigned nk = su == SU_LARGE ? 3u : su == SU_RPC ? o->nrates : 1u;

					for (unsigned k = 0; k < nk; k++)
						for (int zc = 0; zc < (su == SU_LARGE ? 2 : 1); zc++) {
							if (zc && !(t->flags & TF_ZEROCOPY))
								continue;
							if (su == SU_LARGE) {
								s.size = large_sizes[k];
								s.zerocopy = zc;
								s.count = large_count(o, s.size);
								s.warmup = 10;
							}
							if (su == SU_RPC)
								rpc_spec(o, &s, o->rates[k]);
							if (*n == cap) {
								cap = cap * 2 + 16;
								v = realloc(v, cap * sizeof(*v));
								if (!v) {
									fprintf(stderr, "rpal bench: out of memory\n");
									exit(1);
								}
							}
							v[(*n)++] = s;
						}
				}
			}
		}
	}
	return v;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_opts o;
	struct report r = { 0 };
	size_t cap = 0;
	int ret = 0;

	if (parse(argc, argv, &o))
		return 2;
	r.o = &o;
	r.invariant = tsc_invariant();
	r.hypervisor = tsc_hypervisor();
	if (!r.invariant)
		fprintf(stderr, "rpal bench: warning: CPUID reports no invariant TSC; cycle counts "
			"may drift with frequency changes\n");
	r.tsc_step = tsc_step();
	r.tsc_hz = tsc_calibrate(100);
	if (r.tsc_hz <= 0) {
		fprintf(stderr, "rpal bench: cannot calibrate the TSC against CLOCK_MONOTONIC\n");
		return 1;
	}

	/* Round by round over all cases, so that each case's runs spread
	 * over the whole bench, as every other case's do. */
	unsigned ncase, R = o.rounds;
	struct run_spec *cases = plan(&o, &ncase);
	struct run_out *runs = ncase ? calloc((size_t)ncase * R, sizeof(*runs)) : NULL;
	bool *failed = ncase ? calloc(ncase, sizeof(*failed)) : NULL;

	if (ncase && (!runs || !failed)) {
		fprintf(stderr, "rpal bench: out of memory\n");
		return 1;
	}
	for (unsigned k = 0; k < R; k++)
		for (unsigned i = 0; i < ncase; i++)
			if (!failed[i] && !run_case(&o, &cases[i], &r, &runs[(size_t)i * R + k]))
				failed[i] = true;    /* filed once; its other rounds are not run */
	for (unsigned i = 0; i < ncase; i++)
		if (!failed[i])
			file_case(&runs[(size_t)i * R], R, &r, &cap);
	free(runs);
	free(failed);
	free(cases);

	if (o.json_path) {
		FILE *f = strcmp(o.json_path, "-") ? fopen(o.json_path, "w") : stdout;

		if (!f) {
			fprintf(stderr, "rpal bench: cannot write %s: %s\n", o.json_path, strerror(errno));
			ret = 1;
		} else {
			if (report_json(&r, f) || (f != stdout && fclose(f))) {
				fprintf(stderr, "rpal bench: writing %s failed\n", o.json_path);
				ret = 1;
			}
		}
	}
	if (!o.json_path || strcmp(o.json_path, "-"))
		report_table(&r, stdout);
	if (o.plot_path && report_plot(&r, o.plot_path)) {
		fprintf(stderr, "rpal bench: cannot write %s: %s\n", o.plot_path, strerror(errno));
		ret = 1;
	}
	if (r.nerrs)
		ret = 1;
	free(r.res);
	return ret;
}
