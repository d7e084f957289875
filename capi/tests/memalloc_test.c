/* Symmetric memory through the C API (straitMemAlloc / straitMemFree), from C99, one rank per
 * process: `strait run -n N -- capi_memalloc_test SCENARIO` (capi/tests/CMakeLists.txt runs each
 * on 2 and 4 ranks).
 *
 *   collectives  allreduce (out of place and in place), reduce-scatter, allgather and alltoall on
 *                straitMemAlloc'd buffers against references computed here in double; the stats'
 *                symmetricBytes grows by what each collective read in place from its peers, and
 *                not at all for the same allreduce on malloc'd buffers; a malloc'd send buffer on
 *                odd ranks mixes with symmetric ones elsewhere.
 *   errors       ranks asking for different sizes all fail with straitInvalidArgument naming the
 *                rule (no hang), and the communicator still works; size 0, NULL out-pointer,
 *                destroyed communicator; straitMemFree of NULL, of malloc'd memory, of a pointer
 *                inside a buffer, twice, and with another communicator.
 *   leak         each buffer holds one memfd ("memfd:strait-symmetric" in /proc/self/fd) and its
 *                mappings; straitMemFree drops one, straitCommDestroy the rest: none is left.
 *   dead_peer    the last rank exits holding a buffer the others map: their allreduce on
 *                symmetric buffers fails with straitPeerLost naming it, long before the timeout.
 * A rank prints "rank R: ok SCENARIO (N checks)" and exits 0, or prints what failed and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strait/strait.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static int g_size = 0;
static long g_checks = 0;

static void fail(int line, const char* what, const char* detail) {
  printf("rank %d: FAILED at line %d: %s%s%s\n", g_rank, line, what, detail ? ": " : "",
         detail ? detail : "");
  fflush(stdout);
  exit(1);
}

#define CHECK(cond)                           \
  do {                                        \
    ++g_checks;                               \
    if (!(cond)) fail(__LINE__, #cond, NULL); \
  } while (0)
#define OK(call)                                                               \
  do {                                                                         \
    straitResult_t rc_ = (call);                                               \
    ++g_checks;                                                                \
    if (rc_ != straitSuccess) fail(__LINE__, #call, straitGetLastError(NULL)); \
  } while (0)
/* A call that must fail with `code`, with this thread's message containing `text`. */
#define FAILS(code, text, call)                                               \
  do {                                                                        \
    straitResult_t rc_ = (call);                                              \
    ++g_checks;                                                               \
    if (rc_ != (code)) fail(__LINE__, #call, straitGetErrorString(rc_));      \
    if (strstr(straitGetLastError(NULL), (text)) == NULL) {                   \
      fail(__LINE__, "message lacks \"" text "\"", straitGetLastError(NULL)); \
    }                                                                         \
  } while (0)

/* The single-copy allreduce is a rule (strait.h, Symmetric memory): on here from 1 MiB. */
static straitComm_t init_world(void) {
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  straitComm_t comm = NULL;
  config.timeoutMs = 60000;
  config.tune = "allreduce:1M-inf:single_copy";
  OK(straitCommInitFromEnv(&comm, &config));
  OK(straitCommUserRank(comm, &g_rank));
  OK(straitCommCount(comm, &g_size));
  return comm;
}

static uint64_t symmetric_bytes(straitComm_t comm) {
  straitStats_t s = STRAIT_STATS_INITIALIZER;
  OK(straitCommGetStats(comm, &s));
  return s.symmetricBytes;
}

/* Rank r's element i: small integers and quarters, so float sums over <= 4 ranks are exact. */
static double value(int r, size_t i) {
  return (double)((i * 13u + (size_t)r * 7u) % 101u) - 50.0 + 0.25 * r;
}

static double sum_over_ranks(size_t i) {
  double s = 0;
  int r;
  for (r = 0; r < g_size; ++r) s += value(r, i);
  return s;
}

static void fill(float* x, int r, size_t offset, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = (float)value(r, offset + i);
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes);
  if (p == NULL) fail(__LINE__, "malloc", NULL);
  return p;
}

