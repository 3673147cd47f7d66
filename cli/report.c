/* SPDX-License-Identifier: MIT */
/* report.c - the human table and the JSON document. */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/utsname.h>
#include "bench.h"

static void cpu_model(char *buf, size_t n)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, n, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !p)
			continue;
		p += 1 + (p[1] == ' ');
		p[strcspn(p, "\n")] = 0;
		snprintf(buf, n, "%s", p);
		break;
	}
	fclose(f);
}

static double ns(const struct report *r, double cycles)
{
	return cycles * 1e9 / r->tsc_hz;
}

/* ns with a precision that suits its size: 61.2, 4938, 1.23e+06 stays readable. */
static const char *fmt_ns(char *buf, double v)
{
	if (v < 100)
		sprintf(buf, "%.1f", v);
	else
		sprintf(buf, "%.0f", v);
	return buf;
}

/* The result of transport name for x's case (one-copy). */
static const struct result *same_case(const struct report *r, const struct result *x, const char *name)
{
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *b = &r->res[i];

		if (!strcmp(transports[b->transport]->name, name) &&
		    b->placement == x->placement && b->suite == x->suite && b->metric == x->metric &&
		    b->size == x->size && !b->zerocopy && b->rate == x->rate)
			return b;
	}
	return NULL;
}

/* Speed-up against uds-epoll: > 1 is better, whatever the metric. */
static void ratio(const struct report *r, const struct result *x, char *buf)
{
	const struct result *b = same_case(r, x, "uds-epoll");
	double v;

	strcpy(buf, "-");
	if (!b)
		return;
	if (x->metric == M_THROUGHPUT)
		v = b->st.mean > 0 ? x->st.mean / b->st.mean : 0;
	else if (x->metric == M_CPU)
		v = x->st.mean > 0 ? b->st.mean / x->st.mean : 0;
	else
		v = x->st.p50 ? (double)b->st.p50 / (double)x->st.p50 : 0;
	if (v > 0)
		sprintf(buf, v < 10 ? "%.2fx" : "%.1fx", v);
}

/*
 * An rpal row over its target's baseline, round by round: futex for latency
 * (the kernel's cheapest sleep and wake-up, the bar for an rpal consumer
 * asleep; rpc: its p50 at the same offered rate), uds-epoll for CPU per
 * message; a transport that names its own baseline (rpal-go: go-uds, the
 * frameworks over rpal: the same over a Unix socket) against that.  cpu:
 * an rpc row's CPU per request instead of its p50.  Returns the baseline's
 * name, or NULL without rounds or a baseline row to compare with.
 */
static const char *by_round(const struct report *r, const struct result *x, struct paired *p, bool cpu)
{
	const struct transport *t = transports[x->transport];
	const char *base = t->baseline ? t->baseline : x->metric == M_CPU ? "uds-epoll" : "futex";
	const struct result *b;

	if (x->rounds < 2 || (x->suite != SU_LATENCY && x->suite != SU_CPU && x->suite != SU_RPC) ||
	    (x->metric != M_ONEWAY && x->metric != M_RTT && x->metric != M_CPU && x->metric != M_RPC) ||
	    (strncmp(t->name, "rpal", 4) && !t->baseline) || !(b = same_case(r, x, base)) ||
	    b->rounds != x->rounds || (cpu && x->metric != M_RPC))
		return NULL;
	stats_paired(cpu ? x->round_cpu : x->round_key, cpu ? b->round_cpu : b->round_key, x->rounds, p);
	return p->n ? base : NULL;
}

static const char *placement_desc(const struct report *r, const struct result *x, char *buf)
{
	cpu_set_t set;
	int cpu[2] = { -1, -1 }, n = 0;

	if (!sched_getaffinity(0, sizeof(set), &set))
		for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
			if (CPU_ISSET(i, &set))
				cpu[n++] = i;
	switch (x->placement) {
	case PL_SAME_CORE:
		sprintf(buf, "same-core: server and client on CPU %d", cpu[0]);
		break;
	case PL_SPLIT:
		sprintf(buf, "split: server on CPU %d, client on CPU %d", cpu[1], cpu[0]);
		break;
	default:
		sprintf(buf, "unpinned: the scheduler places both");
	}
	return buf;
}

