/* SPDX-License-Identifier: MIT */
/*
 * stat.c - `rpal stat`: one snapshot of the connection counters of every
 * rpal process of this user (of all users, for root), as a table, JSON,
 * or the Prometheus text format for node-exporter's textfile collector.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "snap.h"

enum fmt { FMT_TABLE, FMT_JSON, FMT_PROM };

static int usage(FILE *f)
{
	fprintf(f,
"usage: rpal stat [--json | --prometheus] [--dir DIR] [PID | SERVICE]\n"
"\n"
"The connection counters of every rpal process of this user (every user's,\n"
"for root), read from their statistics pages without disturbing them.\n"
"PID selects one process, SERVICE the connections of that service name.\n"
"\n"
"  --json          one JSON document: {\"processes\": [...], \"skipped\": [...]}\n"
"  --prometheus    the Prometheus text format (rpal_*_total counters and gauges)\n"
"  --dir DIR       read the pages of runtime directory DIR only\n"
"  -h, --help      this text\n"
"\n"
"Exit status: 0, 1 when PID or SERVICE matched nothing, DIR cannot be read or\n"
"the output cannot be written, 2 on a usage error.\n");
	return f == stdout ? 0 : 2;
}

/* Strings from pages are printable ASCII already (snap.c): escape the
 * quote and the backslash. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('"');
}

static const char *role(const struct snap_conn *c)
{
	return c->flags & RPAL_STAT_ACCEPTED ? "accepted" : "connected";
}

static const char *state(const struct snap_conn *c)
{
	if (c->status & RPAL_STAT_ERROR)
		return "error";
	return c->status & RPAL_STAT_PEER_GONE ? "peer-gone" : "open";
}

/* The counters, in the order every format prints them. */
#define COUNTERS(X)							\
	X(msgs_sent, "messages_sent", "Messages sent on the connection")	\
	X(msgs_received, "messages_received", "Messages received on the connection") \
	X(bytes_sent, "bytes_sent", "Payload bytes sent")			\
	X(bytes_received, "bytes_received", "Payload bytes received")		\
	X(wakeups_sent, "wakeups_sent", "Wake-up system calls made for the peer's receiver") \
	X(wakeups_avoided, "wakeups_avoided", "Wake-up checks that found the peer's receiver awake") \
	X(room_wakeups, "room_wakeups", "Wake-up system calls made for the peer's sender waiting for room") \
	X(tx_sleeps, "tx_sleeps", "Sleeps waiting for room in the ring or the buffer quota") \
	X(rx_sleeps, "rx_sleeps", "Sleeps waiting for messages")		\
	X(ring_full, "ring_full", "Sends that found the ring or the buffer quota full") \
	X(tx_spin_ns, "tx_spin_ns", "Nanoseconds spent spinning for room")	\
	X(rx_spin_ns, "rx_spin_ns", "Nanoseconds spent spinning for messages") \
	X(violations, "violations", "Protocol violations of the peer")

/* A queue length, or null where the other end is not in the snapshot. */
static void json_queue(const char *name, int64_t n)
{
	if (n < 0)
		printf(", \"%s\": null", name);
	else
		printf(", \"%s\": %lld", name, (long long)n);
}

