/* prog_ctorlib.c: prog_ctor's shared library; its constructor runs when the program is loaded. */
#include <stdlib.h>

const char *ctorlib_saw;

__attribute__((constructor)) static void ctorlib_init(void) { ctorlib_saw = getenv("CTOR_MODE"); }