static const char *label(const struct result *x, char *buf)
{
	const char *w = wait_name(x->wait);

	sprintf(buf, "%s%s%s", transports[x->transport]->name, w ? " " : "", w ? w : "");
	return buf;
}

/* Print every result matching (placement, suite, metric, size, zc), with a heading. */
static void section(const struct report *r, FILE *f, int pl, int su, int m, const char *title)
{
	int head = 0, lw = 22;
	char a[32], b[32], c[32], d[32], e[32], g[32], rt[32], lab[64], pd[96];

	/* First pass: the widest label, so columns line up. */
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		int l;

		if ((int)x->placement != pl || (int)x->suite != su || (int)x->metric != m)
			continue;
		l = (int)strlen(label(x, lab)) + (su == SU_LARGE ? 9 : 0);
		if (l > lw)
			lw = l;
	}
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];

		if ((int)x->placement != pl || (int)x->suite != su || (int)x->metric != m)
			continue;
		if (!head) {
			fprintf(f, "\n%s; %s\n", title, placement_desc(r, x, pd));
			if (m == M_THROUGHPUT)
				fprintf(f, "  %-*s %12s %12s %12s %12s %9s\n", lw, "transport", "msgs/s",
					"p50 batch", "p99 batch", "worst batch", "vs uds");
			else if (m == M_CPU)
				fprintf(f, "  %-*s %12s %14s %14s %9s\n", lw, "transport", "CPU ns/msg",
					"server ns/msg", "client ns/msg", "vs uds");
			else
				fprintf(f, "  %-*s %9s %9s %9s %9s %9s %9s %9s %9s\n",
					lw, su == SU_LARGE ? "transport, size, copy" : "transport",
					"p50 cyc", "p50 ns", "p99 ns", "p99.9 ns", "max ns", "mean ns",
					"min ns", "vs uds");
			head = 1;
		}
		ratio(r, x, rt);
		label(x, lab);
		if (su == SU_LARGE) {
			size_t l = strlen(lab);

			snprintf(lab + l, sizeof(lab) - l, " %zuK %s", x->size / 1024,
				 x->zerocopy ? "zc" : "1c");
		}
		if (m == M_THROUGHPUT) {
			fprintf(f, "  %-*s %12.0f %12llu %12llu %12llu %9s\n", lw, lab, x->st.mean,
				(unsigned long long)x->st.p50, (unsigned long long)x->st.p99,
				(unsigned long long)x->st.max, rt);
		} else if (m == M_CPU) {
			/*
			 * Per process; the user/sys split is tick-sampled by the
			 * kernel (JSON has it), only the sum is exact.
			 */
			double n = x->st.count ? (double)x->st.count : 1;

			fprintf(f, "  %-*s %12.0f %14.0f %14.0f %9s\n", lw, lab, x->st.mean,
				(x->cpu[0].user_ns + x->cpu[0].sys_ns) / n,
				(x->cpu[1].user_ns + x->cpu[1].sys_ns) / n, rt);
		} else {
			fprintf(f, "  %-*s %9llu %9s %9s %9s %9s %9s %9s %9s\n", lw, lab,
				(unsigned long long)x->st.p50, fmt_ns(a, ns(r, x->st.p50)),
				fmt_ns(b, ns(r, x->st.p99)), fmt_ns(c, ns(r, x->st.p999)),
				fmt_ns(d, ns(r, x->st.max)), fmt_ns(e, ns(r, x->st.mean)),
				fmt_ns(g, ns(r, x->st.min)), rt);
		}
	}
}

static const char *fmt_rate(char *buf, double rate)
{
	if (rate > 0)
		sprintf(buf, "%.0f", rate);
	else
		strcpy(buf, "max");
	return buf;
}

/*
 * The rpc suite at one placement: a block per offered rate, in --rates
 * order, a row per transport and wait.  Latency runs from each request's
 * scheduled send to its reply (open loop), or from its send (max).
 */
