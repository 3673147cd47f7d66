/* SPDX-License-Identifier: MIT */
/*
 * Description: runs `rpal bench --json` and checks the document.
 *   json.c RPAL shape: one kernel baseline (pipe), latency suite, 2000
 *     messages: the schema, field by field, and ordered percentiles.
 *   json.c RPAL smoke: every available transport, every suite, tiny counts,
 *     --plot too: exit 0, no errors, each transport has every metric (rpal
 *     with both waits; rpal-hosted also call_rtt and switch_pair),
 *     unavailable ones are listed with a reason.
 *   json.c RPAL rounds: --rounds 3 runs every case once per round, in the
 *     same order each round, shows each figure's median run, and compares
 *     rpal with futex round by round (by_round) from those runs; in the rpc
 *     suite also each run's CPU per request (by_round_cpu).
 *   json.c RPAL baselines: --rounds 2 over C and Go rows: each row's
 *     round-by-round note sits under a heading naming its own baseline.
 *   json.c RPAL rpc: the rpc suite at 2000/s and max over three transports
 *     (rpal-connected asleep) and again at concurrency 4, then the Go and
 *     the gRPC and Kitex transports at concurrency 2: a result per
 *     transport x wait x rate with every rpc field, the low rate achieved
 *     within 20 %, ordered percentiles, CPU > 0; rpal-hosted among them
 *     where the build can host; the table has the rpc block.  The C loops'
 *     share of requests sent and received on one CPU: none split, all
 *     with both on one CPU (a run of its own), none recorded by the others.
 * It checks shape and logic only: never how fast anything was.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "minijson.h"
#include "runcmd.h"
#include "check.h"



static int is(const struct jval *v, enum jtype t)
{
	return v && v->t == t;
}

static const char *str(const struct jval *o, const char *k)
{
	const struct jval *v = json_get(o, k);

	return is(v, J_STR) ? v->str : NULL;
}

static int in(const char *s, const char *const *set)
{
	for (; s && *set; set++)
		if (!strcmp(s, *set))
			return 1;
	return 0;
}

/* The schema for one result.  tick_ns: how long the counter's
 * step lasts; where it is longer than a cache line's hand-off between
 * cores (AArch64's generic timer ticks at tens of MHz), a median of 0
 * steps is a fast transport's, not an error. */
static void check_result(const struct jval *r, size_t i, double tick_ns)
{
	static const char *const pl[] = { "same-core", "split", "unpinned", NULL };
	static const char *const metric[] = { "oneway", "rtt", "throughput", "cpu_per_msg", "call_rtt",
					      "switch_pair", "rpc", NULL };
	static const char *const wait[] = { "spin", "sleep", "adaptive", NULL };
	static const char *const num[] = { "count", "mean", "p50", "p99", "p999", "max", NULL };
	const struct jval *w = json_get(r, "wait");
	const char *m = str(r, "metric");

	CHECK(is(r, J_OBJ), "results[%zu] is not an object", i);
	CHECK(str(r, "transport"), "results[%zu].transport is not a string", i);
	CHECK(in(str(r, "placement"), pl), "results[%zu].placement is not one of the three", i);
	CHECK(is(w, J_NULL) || (is(w, J_STR) && in(w->str, wait)),
	      "results[%zu].wait is not spin, sleep, adaptive or null", i);
	CHECK(in(m, metric), "results[%zu].metric is not oneway/rtt/throughput/cpu_per_msg/call_rtt/"
	      "switch_pair/rpc", i);
	CHECK(str(r, "unit"), "results[%zu].unit is not a string", i);
	for (int k = 0; num[k]; k++)
		CHECK(is(json_get(r, num[k]), J_NUM), "results[%zu].%s is not a number", i, num[k]);
	if (m && strcmp(m, "throughput") && strcmp(m, "cpu_per_msg")) {
		double p50 = json_get(r, "p50")->num, p99 = json_get(r, "p99")->num,
		       p999 = json_get(r, "p999")->num, max = json_get(r, "max")->num;

		CHECK(!strcmp(str(r, "unit") ? str(r, "unit") : "", "cycles"),
		      "results[%zu]: latency unit is not cycles", i);
		CHECK((p50 > 0 || (p50 == 0 && tick_ns > 10)) && p50 <= p99 && p99 <= p999 && p999 <= max,
		      "results[%zu]: percentiles out of order: %g %g %g %g", i, p50, p99, p999, max);
		CHECK(is(json_get(r, "p50_ns"), J_NUM), "results[%zu]: no p50_ns twin", i);
	}
}

