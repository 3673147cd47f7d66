/* SPDX-License-Identifier: MIT */
/*
 * stats.c - the bench keeps every sample and sorts it, so percentiles are
 * exact (no histogram buckets, no reservoir): what a reviewer can recompute.
 */
#include <math.h>
#include <stdlib.h>
#include "stats.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* LSD radix sort, 16 bits a pass: 1M samples sort in a few ms, not qsort's 100. */
void stats_sort(uint64_t *v, size_t n)
{
	uint64_t *tmp, *src = v, *dst;
	uint64_t maxv = 0;
	size_t *cnt;

	if (n < 64) {
		for (size_t i = 1; i < n; i++) {
			uint64_t x = v[i];
			size_t j = i;
			while (j && v[j - 1] > x) {
				v[j] = v[j - 1];
				j--;
			}
			v[j] = x;
		}
		return;
	}
	tmp = malloc(n * sizeof(*tmp));
	cnt = malloc(65536 * sizeof(*cnt));
	if (!tmp || !cnt) {
		free(tmp);
		free(cnt);
		/* Out of memory: fall back to an in-place sort. */
		qsort(v, n, sizeof(*v), cmp_u64);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (v[i] > maxv)
			maxv = v[i];
	dst = tmp;
	for (unsigned shift = 0; shift < 64 && (maxv >> shift); shift += 16) {
		size_t sum = 0;

		for (size_t i = 0; i < 65536; i++)
			cnt[i] = 0;
		for (size_t i = 0; i < n; i++)
			cnt[(src[i] >> shift) & 0xffff]++;
		for (size_t i = 0; i < 65536; i++) {
			size_t c = cnt[i];
			cnt[i] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[cnt[(src[i] >> shift) & 0xffff]++] = src[i];
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		for (size_t i = 0; i < n; i++)
			v[i] = src[i];
	free(tmp);
	free(cnt);
}

uint64_t stats_rank(const uint64_t *v, size_t n, uint32_t pm)
{
	uint64_t rank;

	if (!n)
		return 0;
	/* rank = ceil(pm/100000 * n), in integers; 1-based. */
	rank = ((uint64_t)pm * n + 99999) / 100000;
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

void stats_compute(uint64_t *v, size_t n, struct stats *st)
{
	long double sum = 0;

	*st = (struct stats){ .count = n };
	if (!n)
		return;
	stats_sort(v, n);
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	st->mean = (double)(sum / n);
	st->min = v[0];
	st->p50 = stats_rank(v, n, 50000);
	st->p99 = stats_rank(v, n, 99000);
	st->p999 = stats_rank(v, n, 99900);
	st->max = v[n - 1];
}

unsigned stats_median_index(const double *key, unsigned n)
{
	/* Few keys (rounds): count, for each, those before it in order. */
	for (unsigned i = 0; i < n; i++) {
		unsigned below = 0;
		for (unsigned j = 0; j < n; j++)
			below += key[j] < key[i] || (key[j] == key[i] && j < i);
		if (below == (n - 1) / 2)
			return i;
	}
	return 0;
}

void stats_paired(const double *a, const double *b, unsigned n, struct paired *out)
{
	double ratio[64], tail = 0;
	unsigned m = 0, untied, fewer;

	*out = (struct paired){ .sign_p = 1 };
	for (unsigned k = 0; k < n && k < 64; k++) {
		if (a[k] <= 0 || b[k] <= 0)
			continue;
		ratio[m++] = a[k] / b[k];
		out->lower += a[k] < b[k];
		out->higher += a[k] > b[k];
	}
	out->n = m;
	if (!m)
		return;
	out->median = ratio[stats_median_index(ratio, m)];
	out->min = out->max = ratio[0];
	for (unsigned k = 1; k < m; k++) {
		out->min = fmin(out->min, ratio[k]);
		out->max = fmax(out->max, ratio[k]);
	}
	/* P(a split at least this uneven | each untied round a coin toss). */
	untied = out->lower + out->higher;
	fewer = out->lower < out->higher ? out->lower : out->higher;
	for (unsigned i = 0; i <= fewer && untied; i++)
		tail += exp(lgamma(untied + 1.0) - lgamma(i + 1.0) - lgamma(untied - i + 1.0) - untied * log(2.0));
	if (untied)
		out->sign_p = fmin(1.0, 2 * tail);
}
