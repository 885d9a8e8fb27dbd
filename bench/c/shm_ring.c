/* The floor for one stream of small messages through shared memory: a bare single-producer,
 * single-consumer ring of fixed slots between two processes, no headers, no credits, no
 * wake-ups (both sides spin). Issue 67 compares `bench raw --transport shm` with it.
 *
 *   cc -O2 -o shm_ring bench/c/shm_ring.c && ./shm_ring [SIZE] [COUNT] [copy|touch]
 *
 * copy: the consumer copies each message out (as a receiver that keeps it does);
 * touch: it reads one byte of each (as a zero-copy receiver that looks at it). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 256 /* 1 MiB of 4 KiB slots, as the shm fabric's default ring */

struct ring {
    _Alignas(64) _Atomic uint64_t head; /* next slot the consumer reads */
    _Alignas(64) _Atomic uint64_t tail; /* next slot the producer writes */
    _Alignas(64) unsigned char slots[];
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoul(argv[1], 0, 10) : 4096;
    uint64_t count = argc > 2 ? strtoull(argv[2], 0, 10) : 2000000;
    int copy = !(argc > 3 && strcmp(argv[3], "touch") == 0);
    struct ring *r = mmap(0, sizeof *r + SLOTS * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (r == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned char *buf = aligned_alloc(64, size);
    memset(buf, 7, size);
    pid_t child = fork();
    if (child == 0) { /* the consumer */
        uint64_t sum = 0;
        for (uint64_t i = 0; i < count; i++) {
            while (atomic_load_explicit(&r->tail, memory_order_acquire) == i) __builtin_ia32_pause();
            unsigned char *slot = r->slots + (i % SLOTS) * size;
            if (copy) memcpy(buf, slot, size), sum += buf[size - 1];
            else sum += slot[size - 1];
            atomic_store_explicit(&r->head, i + 1, memory_order_release);
        }
        _exit(sum == 7 * count ? 0 : 2);
    }
    double t0 = now();
    for (uint64_t i = 0; i < count; i++) {
        while (i - atomic_load_explicit(&r->head, memory_order_acquire) >= SLOTS) __builtin_ia32_pause();
        memcpy(r->slots + (i % SLOTS) * size, buf, size);
        atomic_store_explicit(&r->tail, i + 1, memory_order_release);
    }
    int status;
    waitpid(child, &status, 0);
    double secs = now() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "consumer saw wrong bytes\n"); return 1; }
    printf("{\"size\":%zu,\"messages\":%llu,\"consumer\":\"%s\",\"msgs_per_s\":%.0f,\"mb_per_s\":%.0f}\n", size,
           (unsigned long long)count, copy ? "copy" : "touch", count / secs, count * size / secs / 1e6);
    return 0;
}