static struct jval *check_doc(const char *text)
{
	char err[200];
	struct jval *d = json_parse(text, err, sizeof(err));
	const struct jval *mach, *res;

	if (!d) {
		printf("FAIL: output is not JSON: %s\n", err);
		fails++;
		return NULL;
	}
	mach = json_get(d, "machine");
	res = json_get(d, "results");
	CHECK(is(json_get(d, "tsc_hz"), J_NUM) && json_get(d, "tsc_hz")->num > 1e6,
	      "tsc_hz is not a plausible number");
	CHECK(is(mach, J_OBJ), "machine is not an object");
	CHECK(str(mach, "cpu") && str(mach, "kernel") && is(json_get(mach, "nproc"), J_NUM),
	      "machine lacks cpu, kernel or nproc");
	CHECK(is(json_get(mach, "tsc_step_cycles"), J_NUM) && json_get(mach, "tsc_step_cycles")->num >= 1,
	      "machine lacks tsc_step_cycles >= 1");
	CHECK(is(res, J_ARR) && res->n > 0, "results is not a non-empty array");
	if (is(res, J_ARR) && is(json_get(d, "tsc_hz"), J_NUM) && is(json_get(mach, "tsc_step_cycles"), J_NUM)) {
		double tick_ns = json_get(mach, "tsc_step_cycles")->num * 1e9 / json_get(d, "tsc_hz")->num;

		for (size_t i = 0; i < res->n; i++)
			check_result(res->items[i], i, tick_ns);
	}
	return d;
}

/* Does results hold (transport, wait, metric)? */
static int has(const struct jval *d, const char *t, const char *w, const char *m)
{
	const struct jval *res = json_get(d, "results");

	for (size_t i = 0; res && i < res->n; i++) {
		const struct jval *r = res->items[i], *wv = json_get(r, "wait");

		if (!strcmp(str(r, "transport") ? str(r, "transport") : "", t) &&
		    !strcmp(str(r, "metric") ? str(r, "metric") : "", m) &&
		    (w ? is(wv, J_STR) && !strcmp(wv->str, w) : is(wv, J_NULL)))
			return 1;
	}
	return 0;
}

static int shape(char *rpal)
{
	char *argv[] = { rpal, "bench", "--transport", "pipe", "--count", "2000", "--suite", "latency",
			 "--json", "--no-progress", NULL };
	struct out o;
	struct jval *d;

	printf("json: %s bench --transport pipe --count 2000 --suite latency --json\n", rpal);
	if (runcmd(argv, &o)) {
		printf("FAIL: cannot run %s\n", rpal);
		return 1;
	}
	CHECK(o.status == 0, "exit status %d; stderr:\n%s", o.status, o.buf[1]);
	d = check_doc(o.buf[0]);
	if (d) {
		const struct jval *res = json_get(d, "results");

		CHECK(has(d, "pipe", NULL, "oneway") && has(d, "pipe", NULL, "rtt"),
		      "pipe oneway and rtt results missing");
		for (size_t i = 0; res && i < res->n; i++)
			CHECK(json_get(res->items[i], "count")->num == 2000,
			      "results[%zu].count is not 2000", i);
	}
	json_free(d);
	out_free(&o);
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}

/*
 * An rpal row's comparison by (by_round: p50; by_round_cpu: an rpc row's
 * CPU per request) agrees with the per-round figures, keys, of it (k: its
 * own) and of futex's row of the same metric; futex's row has none.
 */
