/* What one core copies per second out of another process's ordinary memory with process_vm_readv
 * (cross-memory attach: the single copy of strait's collectives on buffers that are not symmetric,
 * comm/transport/peer_memory.h), next to memcpy within the process, in the same run. A child
 * process fills a buffer of MiB mebibytes; the parent copies it ITERS times each way, 3 rounds.
 *   cc -O2 -o build/cma_copy bench/cma_copy.c && build/cma_copy [MiB] [ITERS]    (64, 10)
 * Profile the kernel's part with `perf record -g build/cma_copy`.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void* fresh(size_t bytes, int fill) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("cma_copy: mmap");
    exit(1);
  }
  memset(p, fill, bytes); /* every page touched: no first-touch faults in the timing */
  return p;
}

int main(int argc, char** argv) {
  const size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20;
  const int iters = argc > 2 ? atoi(argv[2]) : 10;
  if (bytes == 0 || iters < 1) {
    fprintf(stderr, "usage: cma_copy [MiB >= 1] [ITERS >= 1]\n");
    return 2;
  }
  int link[2];
  if (pipe(link) != 0) {
    perror("cma_copy: pipe");
    return 1;
  }
  const pid_t child = fork();
  if (child == 0) {
    void* own = fresh(bytes, 2);
    if (write(link[1], &own, sizeof own) != (ssize_t)sizeof own) _exit(1);
    pause(); /* until killed */
    _exit(0);
  }
  void* remote = NULL;
  if (read(link[0], &remote, sizeof remote) != (ssize_t)sizeof remote) {
    fprintf(stderr, "cma_copy: the child did not report its buffer\n");
    return 1;
  }
  char* src = fresh(bytes, 1);
  char* dst = fresh(bytes, 0);
  int failed = 0;
  printf("# %zu MiB, %d copies per figure, GB/s\n", bytes >> 20, iters);
  for (int round = 0; round < 3 && !failed; ++round) {
    double t = now();
    for (int i = 0; i < iters; ++i) memcpy(dst, src, bytes);
    const double copy = (double)bytes * iters / (now() - t) / 1e9;
    t = now();
    for (int i = 0; i < iters && !failed; ++i) {
      struct iovec local = {dst, bytes};
      struct iovec peer = {remote, bytes};
      failed = process_vm_readv(child, &local, 1, &peer, 1, 0) != (ssize_t)bytes;
    }
    const double cma = (double)bytes * iters / (now() - t) / 1e9;
    if (!failed) printf("memcpy %.2f  process_vm_readv %.2f  (%.2fx)\n", copy, cma, cma / copy);
  }
  if (failed) perror("cma_copy: process_vm_readv (ptrace permission? run as the same user)");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return failed;
}
