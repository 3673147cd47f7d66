/* prog_cut.c: prints what its library's constructor read (2 when the library was whole). */
#include <stdio.h>

extern unsigned long cutlib_sum;

int main(void) {
    printf("sum %lu\n", cutlib_sum);
    return cutlib_sum == 2 ? 0 : 1;
}