static void futex_rounds(const struct jval *res, const struct jval *r, size_t i, const double *k,
			 const char *by, const char *keys)
{
	const struct jval *v = json_get(r, by), *f = NULL;
	double ratio[3], lo, hi, med;
	int lower = 0, higher = 0;

	if (strcmp(str(r, "transport") ? str(r, "transport") : "", "rpal-connected")) {
		CHECK(!v, "results[%zu] (not rpal) has %s", i, by);
		return;
	}
	for (size_t j = 0; j < res->n; j++)
		if (!strcmp(str(res->items[j], "transport"), "futex") &&
		    !strcmp(str(res->items[j], "metric"), str(r, "metric")))
			f = json_get(res->items[j], keys);
	if (!is(v, J_OBJ) || !is(f, J_ARR) || f->n != 3) {
		CHECK(0, "results[%zu] lacks %s, or futex its %s", i, by, keys);
		return;
	}
	CHECK(str(v, "baseline") && !strcmp(str(v, "baseline"), "futex"), "results[%zu]: %s.baseline is "
	      "not futex", i, by);
	for (int j = 0; j < 3; j++) {
		ratio[j] = k[j] / f->items[j]->num;
		lower += k[j] < f->items[j]->num;
		higher += k[j] > f->items[j]->num;
	}
	lo = ratio[0] < ratio[1] ? ratio[0] : ratio[1];
	hi = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
	med = ratio[2] < lo ? lo : ratio[2] > hi ? hi : ratio[2];
	CHECK(json_get(v, "rounds")->num == 3 && json_get(v, "lower")->num == lower &&
	      json_get(v, "higher")->num == higher, "results[%zu]: %s counts %g lower %g higher, "
	      "want %d, %d", i, by, json_get(v, "lower")->num, json_get(v, "higher")->num, lower, higher);
	CHECK(fabs(json_get(v, "median")->num - med) < 1e-5, "results[%zu]: %s median %g, want %g",
	      i, by, json_get(v, "median")->num, med);
	CHECK(json_get(v, "sign_p")->num > 0 && json_get(v, "sign_p")->num <= 1, "results[%zu]: sign_p %g", i,
	      json_get(v, "sign_p")->num);
}

/* Print the command argv, run it, and check that it exits 0; 1 if it
 * cannot be run at all. */
static int run_bench(char **argv, struct out *o)
{
	printf("json:");
	for (char **a = argv; *a; a++)
		printf(" %s", *a);
	putchar('\n');
	if (runcmd(argv, o)) {
		printf("FAIL: cannot run %s\n", argv[0]);
		return 1;
	}
	CHECK(o->status == 0, "exit status %d; stderr:\n%s", o->status, o->buf[1]);
	return 0;
}

static double median3(const double *v)
{
	return fmax(fmin(v[0], v[1]), fmin(fmax(v[0], v[1]), v[2]));
}

/* The rpc suite with --rounds 3: each row's CPU per request is the median
 * of its three runs', all three are listed, and rpal's is compared with
 * futex's round by round. */
static int rpc_rounds(char *rpal)
{
	char *argv[] = { rpal, "bench", "--transport", "futex,rpal-connected", "--wait", "sleep", "--suite", "rpc",
			 "--rates", "2000", "--seconds", "0.2", "--rounds", "3", "--json", "--no-progress", NULL };
	struct out o;
	struct jval *d;

	if (run_bench(argv, &o))
		return 1;
	d = check_doc(o.buf[0]);
	if (d) {
		const struct jval *res = json_get(d, "results");

		CHECK(res && res->n == 2, "%zu results, want 2 (futex, rpal-connected)", res ? res->n : 0);
		for (size_t i = 0; res && i < res->n; i++) {
			const struct jval *r = res->items[i];
			const struct jval *p50s = json_get(r, "round_p50s"), *cpus = json_get(r, "round_cpu_per_req_ns");
			double k[3], p[3], mid;

			if (!is(p50s, J_ARR) || p50s->n != 3 || !is(cpus, J_ARR) || cpus->n != 3) {
				CHECK(0, "rpc results[%zu] lacks its three runs' p50s or CPU per request", i);
				continue;
			}
			for (int j = 0; j < 3; j++) {
				k[j] = cpus->items[j]->num;
				p[j] = p50s->items[j]->num;
				CHECK(k[j] > 0, "rpc results[%zu]: round %d's CPU per request is %g", i, j, k[j]);
			}
			mid = median3(p);
			CHECK(json_get(r, "p50")->num == mid, "rpc results[%zu]: p50 %g is not the median of %g, %g, %g",
			      i, json_get(r, "p50")->num, p[0], p[1], p[2]);
			mid = median3(k);
			CHECK(json_get(r, "cpu_per_req_ns")->num == mid,
			      "rpc results[%zu]: CPU per request %g is not the median of %g, %g, %g", i,
			      json_get(r, "cpu_per_req_ns")->num, k[0], k[1], k[2]);
			futex_rounds(res, r, i, k, "by_round_cpu", "round_cpu_per_req_ns");
		}
	}
	json_free(d);
	out_free(&o);
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}

/* --rounds 3: each case run three times, one round after another, and
 * each figure the median run's, with all three runs' keys listed. */
