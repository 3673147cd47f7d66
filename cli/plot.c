/* SPDX-License-Identifier: MIT */
/*
 * plot.c - --plot: one-way latency distributions as a hand-written SVG.
 * Left: the CDF on a log latency axis (where the bulk sits).  Right: the
 * tail, 1 - CDF on a log axis down to 1e-6 (what p99.9 and max hide).
 * One curve per transport (and wait, and placement when several).
 * With the rpc suite, a second SVG beside it (FILE-rpc.svg): p50 latency
 * and CPU per request against the achieved request rate, log-log.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"

#define W 1100
#define PW 440		/* panel width */
#define PH 360		/* panel height */
#define PY 60		/* panel top */

static const char *const colours[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
	"#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
};
/* Colour says transport (and wait), dash says placement. */
static const char *const dashes[PL_NR] = { "", "7,4", "2,3" };

struct axes {
	double x0, y0;		/* panel origin (top left) */
	double lmin, lmax;	/* log10 ns range */
};

static double px(const struct axes *a, double ns)
{
	double l = log10(ns < 1 ? 1 : ns);

	return a->x0 + (l - a->lmin) / (a->lmax - a->lmin) * PW;
}

static void xaxis(FILE *f, const struct axes *a)
{
	static const char *const unit[] = { "1ns", "10ns", "100ns", "1µs", "10µs", "100µs",
					    "1ms", "10ms", "100ms", "1s", "10s" };

	for (int d = (int)a->lmin; d <= (int)a->lmax; d++) {
		double x = px(a, pow(10, d));

		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", x, a->y0,
			x, a->y0 + PH);
		fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n", x,
			a->y0 + PH + 16, d >= 0 && d <= 10 ? unit[d] : "?");
		for (int k = 2; k < 10 && d < (int)a->lmax; k++) {
			double xm = px(a, k * pow(10, d));

			fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#999'/>\n",
				xm, a->y0 + PH, xm, a->y0 + PH + 4);
		}
	}
	fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>one-way latency "
		"(log scale)</text>\n", a->x0 + PW / 2.0, a->y0 + PH + 36);
	fprintf(f, "<rect x='%.1f' y='%.1f' width='%d' height='%d' fill='none' stroke='#333'/>\n",
		a->x0, a->y0, PW, PH);
}

/* Does result x go on the plot: one-way, latency suite. */
static int plotted(const struct result *x)
{
	return x->metric == M_ONEWAY && x->suite == SU_LATENCY && x->st.count;
}

static int rpc_plot(const struct report *r, const char *path);

/* A new SVG of width W and height h on a white ground; NULL if it cannot be made. */
static FILE *svg_open(const char *path, unsigned h)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return NULL;
	fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%u' "
		"viewBox='0 0 %d %u' font-family='sans-serif' font-size='12'>\n", W, h, W, h);
	fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
	return f;
}

