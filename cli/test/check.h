/* SPDX-License-Identifier: MIT */
/* check.h - CHECK for the CLI tests: print what failed, count it in fails, go on. */
#ifndef CLI_TEST_CHECK_H
#define CLI_TEST_CHECK_H

#include <stdio.h>

static int fails;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		printf("FAIL: "); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		fails++; \
	} \
} while (0)

#endif