static int rounds(char *rpal)
{
	char *argv[] = { rpal, "bench", "--transport", "futex,rpal-connected", "--wait", "sleep", "--count", "500",
			 "--suite", "latency,throughput", "--rounds", "3", "--json", "--no-progress", "--verbose", NULL };
	char line[4][160];
	struct out o;
	struct jval *d;

	if (run_bench(argv, &o))
		return 1;
	/* --verbose: a line per run, in run order: four cases, three times.
	 * Only lines with a p50 are runs: others are warnings (no invariant
	 * TSC, TSC skew) that a machine may add. */
	{
		const char *p = o.buf[1];
		int n = 0;

		for (; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
			const char *e = strchr(p, '\n');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			const char *cut = strstr(p, " p50 ");
			if (!cut || (size_t)(cut - p) >= len)
				continue;
			len = (size_t)(cut - p);
			if (n < 4)
				snprintf(line[n], sizeof(line[n]), "%.*s", (int)len, p);
			else
				CHECK(len == strlen(line[n % 4]) && !strncmp(p, line[n % 4], len),
				      "run %d is not round %d's run of case %d: %.*s", n, n / 4 + 1, n % 4 + 1,
				      (int)len, p);
			n++;
		}
		CHECK(n == 12, "%d runs, want 4 cases x 3 rounds", n);
	}
	d = check_doc(o.buf[0]);
	if (d) {
		const struct jval *res = json_get(d, "results"), *opt = json_get(d, "options");

		CHECK(is(json_get(opt, "rounds"), J_NUM) && json_get(opt, "rounds")->num == 3,
		      "options.rounds is not 3");
		CHECK(res && res->n == 6, "%zu results, want 6 (2 transports x oneway, rtt, throughput)",
		      res ? res->n : 0);
		for (size_t i = 0; res && i < res->n; i++) {
			const struct jval *r = res->items[i];
			int tp = !strcmp(str(r, "metric") ? str(r, "metric") : "", "throughput");
			const struct jval *keys = json_get(r, tp ? "round_means" : "round_p50s");
			double k[3], shown = json_get(r, tp ? "mean" : "p50")->num;

			CHECK(is(json_get(r, "rounds"), J_NUM) && json_get(r, "rounds")->num == 3,
			      "results[%zu].rounds is not 3", i);
			CHECK(tp || json_get(r, "count")->num == 500, "results[%zu].count is not one run's 500", i);
			if (!is(keys, J_ARR) || keys->n != 3) {
				CHECK(0, "results[%zu] lacks its three runs' %s", i, tp ? "means" : "p50s");
				continue;
			}
			for (int j = 0; j < 3; j++)
				k[j] = keys->items[j]->num;
			/* The median of three: neither below both others nor above both. */
			double lo = k[0] < k[1] ? k[0] : k[1], hi = k[0] < k[1] ? k[1] : k[0];
			double med = k[2] < lo ? lo : k[2] > hi ? hi : k[2];
			CHECK(shown == med, "results[%zu] shows %g, not the median of %g %g %g", i, shown, k[0],
			      k[1], k[2]);
			if (!tp)
				futex_rounds(res, r, i, k, "by_round", "round_p50s");
		}
	}
	json_free(d);
	out_free(&o);
	return rpc_rounds(rpal);
}