int report_plot(const struct report *r, const char *path)
{
	struct axes cdf, tail;
	double lo = INFINITY, hi = 0;
	unsigned nplace = 0, placements = 0, n = 0, ncurves = 0, nkeys = 0, H;
	int keys[32];
	FILE *f;

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		double a = x->st.min * 1e9 / r->tsc_hz, b = x->st.max * 1e9 / r->tsc_hz;

		if (!plotted(x))
			continue;
		if (a < lo)
			lo = a;
		if (b > hi)
			hi = b;
		placements |= 1u << x->placement;
		ncurves++;
	}
	H = PY + PH + 62 + (ncurves + 2) / 3 * 18 + 10;
	for (unsigned p = placements; p; p &= p - 1)
		nplace++;
	if (hi <= 0)
		lo = 10, hi = 1e6;
	cdf.lmin = floor(log10(lo < 1 ? 1 : lo));
	cdf.lmax = ceil(log10(hi < 10 ? 10 : hi));
	if (cdf.lmax <= cdf.lmin)
		cdf.lmax = cdf.lmin + 1;
	cdf.x0 = 70;
	cdf.y0 = PY;
	tail = cdf;
	tail.x0 = 70 + PW + 90;

	f = svg_open(path, H);
	if (!f)
		return -1;
	fprintf(f, "<text x='%d' y='24' text-anchor='middle' font-size='15'>rpal bench: one-way "
		"latency, %zu B messages, TSC %.2f GHz</text>\n", W / 2, r->o->size, r->tsc_hz / 1e9);
	fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>CDF: fraction of messages at or "
		"below</text>\n", cdf.x0 + PW / 2.0, PY - 8);
	fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>tail: fraction of messages "
		"slower than</text>\n", tail.x0 + PW / 2.0, PY - 8);
	xaxis(f, &cdf);
	xaxis(f, &tail);
	for (int k = 0; k <= 4; k++) {
		double y = PY + PH - k * PH / 4.0;

		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", cdf.x0, y,
			cdf.x0 + PW, y);
		fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end'>%d%%</text>\n", cdf.x0 - 6, y + 4,
			k * 25);
	}
	for (int k = 0; k <= 6; k++) {
		double y = PY + k * PH / 6.0;

		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", tail.x0,
			y, tail.x0 + PW, y);
		if (k)
			fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end'>1e-%d</text>\n",
				tail.x0 - 6, y + 4, k);
		else
			fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end'>1</text>\n", tail.x0 - 6,
				y + 4);
	}

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		const char *w = wait_name(x->wait), *col;
		const char *dash = nplace > 1 ? dashes[x->placement] : "";
		double last = 1.0 / (double)x->st.count;
		int key = x->transport * WAIT_NR + (x->wait > 0 ? x->wait : 0), c = 0;

		if (!plotted(x))
			continue;
		while (c < (int)nkeys && keys[c] != key)
			c++;
		if (c == (int)nkeys && nkeys < 32)
			keys[nkeys++] = key;
		col = colours[c % 10];
		/* CDF: up to the last rank the samples resolve, then the max at 100 %. */
		fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' stroke-dasharray='%s' "
			"points='", col, dash);
		for (unsigned k = 0; k < CDF_POINTS; k++) {
			double q = cdf_quantile(k);

			if (1 - q < last)
				break;
			fprintf(f, "%.1f,%.1f ", px(&cdf, x->cdf[k] * 1e9 / r->tsc_hz), PY + PH - q * PH);
		}
		fprintf(f, "%.1f,%d'/>\n", px(&cdf, x->st.max * 1e9 / r->tsc_hz), PY);
		/* Tail: 1 - q on a log axis, 1 at the top down to 1e-6. */
		fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' stroke-dasharray='%s' "
			"points='", col, dash);
		for (unsigned k = 0; k < CDF_POINTS; k++) {
			double s = 1 - cdf_quantile(k);

			if (s < last * 0.999)
				break;
			fprintf(f, "%.1f,%.1f ", px(&tail, x->cdf[k] * 1e9 / r->tsc_hz),
				PY + (-log10(s)) / 6.0 * PH);
		}
		fprintf(f, "'/>\n");
		/* Legend, below the panels. */
		{
			double lx = 70 + (n % 3) * 340, ly = PY + PH + 62 + (n / 3) * 18;

			fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
				"stroke-width='3' stroke-dasharray='%s'/>\n", lx, ly - 4, lx + 26, ly - 4,
				col, dash);
			fprintf(f, "<text x='%.1f' y='%.1f'>%s%s%s%s%s: p50 %.0f ns</text>\n", lx + 32,
				ly, transports[x->transport]->name, w ? " " : "", w ? w : "",
				nplace > 1 ? ", " : "", nplace > 1 ? placement_name[x->placement] : "",
				x->st.p50 * 1e9 / r->tsc_hz);
		}
		n++;
	}
	if (!n)
		fprintf(f, "<text x='%d' y='%u' text-anchor='middle'>no latency results</text>\n", W / 2,
			H / 2);
	fprintf(f, "</svg>\n");
	if (fclose(f))
		return -1;
	return rpc_plot(r, path);
}

