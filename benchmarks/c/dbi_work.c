/* Workload of benchmarks/bench_dbi.py: a branchy C loop (conditional branches, a call and
 * its return, an indirect call every 16 iterations), in units of ITERS iterations, on a worker
 * thread (the main thread waits: DBI attaches while it is in a system call). It prints
 * "t TID" (the worker), then after each unit "u NS" (its CLOCK_MONOTONIC nanoseconds), for
 * ever. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long ITERS = 2000000;
__attribute__((noinline)) static long mix(long h, long v) { return (h ^ v) * 31 + (v & 7); }
__attribute__((noinline)) static long alt(long h, long v) { return h + v * 3; }
static long (*table[2])(long, long) = {mix, alt};

static void *work(void *arg) {
    (void)arg;
    volatile long sink = 0;
    printf("t %ld\n", (long)syscall(SYS_gettid));
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

int main(int argc, char **argv) {
    if (argc > 1) ITERS = atol(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, NULL);
    return 0;
}
