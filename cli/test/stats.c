/* SPDX-License-Identifier: MIT */
/*
 * Description: the bench's order statistics: the radix sort agrees with
 * qsort on random and adversarial data, nearest-rank percentiles match
 * hand-computed ranks (no off-by-one at p50, p99, p99.9, max), mean is exact,
 * the median round is picked right, and round-by-round comparisons (median
 * ratio, range, sign test) match hand-computed values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "stats.h"

static int fails;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		printf("FAIL %s:%d: ", __FILE__, __LINE__); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		fails++; \
	} \
} while (0)

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void check_sort(size_t n, int kind)
{
	uint64_t *a = malloc(n * sizeof(*a)), *b = malloc(n * sizeof(*b)), s = 88172645463325252ull;
	size_t bad = 0;

	for (size_t i = 0; i < n; i++) {
		switch (kind) {
		case 0: a[i] = rnd(&s); break;			/* full 64-bit */
		case 1: a[i] = rnd(&s) % 50000; break;		/* cycle-like */
		case 2: a[i] = n - i; break;			/* descending */
		default: a[i] = 7; break;			/* all equal */
		}
		b[i] = a[i];
	}
	stats_sort(a, n);
	qsort(b, n, sizeof(*b), cmp);
	for (size_t i = 0; i < n; i++)
		bad += a[i] != b[i];
	CHECK(!bad, "sort of %zu values (kind %d): %zu positions differ from qsort", n, kind, bad);
	free(a);
	free(b);
}