/* The whole of a file, NUL-terminated; NULL if it cannot be read. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	long len;

	if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET)) {
		text = calloc(1, (size_t)len + 1);
		if (text && fread(text, 1, (size_t)len, f) != (size_t)len)
			text[0] = 0;
	}
	if (f)
		fclose(f);
	return text;
}

static int smoke(char *rpal)
{
	char json[] = "/tmp/rpal-bench-smoke-XXXXXX", svg[64];
	char *list[] = { rpal, "bench", "--list", NULL };
	char *argv[] = { rpal, "bench", "--transport", "all", "--suite", "all", "--count", "2000",
			 "--large-count", "20", "--rate", "1000", "--seconds", "0.2", "--batch", "16",
			 "--timeout", "120", "--no-progress", NULL, NULL, NULL, NULL };
	static const char *const metrics[] = { "oneway", "rtt", "throughput", "cpu_per_msg" };
	char jarg[80], *text = NULL, *line, *save;
	struct out o, l;
	struct jval *d = NULL;
	FILE *f;
	int fd = mkstemp(json);

	if (fd < 0) {
		printf("FAIL: mkstemp\n");
		return 1;
	}
	close(fd);
	snprintf(svg, sizeof(svg), "%s.svg", json);
	snprintf(jarg, sizeof(jarg), "--json=%s", json);
	argv[19] = jarg;
	argv[20] = "--plot";
	argv[21] = svg;
	printf("json: %s bench --transport all --suite all --count 2000 ... --json=FILE --plot FILE.svg\n",
	       rpal);
	if (runcmd(list, &l) || runcmd(argv, &o)) {
		printf("FAIL: cannot run %s\n", rpal);
		return 1;
	}
	CHECK(o.status == 0, "exit status %d; stderr:\n%s", o.status, o.buf[1]);
	CHECK(strstr(o.buf[0], "one-way latency"), "no table on stdout");
	text = slurp(json);
	CHECK(text && text[0], "no JSON written to %s", json);
	if (text)
		d = check_doc(text);
	if (d) {
		const struct jval *errs = json_get(d, "errors"), *un = json_get(d, "unavailable");

		CHECK(is(errs, J_ARR) && errs->n == 0, "the bench reports failed runs");
		for (size_t i = 0; is(errs, J_ARR) && i < errs->n; i++)
			printf("  error: %s\n", errs->items[i]->str ? errs->items[i]->str : "?");
		/* --list: "name  what" lines, then "  not available: why" under unavailable ones. */
		for (line = strtok_r(l.buf[0], "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char name[64];
			int rpal_t, rpc_only, avail = 1;

			if (line[0] == ' ' || sscanf(line, "%63s", name) != 1)
				continue;
			if (save && strncmp(save + strspn(save, " "), "not available", 13) == 0)
				avail = 0;
			if (!avail) {
				int found = 0;

				for (size_t i = 0; is(un, J_ARR) && i < un->n; i++)
					found |= str(un->items[i], "transport") &&
						 !strcmp(str(un->items[i], "transport"), name) &&
						 str(un->items[i], "reason");
				CHECK(found, "%s is not available but not listed with a reason", name);
				printf("json: %s: not available (listed)\n", name);
				continue;
			}
			/* rpal-hosted parks instead of spinning or sleeping: no --wait. */
			rpal_t = (!strncmp(name, "rpal", 4) && strcmp(name, "rpal-hosted")) ||
				 (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, "-rpal"));
			/* The RPC frameworks' rows have the rpc suite only (the
			 * rpc test runs them); "all" suites are the others. */
			rpc_only = strstr(line + strlen(name), "(rpc suite only)") != NULL;
			if (rpc_only) {
				for (int m = 0; m < 4; m++)
					CHECK(!has(d, name, NULL, metrics[m]) && !has(d, name, "sleep", metrics[m]),
					      "%s: rpc suite only, but has %s", name, metrics[m]);
				printf("json: %s: rpc suite only, no results here\n", name);
				continue;
			}
			for (int m = 0; m < 4; m++) {
				if (rpal_t) {
					CHECK(has(d, name, "spin", metrics[m]), "%s spin: no %s", name, metrics[m]);
					CHECK(has(d, name, "sleep", metrics[m]), "%s sleep: no %s", name, metrics[m]);
					CHECK(has(d, name, "adaptive", metrics[m]), "%s adaptive: no %s", name, metrics[m]);
				} else {
					CHECK(has(d, name, NULL, metrics[m]), "%s: no %s", name, metrics[m]);
				}
			}

			if (!strcmp(name, "rpal-hosted")) {
				CHECK(has(d, name, NULL, "call_rtt"), "%s: no call_rtt", name);
				CHECK(has(d, name, NULL, "switch_pair"), "%s: no switch_pair", name);
			}
			printf("json: %s: checked oneway, rtt, throughput, cpu_per_msg%s\n", name,
			       strcmp(name, "rpal-hosted") ? "" : ", call_rtt, switch_pair");
		}
	}
	f = fopen(svg, "r");
	CHECK(f, "no SVG written");
	if (f) {
		char head[8] = { 0 };

		CHECK(fread(head, 1, 4, f) == 4 && !strncmp(head, "<svg", 4), "SVG does not start with <svg");
		fclose(f);
	}
	unlink(json);
	unlink(svg);
	json_free(d);
	free(text);
	out_free(&o);
	out_free(&l);
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}


static double num(const struct jval *o, const char *k)
{
	const struct jval *v = json_get(o, k);

	return is(v, J_NUM) ? v->num : NAN;
}

/*
 * Where the C loops of two processes ran the rpc suite, the share of
 * requests sent and received on one CPU: all of them on one CPU, none
 * split, any share unpinned.  The Go programs and rpal-hosted (its server
 * runs on the client's thread) record none.
 */