static void rpc_section(const struct report *r, FILE *f, int pl)
{
	const struct bench_opts *o = r->o;
	char a[32], b[32], c[32], d[32], lab[64], pd[96], rt[32];
	int head = 0, lw = 22;

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		int l;

		if ((int)x->placement != pl || x->metric != M_RPC)
			continue;
		l = (int)strlen(label(x, lab));
		if (l > lw)
			lw = l;
	}
	for (unsigned k = 0; k < o->nrates; k++)
		for (unsigned i = 0; i < r->nres; i++) {
			const struct result *x = &r->res[i];

			if ((int)x->placement != pl || x->metric != M_RPC || x->rate != o->rates[k])
				continue;
			if (!head++) {
				fprintf(f, "\nrpc: request and reply of %zu B, %u outstanding at most, %g s per rate"
					"%s; latency from each request's scheduled send; %s\n", x->size,
					x->concurrency, o->seconds, o->work_ns ? ", with server work" : "",
					placement_desc(r, x, pd));
				if (o->work_ns)
					fprintf(f, "  server busy-work: %llu ns per request\n",
						(unsigned long long)o->work_ns);
				fprintf(f, "  %-*s %8s %10s %9s %9s %9s %9s %11s %9s\n", lw, "transport", "rate",
					"achieved", "p50 ns", "p99 ns", "p99.9 ns", "max ns", "CPU ns/req",
					"CPU cores");
			}
			fprintf(f, "  %-*s %8s %10.0f %9s %9s %9s %9s %11.0f %9.3f\n", lw, label(x, lab),
				fmt_rate(rt, x->rate), x->achieved_rate, fmt_ns(a, ns(r, x->st.p50)),
				fmt_ns(b, ns(r, x->st.p99)), fmt_ns(c, ns(r, x->st.p999)),
				fmt_ns(d, ns(r, x->st.max)), x->cpu_per_req_ns, x->cpu_cores);
			if (x->unsent)
				fprintf(f, "  %-*s overloaded: %llu scheduled requests not sent by %g s; "
					"the figures above leave them out\n", lw, "",
					(unsigned long long)x->unsent, 2 * o->seconds);
		}
	if (head)
		fprintf(f, "  rate: offered requests/s (max: closed loop); achieved: replies/s; CPU: both "
			"processes' user+sys (getrusage) per request, and over wall time in cores\n");
}

/* Syscalls behind the figures, from rpal_conn_info(): both sides, warm-up included. */
static void counts_note(const struct report *r, FILE *f, int pl, int su, int m)
{
	char lab[64], rt[32];

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];

		if ((int)x->placement != pl || (int)x->suite != su || (int)x->metric != m ||
		    !x->has_counts)
			continue;
		if (x->metric == M_RPC)		/* a row per rate: say which */
			fprintf(f, "  %s at %s%s: %.3f wake-up syscalls and %.3f sleeps per request and reply "
				"(both sides)\n", label(x, lab), fmt_rate(rt, x->rate), x->rate > 0 ? "/s" : "",
				x->wakeups_per_msg, x->sleeps_per_msg);
		else
			fprintf(f, "  %s: %.3f wake-up syscalls and %.3f sleeps per message (both sides)\n",
				label(x, lab), x->wakeups_per_msg, x->sleeps_per_msg);
	}
}

/*
 * Unpinned, where the two processes ran decides much of what a request
 * costs (on one CPU a wake-up needs no interrupt to another): per rate,
 * each transport's share of requests sent and received on one CPU.
 */
static void same_cpu_note(const struct report *r, FILE *f, int pl)
{
	char lab[64], rt[32];

	if (pl != PL_UNPINNED)
		return;
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		int first = 1;

		if ((int)x->placement != pl || x->metric != M_RPC || x->same_cpu_share < 0)
			continue;
		/* The first row of its rate prints the rate's line. */
		for (unsigned k = 0; k < i && first; k++)
			first = !((int)r->res[k].placement == pl && r->res[k].metric == M_RPC &&
				  r->res[k].same_cpu_share >= 0 && r->res[k].rate == x->rate);
		if (!first)
			continue;
		fprintf(f, "  sent and received on one CPU at %s%s:", fmt_rate(rt, x->rate),
			x->rate > 0 ? "/s" : "");
		for (unsigned k = i, n = 0; k < r->nres; k++) {
			const struct result *y = &r->res[k];

			if ((int)y->placement == pl && y->metric == M_RPC && y->same_cpu_share >= 0 &&
			    y->rate == x->rate)
				fprintf(f, "%s %s %.0f%%", n++ ? "," : "", label(y, lab), 100 * y->same_cpu_share);
		}
		fputs(" of requests\n", f);
	}
}

