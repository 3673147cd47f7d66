/* SPDX-License-Identifier: MIT */
/* stats.h - order statistics over raw samples (nearest-rank percentiles). */
#ifndef RPAL_CLI_STATS_H
#define RPAL_CLI_STATS_H

#include <stddef.h>
#include <stdint.h>

struct stats {
	uint64_t count;
	double mean;
	uint64_t min, p50, p99, p999, max;
};

/* Sort v[0..n) ascending, in place. */
void stats_sort(uint64_t *v, size_t n);

/*
 * Nearest-rank percentile of sorted v[0..n): the smallest sample with at
 * least pm/1000 percent of the samples at or below it.  pm is in
 * thousandths of a percent (50000 = p50, 99900 = p99.9) so that no
 * floating-point rounding can move a rank.  n == 0 gives 0.
 */
uint64_t stats_rank(const uint64_t *v, size_t n, uint32_t pm);

/* Sort v and fill *st.  n == 0 gives all zeroes. */
void stats_compute(uint64_t *v, size_t n, struct stats *st);

/* The index of the median of key[0..n) (the lower one of two middles; the
 * first of equal keys); n >= 1, at most 64. */
unsigned stats_median_index(const double *key, unsigned n);

/*
 * Two cases compared round by round: a[k] and b[k] ran in the same round,
 * minutes apart at most, so a slow spell of the VM that spans a round hits
 * both, where the medians of each case's runs may come from different
 * spells.  Rounds with a zero on either side are left out.
 */
struct paired {
	unsigned n;             /* rounds compared */
	unsigned lower, higher; /* rounds where a < b, a > b (the rest tie) */
	double median;          /* of a[k] / b[k] (the lower middle of an even n) */
	double min, max;
	double sign_p;          /* two-sided sign test of "a and b are the same
	                           speed" (ties left out); 1 with none untied */
};

/* Fill *out from a[0..n) and b[0..n); n at most 64. */
void stats_paired(const double *a, const double *b, unsigned n, struct paired *out);

#endif
