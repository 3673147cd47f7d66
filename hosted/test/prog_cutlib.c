/* prog_cutlib.c: prog_cut's shared library: 4 MiB of read-only data in its file, which its
 * constructor reads half a second into the load: time for a test to cut the file short first. */
#include <unistd.h>

#define PAGES 1024

static const unsigned char data[PAGES][4096] = { [0][0] = 1, [PAGES - 1][0] = 1 };
unsigned long cutlib_sum;

__attribute__((constructor)) static void cutlib_init(void) {
    usleep(500000);
    for (int i = 0; i < PAGES; i++) cutlib_sum += ((volatile const unsigned char *)data[i])[0];
}