static void print_json(const struct snap *s)
{
	unsigned i, j;

	printf("{\"processes\": [");
	for (i = 0; i < s->nprocs; i++) {
		const struct snap_proc *p = &s->procs[i];

		printf("%s\n  {\"pid\": %u, \"name\": ", i ? "," : "", p->pid);
		json_str(p->name);
		printf(", \"uid\": %u, \"slot\": %u, \"hosted\": %s, \"started\": %lld, \"runtime_dir\": ", p->uid,
		       p->slot, p->flags & RPAL_STAT_HOSTED ? "true" : "false", (long long)p->started);
		json_str(p->dir);
		if (p->flags & RPAL_STAT_HOSTED)
			printf(", \"calls_in\": %llu, \"calls_out\": %llu, \"handoffs\": %llu, \"callee_cpu_ns\": %llu",
			       (unsigned long long)p->calls_in, (unsigned long long)p->calls_out,
			       (unsigned long long)p->handoffs, (unsigned long long)p->callee_ns);
		printf(", \"sleep_cost_ns\": %u, \"wake_cost_ns\": %u, \"wake_latency_ns\": %u, \"listeners\": [",
		       p->sleep_cost_ns, p->wake_cost_ns, p->wake_lat_ns);
		for (j = 0; j < snap_listeners_listed(p); j++) {
			const struct snap_listener *l = &p->listeners[j];

			printf("%s{\"id\": %llu, \"fd\": %d, \"service\": ", j ? ", " : "", (unsigned long long)l->id,
			       l->fd);
			json_str(l->service);
			printf(", \"since\": %lld, \"accepted\": %llu, \"refused\": %llu}", (long long)l->since,
			       (unsigned long long)l->accepted, (unsigned long long)l->refused);
		}
		printf("], \"unlisted_listeners\": %u", snap_listeners_unlisted(p));
		printf(", \"open_connections\": %u, \"unlisted_connections\": %u, \"busy_entries\": %u, "
		       "\"connections\": [", p->nr_open, p->overflow, p->busy);
		for (j = 0; j < p->nconns; j++) {
			const struct snap_conn *c = &p->conns[j];

			printf("%s\n    {\"id\": %llu, \"fd\": %d, \"peer_pid\": %u, \"peer_uid\": %u, "
			       "\"peer_slot\": %u, \"service\": ", j ? "," : "", (unsigned long long)c->id, c->fd,
			       c->peer_pid, c->peer_uid, c->peer_slot);
			json_str(c->service);
			printf(", \"role\": \"%s\", \"local\": %s, \"state\": \"%s\", \"since\": %lld", role(c),
			       c->flags & RPAL_STAT_LOCAL ? "true" : "false", state(c), (long long)c->since);
#define X(f, name, help) printf(", \"" #f "\": %llu", (unsigned long long)c->f);
			COUNTERS(X)
#undef X
			printf(", \"sleeps\": %llu, \"bufs_out\": %llu, \"bufs_held\": %llu",
			       (unsigned long long)(c->tx_sleeps + c->rx_sleeps), (unsigned long long)c->bufs_out,
			       (unsigned long long)c->bufs_held);
			json_queue("in_queue", c->in_queue);
			json_queue("out_queue", c->out_queue);
			putchar('}');
		}
		printf("%s]}", p->nconns ? "\n  " : "");
	}
	printf("%s], \"stale_pages\": %u, \"skipped\": [", s->nprocs ? "\n" : "", s->stale);
	for (i = 0; i < s->nskips; i++) {
		printf("%s\n  {\"path\": ", i ? "," : "");
		json_str(s->skips[i].path);
		printf(", \"reason\": ");
		json_str(s->skips[i].why);
		printf("}");
	}
	printf("%s]}\n", s->nskips ? "\n" : "");
}

/* A label value: escape backslash, quote and newline (none of the last
 * reach here, but the format requires it). */