/* Each rpal row against its baseline, round by round (see by_round). */
static void by_round_note(const struct report *r, FILE *f, int pl, int su, int m, bool cpu)
{
	const char *base, *said = NULL;
	char lab[64], rt[32];
	struct paired p;

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];

		if ((int)x->placement != pl || (int)x->suite != su || (int)x->metric != m ||
		    !(base = by_round(r, x, &p, cpu)))
			continue;
		/* Rows come grouped by baseline (C rows, then each Go family's). */
		if (!said || strcmp(said, base))
			fprintf(f, "  round by round, %s over the same round's %s (sign test: same?):\n",
				m == M_CPU ? "CPU/msg" : cpu ? "CPU/request" : "p50", base);
		said = base;
		label(x, lab);
		if (x->metric == M_RPC)
			snprintf(lab + strlen(lab), sizeof(lab) - strlen(lab), " at %s", fmt_rate(rt, x->rate));
		fprintf(f, "    %-22s median %.3fx (%.3f-%.3f), lower in %u, higher in %u of %u rounds, p = %.2g\n",
			lab, p.median, p.min, p.max, p.lower, p.higher, p.n, p.sign_p);
	}
}

/*
 * rpal-hosted's extra rows: the RPAL call round trip (rpal_send into a
 * parked receiver that reads the message and parks again, no echo) and its
 * floor, a bare pair of user-mode switches with wrfsbase; then their ratio.
 */
static void hosted_note(const struct report *r, FILE *f, int pl)
{
	const struct result *call = NULL, *sw = NULL;

	section(r, f, pl, SU_LATENCY, M_CALL_RTT,
		"RPAL call round trip: rpal_send into a parked receiver that reads and parks again (no echo)");
	section(r, f, pl, SU_LATENCY, M_SWITCH_PAIR,
		"bare switch pair: hosted_switch_wrfs there and back (the call's floor)");
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];

		if ((int)x->placement != pl || x->suite != SU_LATENCY)
			continue;
		if (x->metric == M_CALL_RTT)
			call = x;
		else if (x->metric == M_SWITCH_PAIR)
			sw = x;
	}
	if (!call || !sw || !sw->st.p50)
		return;
	fprintf(f, "  %s: call round trip p50 = %.2fx the switch pair's p50\n",
		transports[call->transport]->name, (double)call->st.p50 / (double)sw->st.p50);
	fprintf(f, "  %s: one process; the server program's main thread is placed as the server, the\n"
		"    client's as the client; in RPAL calls the server's code runs on the client's thread\n",
		transports[call->transport]->name);
}