static void check_same_cpu(const struct jval *r, size_t i)
{
	const char *t = str(r, "transport"), *pl = str(r, "placement");
	const struct jval *v = json_get(r, "same_cpu_share");
	int c_loops = t && strcmp(t, "rpal-hosted") && strcmp(t, "go-uds") && strcmp(t, "rpal-go") &&
		      strncmp(t, "grpc-", 5) && strncmp(t, "kitex-", 6);

	if (!c_loops) {
		CHECK(!v, "rpc results[%zu] (%s) has a same_cpu_share", i, t ? t : "?");
		return;
	}
	CHECK(is(v, J_NUM), "rpc results[%zu] (%s) has no same_cpu_share", i, t);
	if (!is(v, J_NUM) || !pl)
		return;
	if (!strcmp(pl, "same-core"))
		CHECK(v->num == 1, "rpc results[%zu] (%s): same_cpu_share %g on one CPU", i, t, v->num);
	else if (!strcmp(pl, "split"))
		CHECK(v->num == 0, "rpc results[%zu] (%s): same_cpu_share %g split", i, t, v->num);
	else
		CHECK(v->num >= 0 && v->num <= 1, "rpc results[%zu] (%s): same_cpu_share %g", i, t, v->num);
}

/* One rpc result: every field there, and sane for a run of rate (0: max). */
static void check_rpc(const struct jval *r, size_t i, double seconds, unsigned conc)
{
	static const char *const fields[] = { "rate", "achieved_rate", "size", "concurrency", "count",
					      "p50_ns", "p99_ns", "p999_ns", "cpu_per_req_ns", "cpu_cores",
					      "rounds", NULL };
	double rate = num(r, "rate"), got = num(r, "achieved_rate"), n = num(r, "count");

	for (int k = 0; fields[k]; k++)
		CHECK(is(json_get(r, fields[k]), J_NUM), "rpc results[%zu].%s is not a number", i, fields[k]);
	CHECK(str(r, "suite") && !strcmp(str(r, "suite"), "rpc"), "rpc results[%zu].suite is not rpc", i);
	CHECK(str(r, "metric") && !strcmp(str(r, "metric"), "rpc"), "rpc results[%zu].metric is not rpc", i);
	CHECK(num(r, "size") == 1024, "rpc results[%zu].size is not the suite's default 1024", i);
	CHECK(num(r, "concurrency") == conc, "rpc results[%zu].concurrency is not %u", i, conc);
	CHECK(n > 0, "rpc results[%zu].count is not > 0", i);
	CHECK(num(r, "p50_ns") > 0 && num(r, "p50_ns") <= num(r, "p99_ns") &&
	      num(r, "p99_ns") <= num(r, "p999_ns"), "rpc results[%zu]: p50_ns %g p99_ns %g p999_ns %g out of "
	      "order", i, num(r, "p50_ns"), num(r, "p99_ns"), num(r, "p999_ns"));
	CHECK(num(r, "cpu_per_req_ns") > 0 && num(r, "cpu_cores") > 0, "rpc results[%zu]: cpu_per_req_ns %g, "
	      "cpu_cores %g, not > 0", i, num(r, "cpu_per_req_ns"), num(r, "cpu_cores"));
	CHECK(is(json_get(r, "round_p50s"), J_ARR) && json_get(r, "round_p50s")->n == 1,
	      "rpc results[%zu] lacks round_p50s of its one run", i);
	check_same_cpu(r, i);
	if (rate > 0) {
		/* Open loop: every scheduled request is answered or counted as never sent (a client
		 * that fell twice the run's length behind), and none goes ahead of the schedule. A
		 * busy machine (tests run side by side on two CPUs) can fall a quarter behind at this
		 * rate, so only a pacing off by a factor fails the lower bound; one so overloaded
		 * that it left requests unsent says so, and is held to the upper bound alone. */
		double unsent = num(r, "unsent");

		CHECK(is(json_get(r, "unsent"), J_NUM) && n + unsent == ceil(rate * seconds),
		      "rpc results[%zu]: count %g and unsent %g, want rate x seconds = %g in all", i, n, unsent,
		      ceil(rate * seconds));
		CHECK(got <= rate * 1.2 && (unsent > 0 || got >= rate * 0.5),
		      "rpc results[%zu]: achieved %g/s, offered %g/s, %g unsent", i, got, rate, unsent);
	} else {
		CHECK(rate == 0 && got > 0, "rpc results[%zu]: max is rate %g, achieved %g", i, rate, got);
	}
}

/* Results of (transport, wait, rate) in d. */
static int count_rpc(const struct jval *d, const char *t, const char *w, double rate)
{
	const struct jval *res = json_get(d, "results");
	int n = 0;

	for (size_t i = 0; is(res, J_ARR) && i < res->n; i++) {
		const struct jval *r = res->items[i], *wv = json_get(r, "wait");

		n += str(r, "transport") && !strcmp(str(r, "transport"), t) && num(r, "rate") == rate &&
		     (w ? is(wv, J_STR) && !strcmp(wv->str, w) : is(wv, J_NULL));
	}
	return n;
}