/* ---- collectives ---- */

static void check_allreduce(straitComm_t comm) {
  const size_t n = 300007; /* 1.2 MB: the single-copy rule; not divisible by the world size */
  const uint64_t p = (uint64_t)g_size;
  const uint64_t chunk_bytes = (uint64_t)(n / (size_t)g_size) * sizeof(float);
  float *x = NULL, *y = NULL, *plain = xmalloc(n * sizeof(float));
  uint64_t before;
  size_t i, bad = 0;
  int pass;

  OK(straitMemAlloc(comm, n * sizeof(float), (void**)&x));
  OK(straitMemAlloc(comm, n * sizeof(float), (void**)&y));
  CHECK(x != NULL && y != NULL && x != y);
  CHECK(((uintptr_t)x % 4096u) == 0);
  CHECK(x[n - 1] == 0.0F && y[0] == 0.0F); /* zero-filled */
  for (pass = 0; pass < 2; ++pass) {       /* out of place, then in place */
    float* out = pass == 0 ? y : x;
    fill(x, g_rank, 0, n);
    before = symmetric_bytes(comm);
    OK(straitAllReduce(x, out, (int64_t)n, straitFloat32, straitSum, comm, NULL));
    /* Chunk `rank` of every peer's input, then every peer's reduced chunk: read in place. */
    CHECK(symmetric_bytes(comm) - before >= 2 * chunk_bytes * (p - 1));
    for (i = 0; i < n; ++i) bad += fabs((double)out[i] - sum_over_ranks(i)) > 1e-3;
    CHECK(bad == 0);
  }
  /* The same allreduce on malloc'd memory is correct too, and reads nothing in place. */
  fill(plain, g_rank, 0, n);
  before = symmetric_bytes(comm);
  OK(straitAllReduce(plain, plain, (int64_t)n, straitFloat32, straitSum, comm, NULL));
  CHECK(symmetric_bytes(comm) == before);
  for (i = 0; i < n; ++i) bad += fabs((double)plain[i] - sum_over_ranks(i)) > 1e-3;
  CHECK(bad == 0);
  /* Mixed: odd ranks send from malloc'd memory, even ranks from a symmetric buffer. */
  fill(plain, g_rank, 0, n);
  fill(x, g_rank, 0, n);
  OK(straitAllReduce(g_rank % 2 ? (const void*)plain : (const void*)x, y, (int64_t)n, straitFloat32,
                     straitSum, comm, NULL));
  for (i = 0; i < n; ++i) bad += fabs((double)y[i] - sum_over_ranks(i)) > 1e-3;
  CHECK(bad == 0);
  OK(straitMemFree(comm, x));
  OK(straitMemFree(comm, y));
  free(plain);
}

static void check_block_collectives(straitComm_t comm) {
  const size_t k = 20011; /* elements per block: 80 KB, over the single-copy rules' 64 KiB */
  const size_t P = (size_t)g_size;
  const uint64_t block = (uint64_t)k * sizeof(float);
  float *send = NULL, *recv = NULL;
  uint64_t before;
  size_t i, j, bad = 0;

  OK(straitMemAlloc(comm, P * k * sizeof(float), (void**)&send));
  OK(straitMemAlloc(comm, P * k * sizeof(float), (void**)&recv));

  /* reduce-scatter: block j of send to rank j; recv = sum over ranks of block `rank`. */
  fill(send, g_rank, 0, P * k);
  before = symmetric_bytes(comm);
  OK(straitReduceScatter(send, recv, (int64_t)k, straitFloat32, straitSum, comm, NULL));
  CHECK(symmetric_bytes(comm) - before >= block * (P - 1));
  for (i = 0; i < k; ++i)
    bad += fabs((double)recv[i] - sum_over_ranks((size_t)g_rank * k + i)) > 1e-3;
  CHECK(bad == 0);

  /* allgather: recv block j = rank j's send (its first k elements). */
  before = symmetric_bytes(comm);
  OK(straitAllGather(send, recv, (int64_t)k, straitFloat32, comm, NULL));
  CHECK(symmetric_bytes(comm) - before == block * (P - 1));
  for (j = 0; j < P; ++j) {
    for (i = 0; i < k; ++i) bad += (double)recv[j * k + i] != value((int)j, i);
  }
  CHECK(bad == 0);

  /* alltoall: recv block j = block `rank` of rank j's send. */
  before = symmetric_bytes(comm);
  OK(straitAllToAll(send, recv, (int64_t)k, straitFloat32, comm, NULL));
  CHECK(symmetric_bytes(comm) - before == block * (P - 1));
  for (j = 0; j < P; ++j) {
    for (i = 0; i < k; ++i) bad += (double)recv[j * k + i] != value((int)j, (size_t)g_rank * k + i);
  }
  CHECK(bad == 0);

  OK(straitMemFree(comm, send));
  OK(straitMemFree(comm, recv));
}