void report_table(const struct report *r, FILE *f)
{
	const struct bench_opts *o = r->o;
	struct utsname u;
	char model[128], t[200];

	cpu_model(model, sizeof(model));
	uname(&u);
	fprintf(f, "rpal bench: %s, %ld CPUs online, Linux %s; TSC %.3f GHz%s%s\n", model,
		sysconf(_SC_NPROCESSORS_ONLN), u.release, r->tsc_hz / 1e9,
		r->invariant ? " (invariant)" : " (NOT invariant)", r->hypervisor ? ", under a hypervisor" : "");
	if (r->tsc_step > 1)
		fprintf(f, "the TSC counts in steps of %llu cycles (%.1f ns): every sample is a multiple of "
			"it (means are not), and medians one step apart may be the same speed\n",
			(unsigned long long)r->tsc_step, ns(r, (double)r->tsc_step));
	fprintf(f, "command: %s\n", o->cmdline);
	if (o->rounds > 1)
		fprintf(f, "each case ran %u times, round after round; shown: its median run\n",
			o->rounds);
	for (int pl = 0; pl < PL_NR; pl++) {
		snprintf(t, sizeof(t), "one-way latency, client send -> server has the message, %zu B, %llu msgs",
			 o->size, (unsigned long long)o->count);
		section(r, f, pl, SU_LATENCY, M_ONEWAY, t);
		counts_note(r, f, pl, SU_LATENCY, M_ONEWAY);
		by_round_note(r, f, pl, SU_LATENCY, M_ONEWAY, false);
		snprintf(t, sizeof(t), "round trip, client send -> echo checked, %zu B", o->size);
		section(r, f, pl, SU_LATENCY, M_RTT, t);
		by_round_note(r, f, pl, SU_LATENCY, M_RTT, false);
		hosted_note(r, f, pl);
		snprintf(t, sizeof(t), "throughput, %zu B in batches of %u, one echo per batch",
			 o->size, o->batch);
		section(r, f, pl, SU_THROUGHPUT, M_THROUGHPUT, t);
		section(r, f, pl, SU_LARGE, M_ONEWAY, "large messages, one-way (1c one-copy, zc zero-copy)");
		snprintf(t, sizeof(t), "CPU per message (both processes, getrusage) at %.0f msgs/s for %g s",
			 o->rate, o->seconds);
		section(r, f, pl, SU_CPU, M_CPU, t);
		counts_note(r, f, pl, SU_CPU, M_CPU);
		by_round_note(r, f, pl, SU_CPU, M_CPU, false);
		rpc_section(r, f, pl);
		counts_note(r, f, pl, SU_RPC, M_RPC);
		same_cpu_note(r, f, pl);
		by_round_note(r, f, pl, SU_RPC, M_RPC, false);
		by_round_note(r, f, pl, SU_RPC, M_RPC, true);
	}
	if (o->suites & ~(1u << SU_RPC))	/* the rpc block has no such column */
		fprintf(f, "\nvs uds: uds-epoll's figure (p50; msgs/s; CPU) over this one, same placement: "
			"> 1 is better.\n");
	else
		fputc('\n', f);
	for (unsigned i = 0; i < nr_transports; i++)
		if ((o->transports & (1u << i)) && transports[i]->unavailable &&
		    transports[i]->unavailable())
			fprintf(f, "not available: %s: %s\n", transports[i]->name,
				transports[i]->unavailable());
		else if ((o->transports & (1u << i)) && (o->suites & (1u << SU_RPC)) &&
			 transports[i]->no_rpc)
			fprintf(f, "not available for rpc: %s: %s\n", transports[i]->name,
				transports[i]->no_rpc);
		else if ((o->transports & (1u << i)) && !(o->suites & (1u << SU_RPC)) &&
			 (transports[i]->flags & TF_RPC_ONLY) &&
			 o->transports != (1u << nr_transports) - 1)
			fprintf(f, "rpc suite only: %s (add --suite rpc)\n", transports[i]->name);
	for (unsigned i = 0; i < r->nerrs; i++)
		fprintf(f, "FAILED: %s\n", r->errs[i]);
}

/* ------------------------------------------------------------------ JSON */

/* s as a JSON string, quoted and escaped. */
void jstr(FILE *f, const char *s)
{
	jstrn(f, s, strlen(s));
}