/* A log-log panel: x and y in decades lx0..lx1, ly0..ly1. */
struct loglog {
	double x0, y0, lx0, lx1, ly0, ly1;
};

static double lx(const struct loglog *a, double v)
{
	return a->x0 + (log10(v) - a->lx0) / (a->lx1 - a->lx0) * PW;
}

static double ly(const struct loglog *a, double v)
{
	return a->y0 + PH - (log10(v) - a->ly0) / (a->ly1 - a->ly0) * PH;
}

static void decades(double lo, double hi, double *l0, double *l1)
{
	*l0 = floor(log10(lo > 0 ? lo : 1));
	*l1 = ceil(log10(hi > 0 ? hi : 10));
	if (*l1 <= *l0)
		*l1 = *l0 + 1;
}

static void loglog_axes(FILE *f, const struct loglog *a, const char *ytitle, int yns)
{
	static const char *const ns_unit[] = { "1ns", "10ns", "100ns", "1µs", "10µs", "100µs",
					       "1ms", "10ms", "100ms", "1s" };
	static const char *const rate_unit[] = { "1/s", "10/s", "100/s", "1k/s", "10k/s", "100k/s",
						 "1M/s", "10M/s", "100M/s" };

	for (int d = (int)a->lx0; d <= (int)a->lx1; d++) {
		double x = lx(a, pow(10, d));

		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", x, a->y0, x,
			a->y0 + PH);
		fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n", x, a->y0 + PH + 16,
			d >= 0 && d <= 8 ? rate_unit[d] : "?");
	}
	for (int d = (int)a->ly0; d <= (int)a->ly1; d++) {
		double y = ly(a, pow(10, d));

		fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", a->x0, y,
			a->x0 + PW, y);
		fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end'>%s</text>\n", a->x0 - 6, y + 4,
			yns && d >= 0 && d <= 9 ? ns_unit[d] : "?");
	}
	fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>requests answered per second "
		"(log scale)</text>\n", a->x0 + PW / 2.0, a->y0 + PH + 36);
	fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n", a->x0 + PW / 2.0,
		a->y0 - 8, ytitle);
	fprintf(f, "<rect x='%.1f' y='%.1f' width='%d' height='%d' fill='none' stroke='#333'/>\n",
		a->x0, a->y0, PW, PH);
}

/* Is x an rpc result with a rate it reached. */
static int rpc_plotted(const struct result *x)
{
	return x->suite == SU_RPC && x->metric == M_RPC && x->st.count && x->achieved_rate > 0;
}

/* Order of x's offered rate among a line's points: rates up, max last. */
static double rate_order(const struct result *x)
{
	return x->rate > 0 ? x->rate : INFINITY;
}

