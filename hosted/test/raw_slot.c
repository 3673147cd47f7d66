/* raw_slot.c: a client outside any host whose hello names another process's slot, for
 * run_slots.sh.
 *
 *   raw_slot SERVICE SLOT   connect to SERVICE with a hello that claims slot SLOT, its block at
 *                           the same offset there (its own arena sent along), and print the answer: "refused: ERRNO REASON" or
 *                           "welcomed"; exits 0 once answered
 *   raw_slot SERVICE grow OTHER
 *                           connect to OTHER as usual (its program maps our arena), then write
 *                           twice our arena's size into our arena's header and send SERVICE a
 *                           hello of that size, with a memfd that long; print the answer
 *   raw_slot guard SLOT GO  hold the map guard of slot SLOT (its byte of slots.lock), print
 *                           "guard: held", and let it go once the file GO exists */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rawpeer.h"

static int guard(unsigned slot, const char *go) {
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = RPAL_SLOT_MAP_GUARD + slot, .l_len = 1 };
    t_check(fcntl(rpal_g.slot_lockfd, F_OFD_SETLK, &fl) == 0, "lock the map guard of slot %u", slot);
    printf("guard: held\n");
    while (access(go, F_OK))
        usleep(10000);
    return 0;
}

int main(int argc, char **argv) {
    char why[200] = "";
    if (argc < 3) {
        fprintf(stderr, "usage: raw_slot SERVICE SLOT\n");
        return 2;
    }
    t_check(rpal_init(NULL) == 0, "rpal_init");
    int s;
    if (argc >= 4 && !strcmp(argv[1], "guard"))
        return guard((unsigned)strtoul(argv[2], NULL, 10), argv[3]);
    if (argc >= 4 && !strcmp(argv[2], "grow")) {
        int fd = rpal_connect(argv[3], NULL, 0);
        t_check(fd >= 0, "connect %s: %s", argv[3], rpal_strerror(fd));
        ((struct rpal_arena_hdr *)rpal_g.arena)->arena_size *= 2;
        s = raw_hello(argv[1], RAW_SIZE_MIX, 0);
    } else {
        s = raw_hello(argv[1], RAW_SLOT_MOVED, (unsigned)strtoul(argv[2], NULL, 10));
    }
    int err = raw_answer(s, why, sizeof why);
    if (err > 0)
        printf("refused: %d %s\n", err, why);
    else
        printf("welcomed\n");
    return 0;
}
