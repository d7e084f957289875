/* Open MPI's MPI_Allreduce (f32 sum), timed as strait-bench times strait: for each size, WARMUP
 * calls, a barrier, ITERS timed calls; a rank's time is the mean per call, the reported time the
 * maximum over ranks. algbw = size / time, busbw = algbw * 2(n-1)/n (nccl-tests). After timing,
 * one call on exact small integers checks the sums (#wrong). Rank 0 prints a table and, with
 * --json FILE, writes the rows.
 *   mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_allreduce -b 8 -e 256M -f 2 -n 20 -w 5
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* s) {
  char* end = NULL;
  size_t v = strtoull(s, &end, 10);
  switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    case '\0': break;
    default: fprintf(stderr, "mpi_allreduce: bad size '%s' (e.g. 8, 64K, 256M)\n", s); exit(2);
  }
  return v;
}

int main(int argc, char** argv) {
  size_t min_bytes = 8, max_bytes = 256u << 20, factor = 2;
  int iters = 20, warmup = 5;
  const char* json = NULL;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) { fprintf(stderr, "mpi_allreduce: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "-b")) min_bytes = parse_size(v);
    else if (!strcmp(a, "-e")) max_bytes = parse_size(v);
    else if (!strcmp(a, "-f")) factor = strtoull(v, NULL, 10);
    else if (!strcmp(a, "-n")) iters = atoi(v);
    else if (!strcmp(a, "-w")) warmup = atoi(v);
    else if (!strcmp(a, "--json")) json = v;
    else { fprintf(stderr, "mpi_allreduce: unknown option %s\n", a); return 2; }
    ++i;
  }
  if (min_bytes < 4 || min_bytes > max_bytes || factor < 2 || iters < 1 || warmup < 0) {
    fprintf(stderr, "mpi_allreduce: need 4 <= -b <= -e, -f >= 2, -n >= 1, -w >= 0\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t max_count = max_bytes / sizeof(float);
  float* send = calloc(max_count, sizeof(float));
  float* recv = calloc(max_count, sizeof(float));
  if (send == NULL || recv == NULL) { fprintf(stderr, "mpi_allreduce: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  FILE* out = NULL;
  if (rank == 0) {
    if (json != NULL && (out = fopen(json, "w")) == NULL) {
      fprintf(stderr, "mpi_allreduce: cannot write %s\n", json);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("# Open MPI MPI_Allreduce f32 sum, %d ranks, %d warm-up + %d timed calls; time: max over ranks\n", n, warmup, iters);
    printf("# %10s %12s %10s %8s %8s %6s\n", "size (B)", "count", "time (us)", "algbw", "busbw", "#wrong");
    if (out) fprintf(out, "{\"peer\": \"Open MPI\", \"ranks\": %d, \"iters\": %d, \"warmup\": %d, \"rows\": [", n, iters, warmup);
  }
  /* As nccl-tests (and strait-bench) do: warm up at the largest size, then the smallest. */
  size_t largest = min_bytes;
  while (largest * factor <= max_bytes) largest *= factor;
  for (size_t i = 0; i < largest / sizeof(float); ++i) send[i] = 1.0f;
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)(largest / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)(min_bytes / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int first = 1;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; ++i) send[i] = 1.0f;
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - start) / iters * 1e6, tmax = 0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    /* Check: rank r sends (r + 1) * (i % 7 + 1), exact in f32; the sum is n(n+1)/2 * (i % 7 + 1). */
    for (size_t i = 0; i < count; ++i) send[i] = (float)((rank + 1) * (int)(i % 7 + 1));
    memset(recv, 0xff, count * sizeof(float));
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0, wrong_all = 0;
    for (size_t i = 0; i < count; ++i) wrong += recv[i] != (float)(n * (n + 1) / 2 * (int)(i % 7 + 1));
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double algbw = (double)bytes / (tmax * 1e3), busbw = algbw * 2.0 * (n - 1) / n;
      printf("  %10zu %12zu %10.2f %8.2f %8.2f %6lld\n", bytes, count, tmax, algbw, busbw, wrong_all);
      fflush(stdout);
      if (out) fprintf(out, "%s\n  {\"bytes\": %zu, \"count\": %zu, \"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": %lld}",
                       first ? "" : ",", bytes, count, tmax, algbw, busbw, wrong_all);
      first = 0;
    }
    if (bytes > max_bytes / factor) break;
  }
  if (out) { fprintf(out, "\n]}\n"); fclose(out); }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