static void scenario_collectives(void) {
  straitComm_t comm = init_world();
  check_allreduce(comm);
  check_block_collectives(comm);
  OK(straitCommDestroy(comm));
}

/* ---- errors ---- */

static void scenario_errors(void) {
  straitComm_t comm = init_world();
  straitComm_t dup = NULL;
  straitComm_t dead = NULL;
  void* p = (void*)&g_rank; /* anything but NULL: straitMemAlloc must set it to NULL */
  char* buf = NULL;
  int* plain = xmalloc(64);

  /* Different sizes: every rank fails saying so, within the timeout, and goes on. */
  FAILS(straitInvalidArgument, "must ask for the same size",
        straitMemAlloc(comm, g_rank == g_size - 1 ? 4096 : 8192, &p));
  CHECK(p == NULL);
  CHECK(strstr(straitGetLastError(comm), "straitMemAlloc: InvalidArgument") != NULL);
  OK(straitBarrier(comm));
  FAILS(straitInvalidArgument, "0 bytes", straitMemAlloc(comm, 0, &p));
  FAILS(straitInvalidArgument, "ptr", straitMemAlloc(comm, 4096, NULL));

  OK(straitMemAlloc(comm, 3 * 4096, (void**)&buf));
  CHECK(buf != NULL);
  FAILS(straitInvalidArgument, "ptr is NULL", straitMemFree(comm, NULL));
  FAILS(straitInvalidArgument, "not a live straitMemAlloc buffer", straitMemFree(comm, plain));
  FAILS(straitInvalidArgument, "8 bytes into a 12288-byte", straitMemFree(comm, buf + 8));
  OK(straitCommSplit(comm, 0, 0, &dup));
  FAILS(straitInvalidArgument, "allocated on another communicator", straitMemFree(dup, buf));
  FAILS(straitInvalidArgument, "comm is NULL", straitMemFree(NULL, buf));
  buf[0] = 1; /* still ours */
  OK(straitMemFree(comm, buf));
  FAILS(straitInvalidArgument, "freed already", straitMemFree(comm, buf));

  /* A destroyed communicator: no allocation, and the handle is never reused. */
  OK(straitCommSplit(comm, 0, 0, &dead));
  OK(straitCommDestroy(dead));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitMemAlloc(dead, 4096, &p));

  /* Both communicators still work: an allocation and a collective on each. */
  OK(straitMemAlloc(dup, 4096, (void**)&buf));
  ((float*)buf)[0] = (float)(g_rank + 1);
  OK(straitAllReduce(buf, buf, 1, straitFloat32, straitSum, dup, NULL));
  CHECK(((float*)buf)[0] == (float)(g_size * (g_size + 1) / 2));
  OK(straitMemFree(dup, buf));
  OK(straitBarrier(comm));
  OK(straitCommDestroy(dup));
  OK(straitCommDestroy(comm));
  free(plain);
}

