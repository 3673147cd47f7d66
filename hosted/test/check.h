/* check.h: tiny helpers for the hosted-mode tests (exit 0 pass, 1 fail, 77 skip). */
#ifndef HOSTED_CHECK_H
#define HOSTED_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static FILE *check_out; /* where results go (tests may redirect fd 1 for the hosted programs) */

#define CHECK_OUT (check_out ? check_out : stdout)
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        int ok_ = !!(cond);                                                           \
        fprintf(CHECK_OUT, "%s: ", ok_ ? "ok  " : "FAIL");                            \
        fprintf(CHECK_OUT, __VA_ARGS__);                                              \
        fprintf(CHECK_OUT, "%s\n", ok_ ? "" : "   [" #cond "]");                      \
        fflush(CHECK_OUT);                                                            \
        if (!ok_) check_failures++;                                                   \
    } while (0)
#define SKIP(...)                                                                     \
    do {                                                                              \
        fprintf(CHECK_OUT, "SKIP: " __VA_ARGS__);                                     \
        fprintf(CHECK_OUT, "\n");                                                     \
        exit(77);                                                                     \
    } while (0)
#define CHECK_DONE()                                                                  \
    do {                                                                              \
        fprintf(CHECK_OUT, "%s: %d failure(s)\n", check_failures ? "FAILED" : "PASSED", \
                check_failures);                                                      \
        fflush(CHECK_OUT);                                                            \
        return check_failures ? 1 : 0;                                                \
    } while (0)
#endif