int main(void)
{
	uint64_t v[1000];
	struct stats st;

	printf("stats: radix sort == qsort for n = 0..70, 1000, 100000 over 4 distributions\n");
	for (size_t n = 0; n <= 70; n++)
		for (int k = 0; k < 4; k++)
			check_sort(n, k);
	for (int k = 0; k < 4; k++) {
		check_sort(1000, k);
		check_sort(100000, k);
	}

	printf("stats: nearest rank on 1..1000 (rank = ceil(p * n))\n");
	for (int i = 0; i < 1000; i++)
		v[i] = (uint64_t)(1000 - i);	/* unsorted on purpose */
	stats_compute(v, 1000, &st);
	CHECK(st.count == 1000, "count %llu", (unsigned long long)st.count);
	CHECK(st.min == 1 && st.max == 1000, "min %llu max %llu", (unsigned long long)st.min,
	      (unsigned long long)st.max);
	CHECK(st.p50 == 500, "p50 %llu, want 500", (unsigned long long)st.p50);
	CHECK(st.p99 == 990, "p99 %llu, want 990", (unsigned long long)st.p99);
	CHECK(st.p999 == 999, "p99.9 %llu, want 999", (unsigned long long)st.p999);
	CHECK(st.mean == 500.5, "mean %f, want 500.5", st.mean);

	printf("stats: median index: odd, even (lower middle), ties (first), one key\n");
	{
		double odd[] = { 30, 10, 50, 20, 40 }, even[] = { 4, 1, 3, 2 }, ties[] = { 7, 5, 7, 7 },
		       one[] = { 9 };
		CHECK(stats_median_index(odd, 5) == 0, "odd: %u, want 0", stats_median_index(odd, 5));
		CHECK(stats_median_index(even, 4) == 3, "even: %u, want 3", stats_median_index(even, 4));
		CHECK(stats_median_index(ties, 4) == 0, "ties: %u, want 0", stats_median_index(ties, 4));
		CHECK(stats_median_index(one, 1) == 0, "one: %u", stats_median_index(one, 1));
	}

	printf("stats: small n: p50 of {10, 20} is 10, p99 of 10 samples is the max\n");
	v[0] = 20, v[1] = 10;
	stats_compute(v, 2, &st);
	CHECK(st.p50 == 10 && st.p99 == 20 && st.max == 20, "p50 %llu p99 %llu",
	      (unsigned long long)st.p50, (unsigned long long)st.p99);
	for (int i = 0; i < 10; i++)
		v[i] = (uint64_t)i;
	stats_compute(v, 10, &st);
	CHECK(st.p50 == 4 && st.p99 == 9 && st.p999 == 9, "n=10: p50 %llu p99 %llu",
	      (unsigned long long)st.p50, (unsigned long long)st.p99);
	CHECK(stats_rank(v, 10, 0) == 0, "p0 is the min");
	CHECK(stats_rank(v, 10, 100000) == 9, "p100 is the max");

	printf("stats: one sample, and none\n");
	v[0] = 42;
	stats_compute(v, 1, &st);
	CHECK(st.p50 == 42 && st.p999 == 42 && st.mean == 42, "single sample");
	stats_compute(v, 0, &st);
	CHECK(st.count == 0 && st.max == 0 && st.mean == 0, "empty");

	printf("stats: p99.9 of 100000 samples 1..100000 is 99900 exactly\n");
	{
		uint64_t *w = malloc(100000 * sizeof(*w));

		for (int i = 0; i < 100000; i++)
			w[i] = (uint64_t)(100000 - i);
		stats_compute(w, 100000, &st);
		CHECK(st.p999 == 99900 && st.p99 == 99000 && st.p50 == 50000,
		      "p50 %llu p99 %llu p99.9 %llu", (unsigned long long)st.p50,
		      (unsigned long long)st.p99, (unsigned long long)st.p999);
		free(w);
	}
	printf("stats: paired rounds: median ratio, range, lower/higher/tied, sign test\n");
	{
		double a[] = { 110, 90, 100, 120, 105 }, b[] = { 100, 100, 100, 100, 100 };
		double hi[10], one[10], a15[15], b15[15], z[] = { 0, 2 }, zb[] = { 1, 1 };
		struct paired p;

		stats_paired(a, b, 5, &p);
		/* Ratios 0.9 1.0 1.05 1.1 1.2; 1 lower, 3 higher, 1 tie: P = 2 (1 + 4) / 16. */
		CHECK(p.n == 5 && p.lower == 1 && p.higher == 3, "n %u lower %u higher %u", p.n, p.lower, p.higher);
		CHECK(fabs(p.median - 1.05) < 1e-12 && fabs(p.min - 0.9) < 1e-12 && fabs(p.max - 1.2) < 1e-12,
		      "median %g min %g max %g", p.median, p.min, p.max);
		CHECK(fabs(p.sign_p - 0.625) < 1e-9, "sign test p %g, want 0.625", p.sign_p);
		for (int i = 0; i < 10; i++)
			hi[i] = 2, one[i] = 1;
		stats_paired(hi, one, 10, &p);
		CHECK(p.higher == 10 && fabs(p.sign_p - 2.0 / 1024) < 1e-12, "10 of 10 higher: p %g", p.sign_p);
		stats_paired(one, one, 10, &p);
		CHECK(p.n == 10 && !p.lower && !p.higher && p.sign_p == 1 && p.median == 1, "all tied: p %g", p.sign_p);
		/* 6 lower, 9 higher: P = 2 (1+15+105+455+1365+3003+5005) / 2^15. */
		for (int i = 0; i < 15; i++)
			a15[i] = i < 6 ? 99 : 101, b15[i] = 100;
		stats_paired(a15, b15, 15, &p);
		CHECK(fabs(p.sign_p - 2 * 9949.0 / 32768) < 1e-9 && fabs(p.median - 1.01) < 1e-12,
		      "6 of 15 lower: p %g median %g", p.sign_p, p.median);
		stats_paired(z, zb, 2, &p);
		CHECK(p.n == 1 && p.higher == 1 && p.sign_p == 1, "a zero round is left out: n %u", p.n);
		stats_paired(z, zb, 0, &p);
		CHECK(p.n == 0 && p.sign_p == 1, "no rounds");
	}
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}