/* ---- leak ---- */

/* Descriptors of this process that are strait's symmetric memfds. */
static int symmetric_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  char path[320], target[256];
  int n = 0;
  if (d == NULL) fail(__LINE__, "opendir /proc/self/fd", NULL);
  while ((e = readdir(d)) != NULL) {
    ssize_t len;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    n += strncmp(target, "/memfd:strait-symmetric", 23) == 0;
  }
  closedir(d);
  return n;
}

/* Lines of /proc/self/maps mapping a symmetric memfd (this rank's and its peers'). */
static int symmetric_mappings(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  if (f == NULL) fail(__LINE__, "fopen /proc/self/maps", NULL);
  while (fgets(line, sizeof line, f) != NULL) n += strstr(line, "memfd:strait-symmetric") != NULL;
  fclose(f);
  return n;
}

static void scenario_leak(void) {
  const int fds0 = symmetric_fds();
  const int maps0 = symmetric_mappings();
  straitComm_t comm = init_world();
  void* b[3] = {NULL, NULL, NULL};
  int i;

  CHECK(fds0 == 0 && maps0 == 0);
  for (i = 0; i < 3; ++i) OK(straitMemAlloc(comm, (size_t)(i + 1) << 20, &b[i]));
  CHECK(symmetric_fds() == 3); /* this rank's; the peers' descriptors are closed once mapped */
  CHECK(symmetric_mappings() == 3 * g_size);
  OK(straitMemFree(comm, b[1]));
  CHECK(symmetric_fds() == 2);
  CHECK(symmetric_mappings() == 2 * g_size);
  OK(straitBarrier(comm));
  OK(straitCommDestroy(comm)); /* frees b[0] and b[2] */
  CHECK(symmetric_fds() == 0);
  CHECK(symmetric_mappings() == 0);
}

/* ---- dead_peer ---- */

/* The last rank dies (exit status 0, so the launcher lets the others go on) holding a symmetric
 * buffer that the others have mapped; their allreduce on symmetric buffers fails with
 * straitPeerLost naming it, well within the timeout. */
static void scenario_dead_peer(void) {
  straitComm_t comm = init_world();
  const size_t n = 300007;
  float* x = NULL;
  double t0;
  straitResult_t rc;
  OK(straitMemAlloc(comm, n * sizeof(float), (void**)&x));
  OK(straitBarrier(comm));
  if (g_rank == g_size - 1) {
    printf("rank %d: ok dead_peer (dying)\n", g_rank);
    fflush(stdout);
    _exit(0);
  }
  fill(x, g_rank, 0, n);
  t0 = (double)time(NULL);
  rc = straitAllReduce(x, x, (int64_t)n, straitFloat32, straitSum, comm, NULL);
  ++g_checks;
  if (rc != straitPeerLost) fail(__LINE__, "allreduce with a dead peer", straitGetErrorString(rc));
  CHECK((double)time(NULL) - t0 < 30.0); /* the timeout is 60 s */
  {
    char name[32];
    snprintf(name, sizeof name, "rank %d", g_size - 1);
    CHECK(strstr(straitGetLastError(comm), name) != NULL);
  }
  printf("rank %d: %s\n", g_rank, straitGetLastError(comm));
  OK(straitCommDestroy(comm)); /* frees x; the dead peer's mapping goes too */
  CHECK(symmetric_mappings() == 0);
}

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "";
  if (strcmp(scenario, "collectives") == 0) {
    scenario_collectives();
  } else if (strcmp(scenario, "errors") == 0) {
    scenario_errors();
  } else if (strcmp(scenario, "leak") == 0) {
    scenario_leak();
  } else if (strcmp(scenario, "dead_peer") == 0) {
    scenario_dead_peer();
  } else {
    fprintf(stderr, "usage: %s collectives|errors|leak|dead_peer\n", argv[0]);
    return 2;
  }
  printf("rank %d: ok %s (%ld checks)\n", g_rank, scenario, g_checks);
  return 0;
}
