/* SPDX-License-Identifier: MIT */
/* top.c - `rpal top`: not yet. */
#include <stdio.h>
#include "snap.h"

int cmd_top(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "rpal top: not available in this build\n");
	return 2;
}
