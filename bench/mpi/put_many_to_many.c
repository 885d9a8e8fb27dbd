/* The timeslice-building pattern with MPI one-sided puts, the peer of `wirespeed fles run` in
 * bench/fles_compare.sh: the first INPUTS ranks put contributions of BYTES into windows that
 * the other ranks expose (a ring of RING bytes per input, as the compute nodes' data rings),
 * in an offset round robin (input i's t-th contribution goes to compute rank (i + t) mod C,
 * so no two inputs target one rank at once), under a passive-target lock_all epoch, flushing
 * every DEPTH puts. Prints aggregate GB/s (10^9 bytes a second) over the slowest input.
 *
 * Usage: mpirun -np N put_many_to_many INPUTS BYTES COUNT [RING [DEPTH]]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4) {
    if (rank == 0) fprintf(stderr, "usage: put_many_to_many INPUTS BYTES COUNT [RING [DEPTH]]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int inputs = atoi(argv[1]);
  long bytes = atol(argv[2]);
  long count = atol(argv[3]);
  long ring = argc > 4 ? atol(argv[4]) : 32L << 20;
  long depth = argc > 5 ? atol(argv[5]) : 8;
  int computes = size - inputs;
  if (inputs < 1 || computes < 1 || bytes < 1 || ring < bytes) {
    if (rank == 0) fprintf(stderr, "need 1 <= INPUTS < ranks and BYTES <= RING\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long slots = ring / bytes;
  int is_input = rank < inputs;
  MPI_Aint window = is_input ? 0 : (MPI_Aint)inputs * slots * bytes;
  void *base;
  MPI_Win win;
  MPI_Win_allocate(window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  char *src = malloc(bytes);
  for (long k = 0; k < bytes; ++k) src[k] = (char)(k * 31 + rank);
  MPI_Win_lock_all(0, win);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (is_input) {
    for (long t = 0; t < count; ++t) {
      int target = inputs + (int)((rank + t) % computes);
      long slot = (t / computes) % slots;
      MPI_Aint at = ((MPI_Aint)rank * slots + slot) * bytes;
      MPI_Put(src, (int)bytes, MPI_BYTE, target, at, (int)bytes, MPI_BYTE, win);
      if ((t + 1) % depth == 0) MPI_Win_flush_all(win);
    }
    MPI_Win_flush_all(win);
  }
  double elapsed = MPI_Wtime() - t0, slowest;
  MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Win_unlock_all(win);
  if (rank == 0)
    printf("%d inputs, %d compute ranks, %ld x %ld bytes each: %.3f GB/s\n", inputs, computes, count, bytes,
           (double)inputs * count * bytes / slowest / 1e9);
  MPI_Win_free(&win);
  free(src);
  MPI_Finalize();
  return 0;
}
