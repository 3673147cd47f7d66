/* SPDX-License-Identifier: MIT */
/* error.c - a sentence for every failure: errno plus what happened. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

static __thread int last_err;
static __thread char last_msg[256];
static __thread char out_msg[320];

int rpal_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
	va_end(ap);
	last_err = err;
	return -err;
}

RPAL_EXPORT const char *rpal_strerror(int err)
{
	if (err < 0)
		err = -err;
	/* EAGAIN is expected and says it all: it never carries a detail, so
	 * returning it needs no write here (a hot path of non-blocking calls). */
	if (err && err != EAGAIN && err == last_err && last_msg[0]) {
		snprintf(out_msg, sizeof(out_msg), "%s (%s)", last_msg, strerror(err));
		return out_msg;
	}
	return strerror(err);
}
