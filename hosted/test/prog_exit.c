/* prog_exit.c: an ordinary program that ends by calling exit() deep in a call chain, or from a
 * second thread (argv[1] == "thread"), with a status; the host must survive, run its handlers and
 * flush its output.  "pthread_exit": main ends with pthread_exit() while a second thread runs on
 * for 100 ms; the process must end with status 0 after that thread, as a plain one does.
 *   prog_exit MODE STATUS      MODE: "main", "thread" or "pthread_exit" */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int handler_ran;
static int status;

static void on_exit_handler(void) {
    handler_ran = 1;
    printf("prog_exit: handler ran before exit(%d)\n", status);
}

static volatile int sink;

static __attribute__((noinline)) void deep(int depth) {
    if (depth <= 0) {
        if (status >= 0) exit(status);
        return;
    }
    deep(depth - 1);
    sink++; /* not a tail call: keep the frames */
}

static void *late(void *arg) {
    (void)arg;
    usleep(100 * 1000);
    printf("prog_exit: the last thread returns\n");
    return NULL;
}

static void *thr(void *arg) {
    (void)arg;
    deep(3);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    status = atoi(argv[2]);
    atexit(on_exit_handler);
    printf("prog_exit: mode %s", argv[1]); /* unterminated: only a flush shows it */
    if (!strcmp(argv[1], "thread")) {
        pthread_t t;
        pthread_create(&t, NULL, thr, NULL);
        for (;;) pause(); /* main keeps running: the host stops waiting once exit() is called */
    }
    if (!strcmp(argv[1], "pthread_exit")) {
        pthread_t t;
        pthread_create(&t, NULL, late, NULL);
        pthread_exit(NULL);
    }
    deep(5);
    return 99; /* not reached */
}
