/* prog_counter.c: a small ordinary program used by the hosted-mode loader tests.  Built as its own
 * PIE executable (-fPIE -pie -rdynamic); knows nothing about rpal.
 *   prog_counter TAG ITERATIONS STATUS [THREADS]
 * Counts in a global and a thread-local, churns malloc/free, sets errno, checks that sbrk cannot grow
 * the brk heap from a secondary namespace, prints through buffered stdout, registers an atexit
 * handler and returns STATUS.  THREADS (default 1) threads are created and joined one after the
 * other, each checking its thread-local.  The test reads the exported globals below from the host. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long counter;              /* global: one per namespace */
__thread long tcounter;    /* thread-local */
int atexit_ran;
int errno_ok;
int tls_thread_ok;
int sbrk_refused;
int destructor_ran;
uintptr_t main_self;       /* pthread_self() in main */
uintptr_t errno_addr;      /* &errno in main */
uintptr_t environ_ok;
static const char *tag = "?";

static void bye(void) {
    atexit_ran = 1;
    printf("%s: atexit handler ran, counter=%ld\n", tag, counter); /* flushed by exit */
}

__attribute__((destructor)) static void dtor(void) { destructor_ran = 1; }

static void *worker(void *arg) {
    (void)arg;
    /* A new thread of this program: its thread-local starts from 0, independent of main's. */
    tcounter += 5;
    return (void *)(intptr_t)(tcounter == 5);
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s TAG ITERATIONS STATUS [THREADS]\n", argv[0]);
        return 2;
    }
    tag = argv[1];
    long n = atol(argv[2]);
    int status = atoi(argv[3]);
    atexit(bye);
    main_self = (uintptr_t)pthread_self();
    errno_addr = (uintptr_t)&errno;
    environ_ok = getenv("HOSTED_TEST_ENV") != NULL;

    errno = (int)n;
    void *keep[16] = {0};
    for (long i = 0; i < n; i++) {
        counter++;
        tcounter++;
        size_t sz = (size_t)(16 + (i * 7919) % 70000); /* small and mmap-sized */
        int k = (int)(i % 16);
        free(keep[k]);
        keep[k] = malloc(sz);
        if (!keep[k]) return 3;
        memset(keep[k], (int)i, sz < 64 ? sz : 64);
        if (i % 1000 == 0) sched_yield(); /* let the other programs run in between */
    }
    for (int k = 0; k < 16; k++) free(keep[k]);
    errno_ok = errno == (int)n && tcounter == n;

    long threads = argc == 5 ? atol(argv[4]) : 1, good = 0;
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        void *r = NULL;
        good += pthread_create(&t, NULL, worker, NULL) == 0 && pthread_join(t, &r) == 0 && r != NULL;
    }
    tls_thread_ok = good == threads && tcounter == n;

    errno = 0;
    void *b = sbrk(4096);
    sbrk_refused = b == (void *)-1 && errno == ENOMEM;

    printf("%s: argv ok (%s), counter=%ld tls=%ld errno_ok=%d thread_tls_ok=%d sbrk_refused=%d\n",
           tag, argv[0], counter, tcounter, errno_ok, tls_thread_ok, sbrk_refused);
    return status; /* no fflush: the loader must flush stdout */
}
