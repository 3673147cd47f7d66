/* prog_ctor.c: an ordinary program whose constructor does what CTOR_MODE says, as a plain exec
 * would let it: "stderr" writes through stderr (a copy relocation in this PIE), "exit" calls
 * exit(3), "segv" faults; with "libslow" (its library's constructor sleeps 2 s) main then waits
 * 20 s for a signal.  It records what its constructor and its library's constructor saw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const char *ctorlib_saw; /* prog_ctorlib.c: CTOR_MODE in the library's constructor */
int ctor_pid;                   /* getpid() in the constructor */
int ctor_argc;                  /* the argc the constructor was given */
int main_ran;

__attribute__((constructor)) static void ctor(int argc, char **argv, char **envp) {
    (void)argv;
    (void)envp;
    const char *m = getenv("CTOR_MODE");
    ctor_pid = getpid();
    ctor_argc = argc;
    if (!m) return;
    if (!strcmp(m, "stderr")) fprintf(stderr, "prog_ctor: constructor writes through stderr\n");
    if (!strcmp(m, "exit")) exit(3);
    if (!strcmp(m, "segv")) *(volatile int *)0 = 1;
}

int main(int argc, char **argv) {
    (void)argv;
    main_ran = 1;
    printf("prog_ctor: main, argc %d, the library's constructor saw CTOR_MODE=%s\n", argc,
           ctorlib_saw ? ctorlib_saw : "(unset)");
    fflush(stdout);
    if (ctorlib_saw && !strcmp(ctorlib_saw, "libslow")) sleep(20);
    return 0;
}
