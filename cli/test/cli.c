/* SPDX-License-Identifier: MIT */
/*
 * Description: the command line: `rpal` alone prints usage and fails,
 * `rpal --help` and `rpal bench --help` succeed and the latter documents
 * every option; every command's --help and -h succeed; bad values and
 * options fail with a message that names them.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "runcmd.h"

static int fails;

static void expect(char *const argv[], int status, int stream, const char *text)
{
	struct out o;
	char cmd[200] = "";

	for (int i = 1; argv[i]; i++)
		snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", argv[i]);
	printf("cli: rpal%s -> status %d, %s mentions \"%s\"\n", cmd, status,
	       stream ? "stderr" : "stdout", text);
	if (runcmd(argv, &o)) {
		printf("FAIL: cannot run %s\n", argv[0]);
		fails++;
		return;
	}
	if (o.status != status || !strstr(o.buf[stream], text)) {
		printf("FAIL: status %d\nstdout:\n%s\nstderr:\n%s\n", o.status, o.buf[0], o.buf[1]);
		fails++;
	}
	out_free(&o);
}

int main(int argc, char **argv)
{
	static const char *const opts[] = {
		"--transport", "--placement", "--size", "--count", "--wait", "--suite", "--batch",
		"--spin-us", "--large-count", "--rate", "--seconds", "--warmup", "--timeout", "--json", "--plot",
		"--progress", "--no-progress", "--list", "--verbose", "--help", "--rates", "--concurrency",
		"--work", "--rounds", NULL,
	};
	char *r = argc > 1 ? argv[1] : "./rpal";
	/* A connected-only build (-DRPAL_HOSTED=OFF) has no hosted commands. */
	bool hosted = !(argc > 2 && !strcmp(argv[2], "connected-only"));
	struct out o;

	expect((char *[]){ r, NULL }, 2, 1, "usage: rpal");
	expect((char *[]){ r, "--help", NULL }, 0, 0, "bench");
	expect((char *[]){ r, "nonsense", NULL }, 2, 1, "unknown command");
	expect((char *[]){ r, "bench", "--size", "3", NULL }, 2, 1, "--size");
	expect((char *[]){ r, "bench", "--transport", "carrier-pigeon", NULL }, 2, 1, "carrier-pigeon");
	expect((char *[]){ r, "bench", "--placement", "far", NULL }, 2, 1, "placement");
	expect((char *[]){ r, "bench", "--bogus", NULL }, 2, 1, "--help");
	expect((char *[]){ r, "bench", "--rates", "10,fast", NULL }, 2, 1, "--rates");
	/* librpal refuses a spin_us over 10 s: so does the option, before any run. */
	expect((char *[]){ r, "bench", "--spin-us", "10000001", NULL }, 2, 1, "--spin-us must be 0..10000000");
	expect((char *[]){ r, "bench", "--suite", "rpc", "--concurrency", "65", NULL }, 2, 1, "--concurrency");
	expect((char *[]){ r, "bench", "--suite", "rpc", "--concurrency", "64", "--size", "2k", NULL }, 2, 1,
	       "--concurrency x --size");
	/* Every command: --help and -h succeed on stdout; a bad option fails
	 * naming itself, under the command's full name. */
	static const char *const cmds[] = { "doctor", "stat", "top", "host", "join", "ps" };
	for (unsigned i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		expect((char *[]){ r, (char *)cmds[i], "--help", NULL }, 0, 0, "usage: rpal");
		expect((char *[]){ r, (char *)cmds[i], "-h", NULL }, 0, 0, "usage: rpal");
		if (!hosted && i == 2)
			break;
	}
	expect((char *[]){ r, "stat", "--bogus", NULL }, 2, 1, "rpal stat: unrecognized option '--bogus'");
	expect((char *[]){ r, "top", "--bogus", NULL }, 2, 1, "rpal top: unrecognized option '--bogus'");
	expect((char *[]){ r, "doctor", "--bogus", NULL }, 2, 1, "(--bogus)");
	if (hosted) {
		expect((char *[]){ r, "host", "--bogus", NULL }, 2, 1, "rpal host: unknown option --bogus");
		expect((char *[]){ r, "ps", "h", "--bogus", NULL }, 2, 1, "rpal ps: unknown option --bogus");
		expect((char *[]){ r, "join", "ah", NULL }, 2, 1, "usage: rpal join");
		expect((char *[]){ r, "run", "/bin/true", ":::", NULL }, 2, 1, "empty program");
	} else {
		/* Each hosted command fails, saying why, whatever it is given. */
		static const char *const off[] = { "run", "host", "join", "ps" };
		for (unsigned i = 0; i < sizeof(off) / sizeof(off[0]); i++)
			expect((char *[]){ r, (char *)off[i], "--help", NULL }, 1, 1,
			       "built without hosted mode (-DRPAL_HOSTED=OFF");
		expect((char *[]){ r, "bench", "--list", NULL }, 0, 0,
		       "not available: this rpal was built without hosted mode");
	}
	expect((char *[]){ r, "stat", "--json", "--prometheus", NULL }, 2, 1, "exclude each other");
	expect((char *[]){ r, "stat", "", NULL }, 2, 1, "an empty SERVICE");
	expect((char *[]){ r, "top", "", NULL }, 2, 1, "an empty SERVICE");
	expect((char *[]){ r, "bench", "--list", NULL }, 0, 0, "uds-epoll");
	expect((char *[]){ r, "bench", "--list", NULL }, 0, 0, "rpal-hosted");

	printf("cli: rpal bench --help documents every option\n");
	if (runcmd((char *[]){ r, "bench", "--help", NULL }, &o) || o.status) {
		printf("FAIL: rpal bench --help failed\n");
		return 1;
	}
	for (int i = 0; opts[i]; i++)
		if (!strstr(o.buf[0], opts[i])) {
			printf("FAIL: %s is not in rpal bench --help\n", opts[i]);
			fails++;
		}
	out_free(&o);
	printf("%s\n", fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}
