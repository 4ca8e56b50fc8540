/* Workload of benchmarks/bench_dbi.py: a branchy C loop (conditional branches, a call and
 * its return, an indirect call every 16 iterations), in units of ITERS iterations; after
 * each unit it prints "u NS" (the unit's CLOCK_MONOTONIC nanoseconds), for ever. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long ITERS = 2000000;
__attribute__((noinline)) static long mix(long h, long v) { return (h ^ v) * 31 + (v & 7); }
__attribute__((noinline)) static long alt(long h, long v) { return h + v * 3; }
static long (*table[2])(long, long) = {mix, alt};

int main(int argc, char **argv) {
    if (argc > 1) ITERS = atol(argv[1]);
    volatile long sink = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        long h = 1;
        for (long i = 0; i < ITERS; i++) {
            if (i & 1) h = mix(h, i);
            else if (i % 3 == 0) h ^= i;
            else h += i >> 2;
            if ((i & 15) == 0) h = table[(i >> 4) & 1](h, i);
        }
        sink += h;
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("u %ld\n", (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
    }
}
