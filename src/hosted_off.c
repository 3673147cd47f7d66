/* SPDX-License-Identifier: MIT */
/*
 * hosted_off.c - the public face of hosted mode in a connected-only build
 * (RPAL_HOSTED=0): no program is ever hosted.
 */
#include "internal.h"

RPAL_EXPORT int rpal_hosted_stat(struct rpal_prog_stat *out, unsigned max)
{
	(void)out;
	(void)max;
	return rpal_ensure_init();      /* 0: the caller is not hosted */
}
