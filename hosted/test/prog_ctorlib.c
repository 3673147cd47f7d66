/* prog_ctorlib.c: prog_ctor's shared library; its constructor runs when the program is loaded. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *ctorlib_saw;

/* CTOR_MODE=libslow: a load that takes 2 s (the launcher waits in dlmopen meanwhile);
 * libstuck: one that never ends. */
__attribute__((constructor)) static void ctorlib_init(void) {
    ctorlib_saw = getenv("CTOR_MODE");
    if (ctorlib_saw && !strcmp(ctorlib_saw, "libslow")) sleep(2);
    if (ctorlib_saw && !strcmp(ctorlib_saw, "libstuck"))
        for (;;) pause();
}