void jstrn(FILE *f, const char *s, size_t n)
{
	const char *end = s + n;

	fputc('"', f);
	for (; s < end; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* Integral figures as "123.0": valid JSON, and a float to strict readers. */
static void jval(FILE *f, double v)
{
	if (v == (double)(uint64_t)v && v < 1e15)
		fprintf(f, "%llu.0", (unsigned long long)v);
	else
		fprintf(f, "%.6f", v);
}

static void jnum(FILE *f, const char *key, double v)
{
	fprintf(f, ", \"%s\": ", key);
	jval(f, v);
}

/* Each round's figure, as the JSON member key. */
static void json_rounds(FILE *f, const char *key, const double *v, unsigned n)
{
	fprintf(f, ", \"%s\": [", key);
	for (unsigned k = 0; k < n; k++) {
		fputs(k ? ", " : "", f);
		jval(f, v[k]);
	}
	fputc(']', f);
}

/* A by_round comparison (see by_round) as the JSON member key. */
static void json_paired(FILE *f, const char *key, const char *base, const struct paired *p)
{
	fprintf(f, ", \"%s\": {\"baseline\": ", key);
	jstr(f, base);
	fprintf(f, ", \"rounds\": %u, \"lower\": %u, \"higher\": %u", p->n, p->lower, p->higher);
	jnum(f, "median", p->median);
	jnum(f, "min", p->min);
	jnum(f, "max", p->max);
	jnum(f, "sign_p", p->sign_p);
	fputc('}', f);
}

int report_json(const struct report *r, FILE *f)
{
	const struct bench_opts *o = r->o;
	struct utsname u;
	char model[128], date[64], pd[96];
	time_t now = time(NULL);
	const char *base;
	struct paired p;
	int first = 1;

	cpu_model(model, sizeof(model));
	uname(&u);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	fprintf(f, "{\n  \"tsc_hz\": %.1f,\n  \"machine\": {\"cpu\": ", r->tsc_hz);
	jstr(f, model);
	fprintf(f, ", \"nproc\": %ld, \"cpus_allowed\": %d, \"kernel\": ",
		sysconf(_SC_NPROCESSORS_ONLN), o->ncpu);
	jstr(f, u.release);
	fprintf(f, ", \"arch\": ");
	jstr(f, u.machine);
	fprintf(f, ", \"invariant_tsc\": %s, \"hypervisor\": %s, \"tsc_step_cycles\": %llu},\n",
		r->invariant ? "true" : "false", r->hypervisor ? "true" : "false",
		(unsigned long long)r->tsc_step);
	fprintf(f, "  \"date\": \"%s\",\n  \"command\": ", date);
	jstr(f, o->cmdline);
	fprintf(f, ",\n  \"rpal_version\": \"0.1\",\n  \"options\": {\"size\": %zu, \"count\": %llu, "
		"\"batch\": %u, \"warmup\": %u, \"rate\": %.1f, \"seconds\": %.3f, "
		"\"spin_us\": %u, \"rounds\": %u, \"concurrency\": %u, \"work_ns\": %llu, \"rates\": [",
		o->size, (unsigned long long)o->count, o->batch, o->warmup, o->rate, o->seconds,
		o->spin_us, o->rounds, o->concurrency, (unsigned long long)o->work_ns);
	for (unsigned k = 0; k < o->nrates; k++) {
		fputs(k ? ", " : "", f);
		jval(f, o->rates[k]);
	}
	fprintf(f, "]},\n  \"results\": [");
	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		const char *w = wait_name(x->wait);
		int lat = x->metric != M_THROUGHPUT && x->metric != M_CPU;	/* rpc too */

		fprintf(f, "%s\n    {\"transport\": \"%s\", \"placement\": \"%s\", \"wait\": ", first ? "" : ",",
			transports[x->transport]->name, placement_name[x->placement]);
		first = 0;
		if (w)
			fprintf(f, "\"%s\"", w);
		else
			fputs("null", f);
		fprintf(f, ", \"metric\": \"%s\", \"unit\": \"%s\", \"count\": %llu",
			metric_name[x->metric], x->unit, (unsigned long long)x->st.count);
		jnum(f, "mean", x->st.mean);
		jnum(f, "p50", (double)x->st.p50);
		jnum(f, "p99", (double)x->st.p99);
		jnum(f, "p999", (double)x->st.p999);
		jnum(f, "max", (double)x->st.max);
		jnum(f, "min", (double)x->st.min);
		if (lat) {
			jnum(f, "mean_ns", ns(r, x->st.mean));
			jnum(f, "p50_ns", ns(r, (double)x->st.p50));
			jnum(f, "p99_ns", ns(r, (double)x->st.p99));
			jnum(f, "p999_ns", ns(r, (double)x->st.p999));
			jnum(f, "max_ns", ns(r, (double)x->st.max));
			jnum(f, "min_ns", ns(r, (double)x->st.min));
			if (x->metric == M_ONEWAY)
				fprintf(f, ", \"tsc_skew_clamped\": %llu", (unsigned long long)x->skew);
		}
		/* The run shown is the median of these. */
		fprintf(f, ", \"rounds\": %u", x->rounds);
		json_rounds(f, x->metric == M_THROUGHPUT || x->metric == M_CPU ? "round_means" : "round_p50s",
			    x->round_key, x->rounds);
		if ((base = by_round(r, x, &p, false)) != NULL)
			json_paired(f, "by_round", base, &p);
		if (x->metric == M_RPC) {
			json_rounds(f, "round_cpu_per_req_ns", x->round_cpu, x->rounds);
			if ((base = by_round(r, x, &p, true)) != NULL)
				json_paired(f, "by_round_cpu", base, &p);
		}
		if (x->has_counts) {
			jnum(f, "wakeups_per_msg", x->wakeups_per_msg);
			jnum(f, "sleeps_per_msg", x->sleeps_per_msg);
		}
		if (x->metric == M_RPC && x->same_cpu_share >= 0)
			jnum(f, "same_cpu_share", x->same_cpu_share);
		fprintf(f, ", \"suite\": \"%s\", \"size\": %zu, \"copy\": \"%s\", \"placement_detail\": ",
			suite_name[x->suite], x->size, x->zerocopy ? "zero-copy" : "one-copy");
		jstr(f, placement_desc(r, x, pd));
		if (x->metric == M_THROUGHPUT)
			fprintf(f, ", \"batch\": %u", x->batch);
		if (x->metric == M_CPU)
			fprintf(f, ", \"rate\": %.1f, \"seconds\": %.3f, \"server_user_ns\": %llu, "
				"\"server_sys_ns\": %llu, \"client_user_ns\": %llu, \"client_sys_ns\": %llu",
				x->rate, x->seconds, (unsigned long long)x->cpu[0].user_ns,
				(unsigned long long)x->cpu[0].sys_ns, (unsigned long long)x->cpu[1].user_ns,
				(unsigned long long)x->cpu[1].sys_ns);
		if (x->metric == M_RPC) {
			/* rate 0 is max: closed loop. */
			jnum(f, "rate", x->rate);
			jnum(f, "achieved_rate", x->achieved_rate);
			fprintf(f, ", \"concurrency\": %u, \"work_ns\": %llu, \"unsent\": %llu",
				x->concurrency, (unsigned long long)x->work_ns, (unsigned long long)x->unsent);
			jnum(f, "cpu_per_req_ns", x->cpu_per_req_ns);
			jnum(f, "cpu_cores", x->cpu_cores);
			jnum(f, "seconds", x->seconds);
			fprintf(f, ", \"server_user_ns\": %llu, \"server_sys_ns\": %llu, "
				"\"client_user_ns\": %llu, \"client_sys_ns\": %llu",
				(unsigned long long)x->cpu[0].user_ns, (unsigned long long)x->cpu[0].sys_ns,
				(unsigned long long)x->cpu[1].user_ns, (unsigned long long)x->cpu[1].sys_ns);
		}
		fputc('}', f);
	}
	fprintf(f, "\n  ],\n  \"unavailable\": [");
	first = 1;
	for (unsigned i = 0; i < nr_transports; i++) {
		if (!(o->transports & (1u << i)) || !transports[i]->unavailable ||
		    !transports[i]->unavailable())
			continue;
		fprintf(f, "%s{\"transport\": \"%s\", \"reason\": ", first ? "" : ", ", transports[i]->name);
		jstr(f, transports[i]->unavailable());
		fputc('}', f);
		first = 0;
	}
	/* Usable, but not by the rpc suite: said so, never left out silently. */
	for (unsigned i = 0; (o->suites & (1u << SU_RPC)) && i < nr_transports; i++) {
		if (!(o->transports & (1u << i)) || !transports[i]->no_rpc ||
		    (transports[i]->unavailable && transports[i]->unavailable()))
			continue;
		fprintf(f, "%s{\"transport\": \"%s\", \"suite\": \"rpc\", \"reason\": ", first ? "" : ", ",
			transports[i]->name);
		jstr(f, transports[i]->no_rpc);
		fputc('}', f);
		first = 0;
	}
	fprintf(f, "],\n  \"errors\": [");
	for (unsigned i = 0; i < r->nerrs; i++) {
		fputs(i ? ", " : "", f);
		jstr(f, r->errs[i]);
	}
	fprintf(f, "]\n}\n");
	return ferror(f) ? -1 : 0;
}
