/* raw_slot.c: a client outside any host whose hello names another process's slot, for
 * run_slots.sh.
 *
 *   raw_slot SERVICE SLOT   connect to SERVICE with a hello that claims slot SLOT, its block at
 *                           the same offset there (its own arena sent along), and print the answer: "refused: ERRNO REASON" or
 *                           "welcomed"; exits 0 once answered */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rawpeer.h"

int main(int argc, char **argv) {
    char why[200] = "";
    if (argc < 3) {
        fprintf(stderr, "usage: raw_slot SERVICE SLOT\n");
        return 2;
    }
    t_check(rpal_init(NULL) == 0, "rpal_init");
    int s = raw_hello(argv[1], RAW_SLOT_MOVED, (unsigned)strtoul(argv[2], NULL, 10));
    int err = raw_answer(s, why, sizeof why);
    if (err > 0)
        printf("refused: %d %s\n", err, why);
    else
        printf("welcomed\n");
    return 0;
}