/* Run one rpc sweep (JSON to a file, the table to stdout) and check both. */
static void rpc_run(char *rpal, char *transports, char *conc, char *placement, int want_table)
{
	char json[] = "/tmp/rpal-bench-rpc-XXXXXX", jarg[80], svg[80], rpc_svg[90], *text = NULL;
	char *argv[] = { rpal, "bench", "--suite", "rpc", "--rates", "2000,max", "--seconds", "0.2",
			 "--transport", transports, "--wait", "sleep", "--concurrency", conc, "--no-progress",
			 jarg, "--plot", svg, placement ? "--placement" : NULL, placement, NULL };
	static const char *const tr[] = { "uds-epoll", "futex", "rpal-connected", "go-uds", "rpal-go", "rpal-hosted",
					  "grpc-uds", "grpc-rpal", "kitex-uds", "kitex-rpal" };
	struct out o;
	struct jval *d = NULL;
	int fd = mkstemp(json);

	if (fd < 0) {
		CHECK(0, "mkstemp");
		return;
	}
	close(fd);
	snprintf(jarg, sizeof(jarg), "--json=%s", json);
	snprintf(svg, sizeof(svg), "%s.svg", json);
	snprintf(rpc_svg, sizeof(rpc_svg), "%s-rpc.svg", json);
	printf("json: %s bench --suite rpc --rates 2000,max --seconds 0.2 --transport %s --wait sleep "
	       "--concurrency %s --json=FILE --plot FILE.svg%s%s\n", rpal, transports, conc,
	       placement ? " --placement " : "", placement ? placement : "");
	if (runcmd(argv, &o)) {
		CHECK(0, "cannot run %s", rpal);
		unlink(json);
		return;
	}
	CHECK(o.status == 0, "exit status %d; stderr:\n%s", o.status, o.buf[1]);
	CHECK(strstr(o.buf[0], "rpc: request and reply of 1024 B"), "no rpc block in the table:\n%s", o.buf[0]);
	text = slurp(json);
	CHECK(text && text[0], "no JSON written to %s", json);
	if (text)
		d = check_doc(text);
	if (d) {
		const struct jval *res = json_get(d, "results"), *errs = json_get(d, "errors");
		const struct jval *un = json_get(d, "unavailable");
		unsigned nt = 0;

		CHECK(is(errs, J_ARR) && errs->n == 0, "the bench reports failed runs");
		for (size_t i = 0; is(res, J_ARR) && i < res->n; i++)
			check_rpc(res->items[i], i, 0.2, (unsigned)atoi(conc));
		for (size_t t = 0; t < sizeof(tr) / sizeof(tr[0]); t++) {
			const char *w = strcmp(tr[t], "rpal-connected") && strcmp(tr[t], "rpal-go") &&
					strcmp(tr[t], "grpc-rpal") && strcmp(tr[t], "kitex-rpal") ? NULL : "sleep";
			int avail = 1;

			if (!strstr(transports, tr[t]))
				continue;
			/* The Go transports need rpal-bench-go, built where Go is;
			 * rpal-hosted a build without sanitizers. */
			for (size_t i = 0; is(un, J_ARR) && i < un->n; i++)
				avail &= !(str(un->items[i], "transport") &&
					   !strcmp(str(un->items[i], "transport"), tr[t]));
			if (!avail) {
				printf("json: %s: not available here (listed)\n", tr[t]);
				continue;
			}
			nt++;
			CHECK(count_rpc(d, tr[t], w, 2000) == 1 && count_rpc(d, tr[t], w, 0) == 1,
			      "%s: not one result at 2000/s and one at max", tr[t]);
		}
		CHECK(is(res, J_ARR) && res->n == 2 * nt, "%zu results, want %u (transports x 2 rates)",
		      is(res, J_ARR) ? res->n : 0, 2 * nt);
		/* FILE-rpc.svg: a line per transport in each of its two panels,
		 * through both rates. */
		char *plot = nt ? slurp(rpc_svg) : NULL;
		unsigned lines = 0, points = 0;

		CHECK(!nt || (plot && strstr(plot, "<svg") && strstr(plot, "</svg>")), "no SVG in %s", rpc_svg);
		for (const char *p = plot; p && (p = strstr(p, "<polyline")); p++) {
			const char *q = strstr(p, "points='");

			lines++;
			for (q = q ? q + 8 : p; q && *q && *q != '\''; q++)
				points += *q == ',';
		}
		CHECK(lines == 2 * nt && points == 4 * nt, "%s: %u lines of %u points in all, want %u of 2",
		      rpc_svg, lines, points, 2 * nt);
		printf("json: %s: %u lines (latency, CPU) through 2 rates each\n", rpc_svg, lines);
		free(plot);
	}
	unlink(json);
	unlink(svg);
	unlink(rpc_svg);
	json_free(d);
	free(text);
	out_free(&o);
}

