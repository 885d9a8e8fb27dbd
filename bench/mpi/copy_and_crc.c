/* The ceiling of timeslice building on this host: what one core does per byte that every
 * builder must do at least once. MPI_Put between ranks on one host is one copy; a timeslice
 * builder that checks its data also reads every byte for its CRC-32C, one microslice at a
 * time. Prints one core's copy rate over 64 KiB pieces and CRC-32C rate (SSE4.2) over
 * microslices of argv[1] bytes (default 480, bench/fles_compare.sh's), in 32 MiB rings (out
 * of cache, as a compute node's rings are), the median of 5 passes of 4 GiB each.
 * Build: cc -O2 -msse4.2 -o copy_and_crc copy_and_crc.c */
#include <nmmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE 65536
#define RING (32u << 20)
#define TOTAL (4ull << 30)
#define PASSES 5

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Three independent CRC chains over the piece's thirds, as fast CRC-32C code runs them (the
 * instruction's latency is three cycles); combining them costs a few cycles per piece. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
  size_t third = n / 24 * 8;
  uint64_t a = ~0u, b = ~0u, c = ~0u, w;
  for (size_t i = 0; i < third; i += 8) {
    memcpy(&w, p + i, 8);
    a = _mm_crc32_u64(a, w);
    memcpy(&w, p + third + i, 8);
    b = _mm_crc32_u64(b, w);
    memcpy(&w, p + 2 * third + i, 8);
    c = _mm_crc32_u64(c, w);
  }
  for (size_t i = 3 * third; i + 8 <= n; i += 8) {
    memcpy(&w, p + i, 8);
    c = _mm_crc32_u64(c, w);
  }
  return (uint32_t)(a ^ b ^ c);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t micro = argc > 1 ? strtoul(argv[1], NULL, 10) : 480;
  if (micro < 8 || micro > PIECE) return 2;
  uint8_t *src = malloc(RING), *dst = malloc(RING);
  for (size_t i = 0; i < RING; i++) src[i] = (uint8_t)(i * 31 % 251), dst[i] = 0;
  double copy[PASSES], crc[PASSES];
  volatile uint32_t sink = 0;
  for (int k = 0; k < PASSES; k++) {
    double t = now();
    for (uint64_t done = 0, at = 0; done < TOTAL; done += PIECE, at = (at + PIECE) % RING)
      memcpy(dst + at, src + at, PIECE);
    copy[k] = TOTAL / (now() - t) / 1e9;
    t = now();
    for (uint64_t done = 0, at = 0; done < TOTAL; done += PIECE, at = (at + PIECE) % RING)
      for (size_t m = 0; m + micro <= PIECE; m += micro) sink ^= crc32c(dst + at + m, micro);
    crc[k] = TOTAL / (now() - t) / 1e9;
  }
  qsort(copy, PASSES, sizeof(double), by_value);
  qsort(crc, PASSES, sizeof(double), by_value);
  printf("copy %.2f GB/s, crc32c of %zu-byte microslices %.2f GB/s per core\n", copy[PASSES / 2], micro,
         crc[PASSES / 2]);
  return (int)(sink & 0) /* keeps the CRCs */;
}