static void prom_label(const char *s)
{
	for (; *s; s++) {
		if (*s == '\n') {
			fputs("\\n", stdout);
			continue;
		}
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
}

/* pid and slot name a process within its runtime directory; dir tells
 * apart those root reads from the directories of other PID namespaces. */
static void prom_labels_of(const struct snap_proc *p, const struct snap_conn *c, const struct snap_listener *l)
{
	printf("{pid=\"%u\",slot=\"%u\",dir=\"", p->pid, p->slot);
	prom_label(p->dir);
	printf("\",name=\"");
	prom_label(p->name);
	if (c) {
		printf("\",conn=\"%llu\",peer=\"%u\",service=\"", (unsigned long long)c->id, c->peer_pid);
		prom_label(c->service);
		printf("\",role=\"%s", role(c));
	}
	if (l) {
		printf("\",listener=\"%llu\",service=\"", (unsigned long long)l->id);
		prom_label(l->service);
	}
	printf("\"}");
}

static void prom_labels(const struct snap_proc *p, const struct snap_conn *c)
{
	prom_labels_of(p, c, NULL);
}

static void print_prometheus(const struct snap *s)
{
	unsigned i, j;

#define X(f, name, help)							\
	printf("# HELP rpal_" name "_total " help ".\n# TYPE rpal_" name "_total counter\n"); \
	for (i = 0; i < s->nprocs; i++)						\
		for (j = 0; j < s->procs[i].nconns; j++) {			\
			printf("rpal_" name "_total");				\
			prom_labels(&s->procs[i], &s->procs[i].conns[j]);	\
			printf(" %llu\n", (unsigned long long)s->procs[i].conns[j].f); \
		}
	COUNTERS(X)
#undef X
#define G(f, name, help)							\
	printf("# HELP rpal_" name " " help ".\n# TYPE rpal_" name " gauge\n"); \
	for (i = 0; i < s->nprocs; i++)						\
		for (j = 0; j < s->procs[i].nconns; j++) {			\
			printf("rpal_" name);					\
			prom_labels(&s->procs[i], &s->procs[i].conns[j]);	\
			printf(" %lld\n", (long long)s->procs[i].conns[j].f);	\
		}
	G(bufs_out, "buffers_out", "Our zero-copy buffers the peer holds, not yet acknowledged")
	G(bufs_held, "buffers_held", "The peer's zero-copy buffers received and not released")
	G(since, "connection_start_time_seconds", "When the connection was made, in seconds since the epoch")
#undef G
/* A queue gauge, for the connections whose other end is in the snapshot. */
#define Q(f, name, help)							\
	printf("# HELP rpal_" name " " help ".\n# TYPE rpal_" name " gauge\n"); \
	for (i = 0; i < s->nprocs; i++)						\
		for (j = 0; j < s->procs[i].nconns; j++)			\
			if (s->procs[i].conns[j].f >= 0) {			\
				printf("rpal_" name);				\
				prom_labels(&s->procs[i], &s->procs[i].conns[j]); \
				printf(" %lld\n", (long long)s->procs[i].conns[j].f); \
			}
	Q(in_queue, "in_queue_messages", "Messages the peer sent that this end has not received yet")
	Q(out_queue, "out_queue_messages", "Messages this end sent that the peer has not received yet")
#undef Q
	printf("# HELP rpal_connection_peer_gone 1 once the peer hung up or exited.\n"
	       "# TYPE rpal_connection_peer_gone gauge\n");
	for (i = 0; i < s->nprocs; i++)
		for (j = 0; j < s->procs[i].nconns; j++) {
			printf("rpal_connection_peer_gone");
			prom_labels(&s->procs[i], &s->procs[i].conns[j]);
			printf(" %d\n", !!(s->procs[i].conns[j].status & RPAL_STAT_PEER_GONE));
		}
/* A gauge of each process, or of those where only is true. */
#define P(f, name, help, only)							\
	printf("# HELP rpal_" name " " help ".\n# TYPE rpal_" name " gauge\n");	\
	for (i = 0; i < s->nprocs; i++)						\
		if (only) {							\
			printf("rpal_" name);					\
			prom_labels(&s->procs[i], NULL);			\
			printf(" %lld\n", (long long)s->procs[i].f);		\
		}
	P(nr_open, "open_connections", "Open rpal connections of the process", true)
/* A counter of each listener. */
#define L(f, name, help)							\
	printf("# HELP rpal_listener_" name "_total " help ".\n# TYPE rpal_listener_" name "_total counter\n"); \
	for (i = 0; i < s->nprocs; i++)						\
		for (j = 0; j < snap_listeners_listed(&s->procs[i]); j++) {	\
			printf("rpal_listener_" name "_total");			\
			prom_labels_of(&s->procs[i], NULL, &s->procs[i].listeners[j]); \
			printf(" %llu\n", (unsigned long long)s->procs[i].listeners[j].f); \
		}
	L(accepted, "accepted", "Connections the listener accepted")
	L(refused, "refused", "Clients whose handshake the listener refused, or that failed it")
#undef L
#define H(f, name, help)							\
	printf("# HELP rpal_hosted_" name "_total " help ".\n# TYPE rpal_hosted_" name "_total counter\n"); \
	for (i = 0; i < s->nprocs; i++)						\
		if (s->procs[i].flags & RPAL_STAT_HOSTED) {			\
			printf("rpal_hosted_" name "_total");			\
			prom_labels(&s->procs[i], NULL);			\
			printf(" %llu\n", (unsigned long long)s->procs[i].f);	\
		}
	H(calls_in, "calls_in", "RPAL calls into the hosted program")
	H(calls_out, "calls_out", "RPAL calls the hosted program's threads made")
	H(handoffs, "handoffs", "System calls made inside calls, handed to the program's own threads")
	H(callee_ns, "callee_cpu_ns", "Nanoseconds the program's code ran on its callers' threads (estimated from one call in 16)")
#undef H
	P(sleep_cost_ns, "wait_sleep_cost_ns", "CPU nanoseconds the adaptive wait counts for one of its sleeps (a moving average of samples)",
	  s->procs[i].sleep_cost_ns)
	P(wake_cost_ns, "wait_wake_cost_ns", "Nanoseconds the adaptive wait counts for the system call that wakes a peer (a moving average of samples)",
	  s->procs[i].wake_cost_ns)
	P(wake_lat_ns, "wait_wake_latency_ns", "Nanoseconds from a peer's ring to the sleeper's running, as its sleepers measure them (a moving average)",
	  s->procs[i].wake_lat_ns)
	P(started, "process_start_time_seconds", "When the process initialised rpal, in seconds since the epoch", true)
#undef P
}

/* A cost in µs, or "-" where none was sampled. */
static const char *cost_us(uint32_t ns, char buf[16])
{
	if (!ns)
		return "-";
	snprintf(buf, 16, "%.1f", ns / 1e3);
	return buf;
}

/* A queue length, or "-" where the other end is not in the snapshot. */
static const char *queue_str(int64_t n, char buf[24])
{
	if (n < 0)
		return "-";
	snprintf(buf, 24, "%lld", (long long)n);
	return buf;
}

static void print_table(const struct snap *s)
{
	time_t now = time(NULL);
	char cost[2][16];
	unsigned i, j;

	if (!s->nprocs)
		printf("no rpal processes in %s\n", s->looked);
	for (i = 0; i < s->nprocs; i++) {
		const struct snap_proc *p = &s->procs[i];
		/* Both positive: the difference cannot overflow, whatever the
		 * page claims. */
		long long up = p->started > 0 && now > p->started ? (long long)(now - p->started) : 0;

		printf("%spid %u  %s  slot %u%s  %u connection%s%s  up %lld:%02lld:%02lld\n", i ? "\n" : "", p->pid,
		       p->name, p->slot, p->flags & RPAL_STAT_HOSTED ? " (hosted)" : "", p->nr_open,
		       p->nr_open == 1 ? "" : "s", p->overflow ? " (some not listed: page full)" : "", up / 3600,
		       up / 60 % 60, up % 60);
		if (p->busy)
			printf("  %u entr%s not listed: rewritten at every read\n", p->busy, p->busy == 1 ? "y" : "ies");
		if (p->flags & RPAL_STAT_HOSTED)
			printf("  rpal calls in %llu, out %llu; handoffs %llu; its code on callers' threads %.3f ms\n",
			       (unsigned long long)p->calls_in, (unsigned long long)p->calls_out,
			       (unsigned long long)p->handoffs, (double)p->callee_ns / 1e6);
		if (p->sleep_cost_ns || p->wake_cost_ns)
			printf("  a sleep costs %s us of CPU, a wake-up %s us (the adaptive wait's budget is at most their sum)\n",
			       cost_us(p->sleep_cost_ns, cost[0]), cost_us(p->wake_cost_ns, cost[1]));
		if (p->wake_lat_ns)
			printf("  a sleeper runs %s us after its peer rings (it spins through shorter gaps of a peer that waits for it)\n",
			       cost_us(p->wake_lat_ns, cost[0]));
		for (j = 0; j < snap_listeners_listed(p); j++)
			printf("  listening on %s (fd %d): %llu accepted, %llu refused or failed\n", p->listeners[j].service,
			       p->listeners[j].fd, (unsigned long long)p->listeners[j].accepted,
			       (unsigned long long)p->listeners[j].refused);
		if (snap_listeners_unlisted(p))
			printf("  listening on %u more services (not listed: %u at most are)\n", snap_listeners_unlisted(p),
			       SNAP_LISTENERS_MAX);
		if (!p->nconns)
			continue;
		printf("  %4s %4s %7s %-16s %-9s %10s %10s %6s %6s %11s %11s %8s %8s %8s %6s %4s %4s %s\n", "ID",
		       "FD", "PEER", "SERVICE", "ROLE", "MSGS_OUT", "MSGS_IN", "INQ", "OUTQ", "BYTES_OUT", "BYTES_IN",
		       "WAKEUPS", "AVOIDED", "SLEEPS", "FULL", "OUT", "HELD", "STATE");
		for (j = 0; j < p->nconns; j++) {
			const struct snap_conn *c = &p->conns[j];
			char q[2][24];

			printf("  %4llu %4d %7u %-16.16s %-9s %10llu %10llu %6s %6s %11llu %11llu %8llu %8llu %8llu %6llu "
			       "%4llu %4llu %s%s\n", (unsigned long long)c->id, c->fd, c->peer_pid,
			       c->service[0] ? c->service : "-", role(c), (unsigned long long)c->msgs_sent,
			       (unsigned long long)c->msgs_received, queue_str(c->in_queue, q[0]),
			       queue_str(c->out_queue, q[1]), (unsigned long long)c->bytes_sent,
			       (unsigned long long)c->bytes_received, (unsigned long long)c->wakeups_sent,
			       (unsigned long long)c->wakeups_avoided,
			       (unsigned long long)(c->tx_sleeps + c->rx_sleeps), (unsigned long long)c->ring_full,
			       (unsigned long long)c->bufs_out, (unsigned long long)c->bufs_held, state(c),
			       c->violations ? " (violation)" : "");
		}
	}
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct snap_where where = { 0 };
	struct snap_filter filter;
	enum fmt fmt = FMT_TABLE;
	struct snap s;
	char why[300];
	unsigned i;
	int c;

	optind = 1;
	argv[0] = "rpal stat";          /* getopt's messages name the command */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
		case 'p':
			if (fmt != FMT_TABLE && fmt != (c == 'j' ? FMT_JSON : FMT_PROM)) {
				fprintf(stderr, "rpal stat: --json and --prometheus exclude each other\n\n");
				return usage(stderr);
			}
			fmt = c == 'j' ? FMT_JSON : FMT_PROM;
			break;
		case 'd':
			where.dir = optarg;
			break;
		case 'h':
			return usage(stdout);
		default:
			return usage(stderr);
		}
	}
	if (argc - optind > 1 || snap_filter_parse(optind < argc ? argv[optind] : NULL, &filter)) {
		fprintf(stderr, "rpal stat: %s\n\n", argc - optind > 1 ? "one PID or SERVICE at most"
							    : !argv[optind][0] ? "an empty SERVICE"
							    : "PID out of range");
		return usage(stderr);
	}
	if (snap_take(&where, &s, why, sizeof(why))) {
		fprintf(stderr, "rpal stat: %s\n", why);
		return 1;
	}
	for (i = 0; i < s.nskips; i++)
		fprintf(stderr, "rpal stat: skipped %s: %s\n", s.skips[i].path, s.skips[i].why);
	snap_select(&s, &filter);
	bool none = (filter.pid >= 0 || filter.service) && !s.nprocs;
	if (fmt == FMT_JSON)
		print_json(&s);
	else if (fmt == FMT_PROM)
		print_prometheus(&s);
	else if (!none)
		print_table(&s);
	c = 0;
	if (none) {
		if (filter.service)
			fprintf(stderr, "rpal stat: no process listens on or is connected to service %s in %s%s\n",
				filter.service, s.looked,
				where.dir ? "" : " (a process started with another RPAL_RUNTIME_DIR is read with --dir)");
		else if (snap_page_dir(filter.pid, why, sizeof(why)) == 0)
			fprintf(stderr, "rpal stat: pid %ld has its statistics page in another runtime directory, "
				"which --dir names:\n  %s\n", filter.pid, why);
		else
			fprintf(stderr, "rpal stat: no rpal process has pid %s in %s\n", optind < argc ? argv[optind] : "",
				s.looked);
		c = 1;
	}
	snap_free(&s);
	return c;
}