/* Is rpal-bench-go where rpal bench looks for it (RPAL_BENCH_GO, else
 * beside rpal)? */
static bool have_bench_go(const char *rpal)
{
	const char *env = getenv("RPAL_BENCH_GO"), *slash = strrchr(rpal, '/');
	char path[4096];

	if (env && *env)
		return !access(env, X_OK);
	snprintf(path, sizeof(path), "%.*srpal-bench-go", slash ? (int)(slash - rpal + 1) : 0, rpal);
	return !access(path, X_OK);
}

static int rpc(char *rpal)
{
	rpc_run(rpal, "uds-epoll,futex,rpal-connected,rpal-hosted", "1", NULL, 1);
	rpc_run(rpal, "uds-epoll,futex", "4", NULL, 0);
	/* Both on one CPU: every request sent and received there. */
	rpc_run(rpal, "futex,rpal-connected", "1", "same-core", 0);
	if (have_bench_go(rpal)) {
		rpc_run(rpal, "go-uds,rpal-go", "2", NULL, 0);
		rpc_run(rpal, "grpc-uds,grpc-rpal,kitex-uds,kitex-rpal", "2", NULL, 0);
	} else {
		printf("json: the Go rows left out: no rpal-bench-go beside %s (a build without Go)\n", rpal);
	}
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}

/* The table's round-by-round notes: each row under a heading that names
 * the baseline it was compared with (rpal-go with go-uds, the C rows with
 * futex).  Without Go only the C rows are there to check. */
static int baselines(char *rpal)
{
	bool go = have_bench_go(rpal);
	char *argv[] = { rpal, "bench", "--transport", go ? "futex,rpal-connected,go-uds,rpal-go" : "futex,rpal-connected",
			 "--wait", "sleep", "--count", "300", "--suite", "latency", "--rounds", "2", "--no-progress",
			 NULL };
	const char *base = NULL;
	int rows[2] = { 0, 0 };
	struct out o;

	if (run_bench(argv, &o))
		return 1;
	for (char *line = o.buf[0], *end; line; line = end ? end + 1 : NULL) {
		const char *h;
		char name[32];

		end = strchr(line, '\n');
		if (end)
			*end = 0;
		h = strstr(line, "over the same round's ");
		if (h) {
			base = strstr(h, "futex") == h + 22 ? "futex" : strstr(h, "go-uds") == h + 22 ? "go-uds" : "?";
			continue;
		}
		if (strncmp(line, "    ", 4) || !strstr(line, " median ") || sscanf(line, " %31s", name) != 1)
			continue;
		bool is_go = !strcmp(name, "rpal-go");
		rows[is_go]++;
		CHECK(base && !strcmp(base, is_go ? "go-uds" : "futex"), "%s compared under the heading of %s: %s",
		      name, base ? base : "none", line);
	}
	CHECK(rows[0] == 2, "%d rpal-connected notes, want 2 (one-way and round trip)", rows[0]);
	CHECK(rows[1] == (go ? 2 : 0), "%d rpal-go notes, want %d", rows[1], go ? 2 : 0);
	if (!go)
		printf("json: rpal-go left out: no rpal-bench-go beside %s (a build without Go)\n", rpal);
	out_free(&o);
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 3 || access(argv[1], X_OK)) {
		printf("usage: %s PATH/TO/rpal shape|smoke|rounds|rpc|baselines\n", argv[0]);
		return 1;
	}
	if (!strcmp(argv[2], "shape"))
		return shape(argv[1]);
	if (!strcmp(argv[2], "smoke"))
		return smoke(argv[1]);
	if (!strcmp(argv[2], "rounds"))
		return rounds(argv[1]);
	if (!strcmp(argv[2], "rpc"))
		return rpc(argv[1]);
	if (!strcmp(argv[2], "baselines"))
		return baselines(argv[1]);
	printf("unknown mode %s\n", argv[2]);
	return 1;
}
