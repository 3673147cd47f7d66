/* SPDX-License-Identifier: MIT */
/*
 * hosted_off.c - the `rpal` command of a connected-only build
 * (-DRPAL_HOSTED=OFF, as on AArch64): bench, stat, top and doctor work as
 * elsewhere; the hosted commands and the rpal-hosted transport say why
 * they are not there.
 */
#include <stdio.h>
#include "bench.h"

#define NO_HOSTED "this rpal was built without hosted mode (-DRPAL_HOSTED=OFF; hosted mode is x86-64 only)"

static int no_hosted(const char *cmd)
{
	fprintf(stderr, "rpal %s: %s\n", cmd, NO_HOSTED);
	return 1;
}

int cmd_run(int argc, char **argv) { (void)argc; (void)argv; return no_hosted("run"); }
int cmd_host(int argc, char **argv) { (void)argc; (void)argv; return no_hosted("host"); }
int cmd_join(int argc, char **argv) { (void)argc; (void)argv; return no_hosted("join"); }
int cmd_ps(int argc, char **argv) { (void)argc; (void)argv; return no_hosted("ps"); }

static const char *hosted_unavailable(void) { return NO_HOSTED; }

const struct transport tr_rpal_hosted = {
	.name = "rpal-hosted",
	.what = "librpal hosted mode (RPAL calls): not in this build",
	.unavailable = hosted_unavailable,
};
