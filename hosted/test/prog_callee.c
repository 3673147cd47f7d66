/* prog_callee.c: an ordinary program whose code another thread runs through a user-mode switch.
 * main sets errno and a thread-local to known values, publishes its identity and waits; the host
 * runs callee_probe() on the host's own kernel thread with fs switched to this thread's TCB.  The
 * probe reads and bumps errno and the thread-local; main checks at the end that it saw the bumps,
 * i.e. that the probe used main's TLS. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

struct probe {
    int err;
    int tls;
    uintptr_t errno_addr;
    uintptr_t tls_addr;
    uintptr_t self;
    long calls;
};

__thread int callee_tls;
_Atomic int callee_ready, callee_quit;
uintptr_t callee_self, callee_errno_addr, callee_tls_addr;
int callee_tid;
long callee_calls;

void callee_probe(struct probe *out) {
    out->err = errno;
    out->tls = callee_tls;
    out->errno_addr = (uintptr_t)&errno;
    out->tls_addr = (uintptr_t)&callee_tls;
    out->self = (uintptr_t)pthread_self();
    out->calls = ++callee_calls;
    errno = 555;
    callee_tls++;
}

int main(void) {
    errno = 4242;
    callee_tls = 777;
    callee_self = (uintptr_t)pthread_self();
    callee_errno_addr = (uintptr_t)&errno;
    callee_tls_addr = (uintptr_t)&callee_tls;
    callee_tid = gettid();
    errno = 4242;
    atomic_store(&callee_ready, 1);
    while (!atomic_load(&callee_quit)) usleep(1000);
    int ok = errno == 555 && callee_tls == 777 + callee_calls;
    printf("prog_callee: errno=%d tls=%d after %ld probes run on another kernel thread: %s\n", errno,
           callee_tls, callee_calls, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