static int rpc_plot(const struct report *r, const char *svg)
{
	struct loglog lat, cpu;
	double rlo = INFINITY, rhi = 0, llo = INFINITY, lhi = 0, clo = INFINITY, chi = 0;
	unsigned nplace = 0, placements = 0, nlines = 0, H;
	char path[4096];
	size_t len = strlen(svg);
	FILE *f;

	for (unsigned i = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		double l = x->st.p50 * 1e9 / r->tsc_hz;

		if (!rpc_plotted(x))
			continue;
		rlo = fmin(rlo, x->achieved_rate);
		rhi = fmax(rhi, x->achieved_rate);
		llo = fmin(llo, l);
		lhi = fmax(lhi, l);
		clo = fmin(clo, x->cpu_per_req_ns);
		chi = fmax(chi, x->cpu_per_req_ns);
		placements |= 1u << x->placement;
	}
	if (rhi == 0)
		return 0;       /* no rpc suite in this run */
	for (unsigned p = placements; p; p &= p - 1)
		nplace++;
	if (len > 4 && !strcmp(svg + len - 4, ".svg"))
		len -= 4;
	if (len + 9 > sizeof(path))
		return -1;
	snprintf(path, sizeof(path), "%.*s-rpc.svg", (int)len, svg);

	lat.x0 = 70;
	lat.y0 = PY;
	decades(rlo, rhi, &lat.lx0, &lat.lx1);
	decades(llo, lhi, &lat.ly0, &lat.ly1);
	cpu = lat;
	cpu.x0 = 70 + PW + 90;
	decades(clo, chi, &cpu.ly0, &cpu.ly1);
	/* One line per transport, wait and placement: count them for the legend. */
	for (unsigned i = 0; i < r->nres; i++) {
		unsigned j;

		if (!rpc_plotted(&r->res[i]))
			continue;
		for (j = 0; j < i; j++)
			if (rpc_plotted(&r->res[j]) && r->res[j].transport == r->res[i].transport &&
			    r->res[j].wait == r->res[i].wait && r->res[j].placement == r->res[i].placement)
				break;
		nlines += j == i;
	}
	H = PY + PH + 62 + (nlines + 2) / 3 * 18 + 10;

	f = svg_open(path, H);
	if (!f)
		return -1;
	fprintf(f, "<text x='%d' y='24' text-anchor='middle' font-size='15'>rpal bench: request/response "
		"at a rate, %zu B, concurrency %u</text>\n", W / 2, r->o->size_set ? r->o->size : RPC_SIZE,
		r->o->concurrency);
	loglog_axes(f, &lat, "p50 latency (log scale)", 1);
	loglog_axes(f, &cpu, "CPU per request, both processes (log scale)", 1);

	for (unsigned i = 0, n = 0; i < r->nres; i++) {
		const struct result *x = &r->res[i];
		const char *w = wait_name(x->wait), *col = colours[n % 10];
		const char *dash = nplace > 1 ? dashes[x->placement] : "";
		unsigned j;

		if (!rpc_plotted(x))
			continue;
		for (j = 0; j < i; j++)
			if (rpc_plotted(&r->res[j]) && r->res[j].transport == x->transport &&
			    r->res[j].wait == x->wait && r->res[j].placement == x->placement)
				break;
		if (j < i)
			continue;       /* drawn with its line's first point */
		for (int panel = 0; panel < 2; panel++) {
			const struct loglog *a = panel ? &cpu : &lat;
			double done = -1;

			fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' "
				"stroke-dasharray='%s' points='", col, dash);
			/* The line's points by offered rate, max last. */
			for (;;) {
				const struct result *next = NULL;

				for (unsigned k = i; k < r->nres; k++) {
					const struct result *y = &r->res[k];

					if (rpc_plotted(y) && y->transport == x->transport && y->wait == x->wait &&
					    y->placement == x->placement && rate_order(y) > done &&
					    (!next || rate_order(y) < rate_order(next)))
						next = y;
				}
				if (!next)
					break;
				done = rate_order(next);
				fprintf(f, "%.1f,%.1f ", lx(a, next->achieved_rate),
					ly(a, panel ? next->cpu_per_req_ns : next->st.p50 * 1e9 / r->tsc_hz));
				if (!isfinite(done))
					break;
			}
			fprintf(f, "'/>\n");
		}
		{
			double lxp = 70 + (n % 3) * 340, lyp = PY + PH + 62 + (n / 3) * 18;

			fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
				"stroke-width='3' stroke-dasharray='%s'/>\n", lxp, lyp - 4, lxp + 26, lyp - 4,
				col, dash);
			fprintf(f, "<text x='%.1f' y='%.1f'>%s%s%s%s%s</text>\n", lxp + 32, lyp,
				transports[x->transport]->name, w ? " " : "", w ? w : "",
				nplace > 1 ? ", " : "", nplace > 1 ? placement_name[x->placement] : "");
		}
		n++;
	}
	fprintf(f, "</svg>\n");
	return fclose(f) ? -1 : 0;
}
