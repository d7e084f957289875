/* The C API (strait.h) from C99, as a C program uses it: one rank per process, started by
 * `strait run -n N -- capi_test SCENARIO` (capi/tests/CMakeLists.txt runs each on 2 and 3 ranks).
 * Every function of strait.h is called; results are checked against references computed here.
 *
 *   collectives   every collective, blocking and Async, every dtype and op of allreduce, against
 *                 references computed in double; compressed allreduce (int8, topk with error
 *                 feedback, powersgd with matrices), bit-identical on every rank; point to point;
 *                 split (with NOCOLOR), stats, timeouts, version and error strings.
 *   init          straitCommInitRank with the launcher's address and port; exits with a
 *                 communicator and a pending request left.
 *   store         straitCommInitStore over a file store written here (with and without its wait
 *                 callback), and stores whose callbacks fail.
 *   mismatch      rank 1 allreduces one element more than the others: straitMismatch, naming the
 *                 operation, its sequence number and the ranks.
 *   timeout       rank 1 never calls the allreduce: the others fail with straitTimeout naming it.
 *   abort         straitCommAbort from another thread ends a blocking receive and a wait.
 *   wait_timeout  straitWait with a timeout on a receive nobody sends.
 *   arguments     NULL, destroyed, foreign and mistyped handles, bad enums, negative counts, bad
 *                 structs: straitInvalidArgument with a message, and the communicator still works.
 *   device        the collectives on GPU buffers with a CUDA stream (exit 77, skipped, without
 *                 one GPU per rank or a CUDA build; a failure without any GPU when
 *                 STRAIT_REQUIRE_GPU=1).
 * A rank prints "rank R: ok SCENARIO (N checks)" and exits 0, or prints what failed and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strait/strait.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* STRAIT_REQUIRE_GPU is 1 (require_gpu.cpp: through the parameter registry). */
int strait_test_gpu_required(void);

#ifdef STRAIT_CAPI_TEST_CUDA
#include <cuda_runtime.h>
#endif

static int g_rank = -1;
static int g_size = 0;
static long g_checks = 0;

static void fail(const char* file, int line, const char* what, const char* detail) {
  printf("rank %d: FAILED at %s:%d: %s%s%s\n", g_rank, file, line, what, detail ? ": " : "",
         detail ? detail : "");
  fflush(stdout);
  exit(1);
}

static void check_contains(const char* file, int line, const char* text, const char* part);

#define CHECK(cond)                                     \
  do {                                                  \
    ++g_checks;                                         \
    if (!(cond)) fail(__FILE__, __LINE__, #cond, NULL); \
  } while (0)
/* A call that must succeed; on failure prints the library's message. */
#define OK(call)                                                                         \
  do {                                                                                   \
    straitResult_t rc_ = (call);                                                         \
    ++g_checks;                                                                          \
    if (rc_ != straitSuccess) fail(__FILE__, __LINE__, #call, straitGetLastError(NULL)); \
  } while (0)
/* A call that must fail with `code`, with a message (this thread's) containing `text`. */
#define FAILS(code, text, call)                                                    \
  do {                                                                             \
    straitResult_t rc_ = (call);                                                   \
    ++g_checks;                                                                    \
    if (rc_ != (code)) fail(__FILE__, __LINE__, #call, straitGetErrorString(rc_)); \
    check_contains(__FILE__, __LINE__, straitGetLastError(NULL), (text));          \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* ---- Element access, for every dtype ---- */

static size_t dtype_size(straitDataType_t t) {
  switch (t) {
    case straitInt8:
    case straitUint8: return 1;
    case straitFloat16:
    case straitBfloat16: return 2;
    case straitInt32:
    case straitFloat32: return 4;
    case straitInt64:
    case straitFloat64: return 8;
    default: return 0;
  }
}

static int is_float(straitDataType_t t) {
  return t == straitFloat16 || t == straitBfloat16 || t == straitFloat32 || t == straitFloat64;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* binary16 of a float that it represents exactly (the test's values), and back. */
static uint16_t to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  int exp = (int)((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = (u >> 13) & 0x3ffu;
  if ((u & 0x7fffffffu) == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}
static float from_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0 && mant == 0) return bits_f32(sign);
  if (exp == 0) return (sign ? -1.0f : 1.0f) * (float)mant * (1.0f / 16777216.0f);
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static void put(void* buf, straitDataType_t t, size_t i, double v) {
  switch (t) {
    case straitInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case straitUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case straitInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case straitInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case straitFloat16: ((uint16_t*)buf)[i] = to_f16((float)v); break;
    case straitBfloat16: ((uint16_t*)buf)[i] = (uint16_t)(f32_bits((float)v) >> 16); break;
    case straitFloat32: ((float*)buf)[i] = (float)v; break;
    case straitFloat64: ((double*)buf)[i] = v; break;
    default: break;
  }
}

static double get(const void* buf, straitDataType_t t, size_t i) {
  switch (t) {
    case straitInt8: return ((const int8_t*)buf)[i];
    case straitUint8: return ((const uint8_t*)buf)[i];
    case straitInt32: return ((const int32_t*)buf)[i];
    case straitInt64: return (double)((const int64_t*)buf)[i];
    case straitFloat16: return from_f16(((const uint16_t*)buf)[i]);
    case straitBfloat16: return bits_f32((uint32_t)((const uint16_t*)buf)[i] << 16);
    case straitFloat32: return ((const float*)buf)[i];
    case straitFloat64: return ((const double*)buf)[i];
    default: return NAN;
  }
}

/* Rank r's element i: small integers, exact in every dtype, so sums and products are exact. */
static double value(int r, size_t i) {
  return (double)((r + (int)i) % 5 + 1);
}

/* The reference of op over all ranks of value(r, i), in double. */
static double reference(straitRedOp_t op, size_t i) {
  double acc = value(0, i);
  int r;
  for (r = 1; r < g_size; ++r) {
    double v = value(r, i);
    switch (op) {
      case straitSum:
      case straitAvg: acc += v; break;
      case straitProd: acc *= v; break;
      case straitMax: acc = v > acc ? v : acc; break;
      case straitMin: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  return op == straitAvg ? acc / g_size : acc;
}

/* Avg is rounded in the element type: the tolerance of each. */
static double tolerance(straitDataType_t t, straitRedOp_t op) {
  if (op != straitAvg) return 0.0;
  switch (t) {
    case straitFloat16: return 4e-3;
    case straitBfloat16: return 2e-2;
    case straitFloat32: return 1e-6;
    default: return 1e-14;
  }
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes == 0 ? 1 : bytes);
  if (!p) fail(__FILE__, __LINE__, "malloc", NULL);
  return p;
}

/* FNV-1a of bytes. */
static int64_t hash_of(const void* data, size_t bytes) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i;
  for (i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return (int64_t)h;
}

/* Whether every rank of comm holds the same bytes. */
static int same_on_every_rank(straitComm_t comm, const void* data, size_t bytes) {
  int64_t h = hash_of(data, bytes);
  int64_t lo = 0;
  int64_t hi = 0;
  OK(straitAllReduce(&h, &lo, 1, straitInt64, straitMin, comm, NULL));
  OK(straitAllReduce(&h, &hi, 1, straitInt64, straitMax, comm, NULL));
  return lo == hi && lo == h;
}

static straitComm_t init_world(int64_t timeout_ms) {
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  straitComm_t comm = NULL;
  int rank = -1;
  int size = 0;
  config.timeoutMs = timeout_ms;
  OK(straitCommInitFromEnv(&comm, &config));
  CHECK(comm != NULL);
  OK(straitCommUserRank(comm, &rank));
  OK(straitCommCount(comm, &size));
  CHECK(rank == atoi(getenv("RANK")));
  CHECK(size == atoi(getenv("WORLD_SIZE")));
  g_rank = rank;
  g_size = size;
  return comm;
}

static int contains(const char* text, const char* part) {
  return text != NULL && strstr(text, part) != NULL;
}

static void check_contains(const char* file, int line, const char* text, const char* part) {
  char what[256];
  ++g_checks;
  if (contains(text, part)) return;
  snprintf(what, sizeof what, "message lacks \"%s\"", part);
  fail(file, line, what, text);
}
#define CHECK_CONTAINS(text, part) check_contains(__FILE__, __LINE__, (text), (part))

/* ---- collectives ---- */

static const straitDataType_t kTypes[] = {straitInt8,    straitUint8,   straitInt32,
                                          straitInt64,   straitFloat16, straitBfloat16,
                                          straitFloat32, straitFloat64};
static const straitRedOp_t kOps[] = {straitSum, straitProd, straitMax, straitMin, straitAvg};
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static void fill(void* buf, straitDataType_t t, int r, size_t offset, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) put(buf, t, i, value(r, offset + i));
}

/* Whether buf[i] == value(r, offset + i) for i < n. */
static int holds(const void* buf, straitDataType_t t, int r, size_t offset, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    if (get(buf, t, i) != value(r, offset + i)) return 0;
  }
  return 1;
}

static void check_allreduce(straitComm_t comm) {
  const size_t n = 37; /* not a multiple of any world size */
  size_t t;
  size_t o;
  size_t i;
  for (t = 0; t < COUNT_OF(kTypes); ++t) {
    for (o = 0; o < COUNT_OF(kOps); ++o) {
      straitDataType_t type = kTypes[t];
      straitRedOp_t op = kOps[o];
      size_t bytes = n * dtype_size(type);
      unsigned char* send = (unsigned char*)xmalloc(bytes);
      unsigned char* recv = (unsigned char*)xmalloc(bytes);
      if (op == straitAvg && !is_float(type)) {
        fill(send, type, g_rank, 0, n);
        FAILS(straitInvalidArgument, "avg of",
              straitAllReduce(send, recv, (int64_t)n, type, op, comm, NULL));
      } else {
        fill(send, type, g_rank, 0, n);
        OK(straitAllReduce(send, recv, (int64_t)n, type, op, comm, NULL));
        for (i = 0; i < n; ++i) {
          double want = reference(op, i);
          double got = get(recv, type, i);
          if (fabs(got - want) > tolerance(type, op) * fabs(want)) {
            char detail[128];
            sprintf(detail, "dtype %d op %d element %u: %g, want %g", (int)type, (int)op,
                    (unsigned)i, got, want);
            fail(__FILE__, __LINE__, "allreduce result", detail);
          }
        }
        ++g_checks;
        CHECK(same_on_every_rank(comm, recv, bytes));
        /* In place gives the same bits. */
        fill(send, type, g_rank, 0, n);
        OK(straitAllReduce(send, send, (int64_t)n, type, op, comm, NULL));
        CHECK(memcmp(send, recv, bytes) == 0);
      }
      free(send);
      free(recv);
    }
  }
  /* Count 0 is a valid (empty) operation, NULL buffers allowed. */
  OK(straitAllReduce(NULL, NULL, 0, straitFloat32, straitSum, comm, NULL));
}

static void check_async_allreduce(straitComm_t comm) {
  enum { n = 1000 };
  static float send[n], recv[n];
  straitRequest_t request = NULL;
  straitResult_t rc;
  size_t i;
  fill(send, straitFloat32, g_rank, 0, n);
  OK(straitAllReduceAsync(send, recv, n, straitFloat32, straitSum, comm, NULL, &request));
  CHECK(request != NULL);
  /* Poll with straitTest until done (never blocks), then wait. */
  while ((rc = straitTest(request)) == straitInProgress) {
  }
  CHECK(rc == straitSuccess);
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  CHECK(strcmp(straitRequestGetError(request), "") == 0);
  OK(straitRequestFree(request));
  for (i = 0; i < n; ++i) CHECK(recv[i] == (float)reference(straitSum, i));
  /* Several in flight at once, completed in order; wait with a generous timeout. */
  {
    straitRequest_t r[3];
    static double a[3][n], b[3][n];
    int k;
    for (k = 0; k < 3; ++k) {
      fill(a[k], straitFloat64, g_rank + k, 0, n);
      OK(straitAllReduceAsync(a[k], b[k], n, straitFloat64, straitMax, comm, NULL, &r[k]));
    }
    for (k = 2; k >= 0; --k) {
      OK(straitWait(r[k], 30000));
      OK(straitRequestFree(r[k]));
    }
    for (k = 0; k < 3; ++k) {
      for (i = 0; i < n; ++i) {
        double want = 0;
        int q;
        for (q = 0; q < g_size; ++q) want = value(q + k, i) > want ? value(q + k, i) : want;
        CHECK(b[k][i] == want);
      }
    }
  }
}

static void check_broadcast_reduce(straitComm_t comm) {
  const int root = g_size - 1;
  enum { n = 29 };
  int32_t buf[n];
  double send[n], recv[n];
  straitRequest_t request;
  size_t i;
  /* Broadcast: root's values everywhere. */
  fill(buf, straitInt32, g_rank == root ? 100 : g_rank, 0, n);
  OK(straitBroadcast(buf, n, straitInt32, root, comm, NULL));
  CHECK(holds(buf, straitInt32, 100, 0, n));
  fill(buf, straitInt32, g_rank == 0 ? 7 : g_rank, 0, n);
  OK(straitBroadcastAsync(buf, n, straitInt32, 0, comm, NULL, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  CHECK(holds(buf, straitInt32, 7, 0, n));
  /* Reduce to rank 1 % P; recv NULL elsewhere. */
  fill(send, straitFloat64, g_rank, 0, n);
  memset(recv, 0, sizeof recv);
  OK(straitReduce(send, g_rank == 1 % g_size ? recv : NULL, n, straitFloat64, straitSum, 1 % g_size,
                  comm, NULL));
  if (g_rank == 1 % g_size) {
    for (i = 0; i < n; ++i) CHECK(recv[i] == reference(straitSum, i));
  }
  OK(straitReduceAsync(send, g_rank == 0 ? recv : NULL, n, straitFloat64, straitMin, 0, comm, NULL,
                       &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  if (g_rank == 0) {
    for (i = 0; i < n; ++i) CHECK(recv[i] == reference(straitMin, i));
  }
}

static void check_gathers(straitComm_t comm) {
  enum { n = 5, kMax = 3 };
  float send[n], recv[n * kMax];
  int64_t counts[kMax], vsend[kMax + 1], vrecv[(kMax + 1) * kMax];
  straitRequest_t request;
  int r;
  size_t offset;
  /* AllGather: block r is rank r's. */
  fill(send, straitFloat32, g_rank, 0, n);
  OK(straitAllGather(send, recv, n, straitFloat32, comm, NULL));
  for (r = 0; r < g_size; ++r) CHECK(holds(recv + r * n, straitFloat32, r, 0, n));
  memset(recv, 0, sizeof recv);
  OK(straitAllGatherAsync(send, recv, n, straitFloat32, comm, NULL, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (r = 0; r < g_size; ++r) CHECK(holds(recv + r * n, straitFloat32, r, 0, n));
  /* AllGatherV: rank r gives r + 1 elements. */
  for (r = 0; r < g_size; ++r) counts[r] = r + 1;
  fill(vsend, straitInt64, g_rank, 0, (size_t)g_rank + 1);
  OK(straitAllGatherV(vsend, vrecv, counts, straitInt64, comm));
  for (r = 0, offset = 0; r < g_size; offset += (size_t)counts[r], ++r) {
    CHECK(holds(vrecv + offset, straitInt64, r, 0, (size_t)counts[r]));
  }
  memset(vrecv, 0, sizeof vrecv);
  OK(straitAllGatherVAsync(vsend, vrecv, counts, straitInt64, comm, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (r = 0, offset = 0; r < g_size; offset += (size_t)counts[r], ++r) {
    CHECK(holds(vrecv + offset, straitInt64, r, 0, (size_t)counts[r]));
  }
  /* Gather to rank 0 (recv NULL elsewhere), Scatter from the last rank. */
  memset(recv, 0, sizeof recv);
  OK(straitGather(send, g_rank == 0 ? recv : NULL, n, straitFloat32, 0, comm, NULL));
  if (g_rank == 0) {
    for (r = 0; r < g_size; ++r) CHECK(holds(recv + r * n, straitFloat32, r, 0, n));
  }
  OK(straitGatherAsync(send, g_rank == 1 ? recv : NULL, n, straitFloat32, 1, comm, NULL, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  if (g_rank == 1) {
    for (r = 0; r < g_size; ++r) CHECK(holds(recv + r * n, straitFloat32, r, 0, n));
  }
  {
    const int root = g_size - 1;
    float all[n * kMax];
    float mine[n];
    for (r = 0; r < g_size; ++r) fill(all + r * n, straitFloat32, 10 + r, 0, n);
    OK(straitScatter(g_rank == root ? all : NULL, mine, n, straitFloat32, root, comm, NULL));
    CHECK(holds(mine, straitFloat32, 10 + g_rank, 0, n));
    memset(mine, 0, sizeof mine);
    OK(straitScatterAsync(g_rank == 0 ? all : NULL, mine, n, straitFloat32, 0, comm, NULL,
                          &request));
    OK(straitWait(request, STRAIT_WAIT_DEADLINE));
    OK(straitRequestFree(request));
    CHECK(holds(mine, straitFloat32, 10 + g_rank, 0, n));
  }
}

static void check_reduce_scatter(straitComm_t comm) {
  enum { n = 4, kMax = 3 };
  int32_t send[n * kMax], recv[n];
  int64_t counts[kMax];
  float vsend[(kMax + 2) * kMax], vrecv[kMax + 2];
  straitRequest_t request;
  size_t i;
  int r;
  size_t offset = 0;
  size_t total = 0;
  /* Block r of every rank's send reduced into rank r's recv. */
  fill(send, straitInt32, g_rank, 0, (size_t)(n * g_size));
  OK(straitReduceScatter(send, recv, n, straitInt32, straitSum, comm, NULL));
  for (i = 0; i < n; ++i) CHECK(recv[i] == (int32_t)reference(straitSum, (size_t)g_rank * n + i));
  OK(straitReduceScatterAsync(send, recv, n, straitInt32, straitProd, comm, NULL, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (i = 0; i < n; ++i) CHECK(recv[i] == (int32_t)reference(straitProd, (size_t)g_rank * n + i));
  /* V-form: block r has r + 2 elements. */
  for (r = 0; r < g_size; ++r) {
    counts[r] = r + 2;
    if (r < g_rank) offset += (size_t)counts[r];
    total += (size_t)counts[r];
  }
  fill(vsend, straitFloat32, g_rank, 0, total);
  OK(straitReduceScatterV(vsend, vrecv, counts, straitFloat32, straitMax, comm));
  for (i = 0; i < (size_t)counts[g_rank]; ++i) {
    CHECK(vrecv[i] == (float)reference(straitMax, offset + i));
  }
  OK(straitReduceScatterVAsync(vsend, vrecv, counts, straitFloat32, straitAvg, comm, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (i = 0; i < (size_t)counts[g_rank]; ++i) {
    CHECK(fabs(vrecv[i] - reference(straitAvg, offset + i)) < 1e-6);
  }
}

/* Rank r's element k of the block it sends to rank j. */
static double a2a(int r, int j, int k) {
  return 100.0 * r + 10.0 * j + k;
}

static void check_alltoall(straitComm_t comm) {
  enum { n = 3, kMax = 3, kMaxV = 2 * kMax + 1 };
  uint8_t send[n * kMax], recv[n * kMax];
  int64_t sendcounts[kMax], recvcounts[kMax];
  double vsend[kMaxV * kMax], vrecv[kMaxV * kMax];
  straitRequest_t request;
  int j;
  int k;
  size_t offset;
  for (j = 0; j < g_size; ++j) {
    for (k = 0; k < n; ++k) send[j * n + k] = (uint8_t)a2a(g_rank, j, k);
  }
  OK(straitAllToAll(send, recv, n, straitUint8, comm, NULL));
  for (j = 0; j < g_size; ++j) {
    for (k = 0; k < n; ++k) CHECK(recv[j * n + k] == (uint8_t)a2a(j, g_rank, k));
  }
  memset(recv, 0, sizeof recv);
  OK(straitAllToAllAsync(send, recv, n, straitUint8, comm, NULL, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (j = 0; j < g_size; ++j) {
    for (k = 0; k < n; ++k) CHECK(recv[j * n + k] == (uint8_t)a2a(j, g_rank, k));
  }
  /* V-form: rank r sends r + j + 1 elements to rank j. */
  for (j = 0, offset = 0; j < g_size; ++j) {
    sendcounts[j] = g_rank + j + 1;
    recvcounts[j] = j + g_rank + 1;
    for (k = 0; k < sendcounts[j]; ++k) vsend[offset++] = a2a(g_rank, j, k);
  }
  OK(straitAllToAllV(vsend, sendcounts, vrecv, recvcounts, straitFloat64, comm));
  for (j = 0, offset = 0; j < g_size; ++j) {
    for (k = 0; k < recvcounts[j]; ++k) CHECK(vrecv[offset++] == a2a(j, g_rank, k));
  }
  memset(vrecv, 0, sizeof vrecv);
  OK(straitAllToAllVAsync(vsend, sendcounts, vrecv, recvcounts, straitFloat64, comm, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (j = 0, offset = 0; j < g_size; ++j) {
    for (k = 0; k < recvcounts[j]; ++k) CHECK(vrecv[offset++] == a2a(j, g_rank, k));
  }
}

static void check_point_to_point(straitComm_t comm) {
  enum { n = 1000 };
  static int64_t out[n], in[n];
  straitRequest_t send_request, recv_request;
  const int next = (g_rank + 1) % g_size;
  const int prev = (g_rank + g_size - 1) % g_size;
  straitStats_t before = STRAIT_STATS_INITIALIZER;
  straitStats_t after = STRAIT_STATS_INITIALIZER;
  OK(straitCommGetStats(comm, &before));
  /* A ring: each rank sends to the next and receives from the previous, Async. */
  fill(out, straitInt64, g_rank, 0, n);
  OK(straitRecvAsync(in, n, straitInt64, prev, 5, comm, NULL, &recv_request));
  OK(straitSendAsync(out, n, straitInt64, next, 5, comm, NULL, &send_request));
  OK(straitWait(send_request, STRAIT_WAIT_DEADLINE));
  OK(straitWait(recv_request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(send_request));
  OK(straitRequestFree(recv_request));
  CHECK(holds(in, straitInt64, prev, 0, n));
  OK(straitCommGetStats(comm, &after));
  CHECK(after.sendBytes - before.sendBytes == n * sizeof(int64_t));
  /* Blocking, rank 0 to rank 1 (the receive is posted first on rank 1's side or not: either
   * order works for a blocking pair going one way). */
  if (g_rank == 0) {
    fill(out, straitInt64, 42, 0, n);
    OK(straitSend(out, n, straitInt64, 1, 6, comm, NULL));
  } else if (g_rank == 1) {
    memset(in, 0, sizeof in);
    OK(straitRecv(in, n, straitInt64, 0, 6, comm, NULL));
    CHECK(holds(in, straitInt64, 42, 0, n));
  }
  OK(straitBarrier(comm));
  OK(straitBarrierAsync(comm, &send_request));
  OK(straitWait(send_request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(send_request));
}

/* A value per rank and index with every bit pattern varied, for the bitwise reductions. */
static int32_t bits_of(int r, size_t i) {
  return (int32_t)(((uint32_t)(r + 1) * 2654435761u) ^ ((uint32_t)i * 40503u));
}

/* straitRecvAnyAsync: rank 0 takes one message from every other rank, in whatever order they
 * come, and learns each sender from straitRequestGetSource; the bitwise reductions of integers
 * against a naive reference (floats refused); the sequence number equal on every rank, growing. */
static void check_any_source_bitwise_sequence(straitComm_t comm) {
  enum { n = 64 };
  static int64_t buf[n];
  int32_t v[n], got[n], want[3][n];
  static const straitRedOp_t ops[3] = {straitBand, straitBor, straitBxor};
  int seen[64] = {0};
  int r, src = -1;
  size_t i, o;
  uint64_t seq0 = 0, seq1 = 0;
  float f = 1.0f;
  straitRequest_t req;
  if (g_rank == 0) {
    for (r = 1; r < g_size; ++r) {
      memset(buf, 0, sizeof buf);
      OK(straitRecvAnyAsync(buf, n, straitInt64, 9, comm, NULL, &req));
      OK(straitWait(req, STRAIT_WAIT_DEADLINE));
      src = -1;
      OK(straitRequestGetSource(req, &src));
      OK(straitRequestFree(req));
      CHECK(src >= 1 && src < g_size);
      if (src >= 1 && src < g_size) {
        CHECK(!seen[src]);
        seen[src] = 1;
        CHECK(holds(buf, straitInt64, 200 + src, 0, n));
      }
    }
  } else {
    fill(buf, straitInt64, 200 + g_rank, 0, n);
    OK(straitSend(buf, n, straitInt64, 0, 9, comm, NULL));
  }
  OK(straitBarrierAsync(comm, &req));
  FAILS(straitInvalidArgument, "not a receive from any source", straitRequestGetSource(req, &src));
  OK(straitWait(req, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(req));

  for (i = 0; i < n; ++i) {
    want[0][i] = want[1][i] = want[2][i] = bits_of(0, i);
    for (r = 1; r < g_size; ++r) {
      want[0][i] &= bits_of(r, i);
      want[1][i] |= bits_of(r, i);
      want[2][i] ^= bits_of(r, i);
    }
    v[i] = bits_of(g_rank, i);
  }
  for (o = 0; o < 3; ++o) {
    OK(straitAllReduce(v, got, n, straitInt32, ops[o], comm, NULL));
    CHECK(memcmp(got, want[o], sizeof got) == 0);
  }
  FAILS(straitInvalidArgument, "integer",
        straitAllReduce(&f, &f, 1, straitFloat32, straitBand, comm, NULL));

  OK(straitCommGetSequenceNumber(comm, &seq0));
  OK(straitAllReduce(v, got, n, straitInt32, straitSum, comm, NULL));
  OK(straitCommGetSequenceNumber(comm, &seq1));
  CHECK(seq1 > seq0);
  CHECK(same_on_every_rank(comm, &seq1, sizeof seq1));
}

/* Rank r's gradient element i: varied, non-integer, deterministic. */
static float grad(int r, size_t i) {
  return (float)sin(0.37 * (double)i + 1.3 * r) * (1.0f + (float)(i % 7));
}

static void check_compressed(straitComm_t comm) {
  enum { n = 4096 + 77 };
  static float send[n], recv[n], again[n];
  straitCompression_t c = STRAIT_COMPRESSION_INITIALIZER;
  straitStats_t before = STRAIT_STATS_INITIALIZER;
  straitStats_t after = STRAIT_STATS_INITIALIZER;
  straitRequest_t request;
  straitMatrixShape_t matrices[2];
  double max_abs = 0;
  double max_err = 0;
  size_t i;
  int r;
  for (i = 0; i < n; ++i) {
    double exact = 0;
    send[i] = grad(g_rank, i);
    for (r = 0; r < g_size; ++r) exact += grad(r, i);
    max_abs = fabs(exact) > max_abs ? fabs(exact) : max_abs;
  }
  /* int8 (the initializer's codec): within int8's error of the exact sum, the same everywhere,
   * and fewer bytes sent than an f32 allreduce's 2 (P-1)/P * 4 n. */
  OK(straitCommGetStats(comm, &before));
  OK(straitAllReduceCompressed(send, recv, n, straitFloat32, straitSum, &c, comm));
  OK(straitCommGetStats(comm, &after));
  for (i = 0; i < n; ++i) {
    double exact = 0;
    for (r = 0; r < g_size; ++r) exact += grad(r, i);
    max_err = fabs(recv[i] - exact) > max_err ? fabs(recv[i] - exact) : max_err;
  }
  CHECK(max_err > 0.0);                     /* lossy: it did compress */
  CHECK(max_err < 0.02 * max_abs * g_size); /* absmax int8 per block, a few re-encodings */
  CHECK(same_on_every_rank(comm, recv, sizeof recv));
  CHECK(after.allreduceBytes - before.allreduceBytes <
        (uint64_t)(n * 4 * 2 * (g_size - 1) / g_size / 3));
  /* Async, avg: the sum's bits scaled (1/P in f32). */
  OK(straitAllReduceCompressedAsync(send, again, n, straitFloat32, straitAvg, &c, comm, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  for (i = 0; i < n; ++i) CHECK(fabs(again[i] - recv[i] / g_size) <= 1e-6 * fabs(recv[i]) + 1e-7);
  /* topk with error feedback under a key: two calls, the second carries the first's residual. */
  c.codec = "topk:fraction=0.05";
  c.key = "bucket0";
  OK(straitAllReduceCompressed(send, recv, n, straitFloat32, straitSum, &c, comm));
  CHECK(same_on_every_rank(comm, recv, sizeof recv));
  OK(straitAllReduceCompressed(send, again, n, straitFloat32, straitSum, &c, comm));
  CHECK(same_on_every_rank(comm, again, sizeof again));
  CHECK(memcmp(recv, again, sizeof recv) != 0); /* the residual changed what was sent */
  /* powersgd over two matrices: the elements outside them go uncompressed (exact sum). */
  matrices[0].offset = 0;
  matrices[0].rows = 32;
  matrices[0].cols = 64;
  matrices[1].offset = 2048;
  matrices[1].rows = 32;
  matrices[1].cols = 32;
  c.codec = "powersgd:rank=2";
  c.key = "bucket1";
  c.matrices = matrices;
  c.matrixCount = 2;
  for (i = 0; i < n; ++i) send[i] = (float)value(g_rank, i);
  OK(straitAllReduceCompressed(send, recv, n, straitFloat32, straitSum, &c, comm));
  CHECK(same_on_every_rank(comm, recv, sizeof recv));
  for (i = 2048 + 32 * 32; i < n; ++i) CHECK(recv[i] == (float)reference(straitSum, i));
}

static void check_split(straitComm_t world) {
  straitComm_t half = NULL;
  straitComm_t all_but_last = NULL;
  int rank = -1;
  int size = 0;
  int64_t mine = g_rank;
  int64_t sum = 0;
  int64_t want = 0;
  int r;
  /* Even and odd ranks; key -rank orders each group by descending world rank. */
  OK(straitCommSplit(world, g_rank % 2, -g_rank, &half));
  CHECK(half != NULL);
  OK(straitCommCount(half, &size));
  OK(straitCommUserRank(half, &rank));
  CHECK(size == (g_size - g_rank % 2 + 1) / 2);
  {
    /* Members with this parity in descending order: this rank's index among them. */
    int index = 0;
    for (r = g_size - 1; r > g_rank; --r) index += r % 2 == g_rank % 2;
    CHECK(rank == index);
  }
  OK(straitAllReduce(&mine, &sum, 1, straitInt64, straitSum, half, NULL));
  for (r = g_rank % 2; r < g_size; r += 2) want += r;
  CHECK(sum == want);
  /* The last rank opts out: it gets NULL, the others a communicator without it. */
  OK(straitCommSplit(world, g_rank == g_size - 1 ? STRAIT_SPLIT_NOCOLOR : 0, g_rank,
                     &all_but_last));
  if (g_rank == g_size - 1) {
    CHECK(all_but_last == NULL);
  } else {
    CHECK(all_but_last != NULL);
    OK(straitCommCount(all_but_last, &size));
    CHECK(size == g_size - 1);
    OK(straitAllReduce(&mine, &sum, 1, straitInt64, straitMax, all_but_last, NULL));
    CHECK(sum == g_size - 2);
    OK(straitCommDestroy(all_but_last));
  }
  OK(straitCommDestroy(half));
}

static void check_library(straitComm_t comm) {
  int version = 0;
  int64_t timeout = 0;
  int code;
  OK(straitGetVersion(&version));
  CHECK(version == STRAIT_VERSION_CODE);
  CHECK(STRAIT_VERSION_CODE == STRAIT_VERSION(STRAIT_MAJOR, STRAIT_MINOR, STRAIT_PATCH));
  for (code = 0; code < straitNumResults; ++code) {
    const char* text = straitGetErrorString((straitResult_t)code);
    CHECK(text != NULL && strncmp(text, "strait", 6) == 0);
  }
  CHECK_CONTAINS(straitGetErrorString(straitTimeout), "straitTimeout");
  CHECK_CONTAINS(straitGetErrorString((straitResult_t)42), "unknown");
  OK(straitCommGetTimeout(comm, &timeout));
  CHECK(timeout == 20000);
  OK(straitCommSetTimeout(comm, 25000));
  OK(straitCommGetTimeout(comm, &timeout));
  CHECK(timeout == 25000);
  CHECK(strcmp(straitGetLastError(comm), "") == 0); /* no failure on it yet */
}

/* ---- completion callbacks (straitRequestOnComplete) ---- */

typedef struct {
  pthread_mutex_t mutex;
  int calls;
  straitResult_t result;
  pthread_t thread;
  const float* data; /* checked inside the callback: the result is complete when it runs */
  size_t n;
  int data_ok;
} Completion;

static void completion_init(Completion* c, const float* data, size_t n) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mutex, NULL);
  c->result = straitInternalError;
  c->data = data;
  c->n = n;
}

/* The sum over ranks of (r + 1) * (i % 7 + 1), exact in float. */
static float summed(size_t i) {
  return (float)(g_size * (g_size + 1) / 2) * (float)(i % 7 + 1);
}

static void on_complete(void* user, straitResult_t result) {
  Completion* c = (Completion*)user;
  size_t i;
  int ok = 1;
  for (i = 0; c->data != NULL && i < c->n; ++i) ok &= c->data[i] == summed(i);
  pthread_mutex_lock(&c->mutex);
  c->calls += 1;
  c->result = result;
  c->thread = pthread_self();
  c->data_ok = ok;
  pthread_mutex_unlock(&c->mutex);
}

/* The callback's calls once it has run (or 0 after timeout_ms). */
static int completion_calls(Completion* c, double timeout_ms) {
  const double until = now_ms() + timeout_ms;
  int calls;
  for (;;) {
    pthread_mutex_lock(&c->mutex);
    calls = c->calls;
    pthread_mutex_unlock(&c->mutex);
    if (calls > 0 || now_ms() > until) return calls;
    sleep_ms(1);
  }
}

/* A callback sees the finished result once, with straitSuccess; one registered on a finished
 * request runs at once on the registering thread; one whose request is freed first still runs;
 * a NULL fn is refused. */
static void check_on_complete(straitComm_t comm) {
  enum { n = 4096 };
  static float x[n], y[n];
  Completion a, b, c;
  straitRequest_t req;
  size_t i;
  for (i = 0; i < n; ++i) {
    x[i] = (float)((g_rank + 1) * (int)(i % 7 + 1));
    y[i] = -1.0f;
  }
  completion_init(&a, y, n);
  OK(straitAllReduceAsync(x, y, n, straitFloat32, straitSum, comm, NULL, &req));
  OK(straitRequestOnComplete(req, on_complete, &a));
  OK(straitWait(req, STRAIT_WAIT_DEADLINE));
  CHECK(completion_calls(&a, 10000.0) == 1);
  CHECK(a.result == straitSuccess);
  CHECK(a.data_ok);

  completion_init(&b, NULL, 0);
  OK(straitRequestOnComplete(req, on_complete, &b)); /* finished: runs here, now */
  CHECK(b.calls == 1 && b.result == straitSuccess);
  CHECK(b.calls == 1 && pthread_equal(b.thread, pthread_self()));
  FAILS(straitInvalidArgument, "fn is NULL", straitRequestOnComplete(req, NULL, &b));
  OK(straitRequestFree(req));

  for (i = 0; i < n; ++i) y[i] = -1.0f;
  completion_init(&c, y, n);
  OK(straitAllReduceAsync(x, y, n, straitFloat32, straitSum, comm, NULL, &req));
  OK(straitRequestOnComplete(req, on_complete, &c));
  OK(straitRequestFree(req)); /* the operation goes on; its callback still runs */
  CHECK(completion_calls(&c, 10000.0) == 1);
  CHECK(c.result == straitSuccess);
  CHECK(c.data_ok);
  sleep_ms(20);
  CHECK(completion_calls(&a, 0.0) == 1 && completion_calls(&c, 0.0) == 1); /* once each */
}

static void scenario_collectives(void) {
  straitComm_t comm = init_world(20000);
  check_library(comm);
  check_allreduce(comm);
  check_async_allreduce(comm);
  check_on_complete(comm);
  check_broadcast_reduce(comm);
  check_gathers(comm);
  check_reduce_scatter(comm);
  check_alltoall(comm);
  check_point_to_point(comm);
  check_any_source_bitwise_sequence(comm);
  check_compressed(comm);
  check_split(comm);
  OK(straitCommDestroy(comm));
}

/* A sum over comm of this rank's rank: whether a new communicator works. */
static void check_works(straitComm_t comm) {
  int64_t mine = g_rank + 1;
  int64_t sum = 0;
  OK(straitAllReduce(&mine, &sum, 1, straitInt64, straitSum, comm, NULL));
  CHECK(sum == (int64_t)g_size * (g_size + 1) / 2);
}

/* ---- init ---- */

static void scenario_init(void) {
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  straitComm_t comm = NULL;
  straitComm_t dup = NULL;
  int rank = -1;
  g_rank = atoi(getenv("RANK"));
  g_size = atoi(getenv("WORLD_SIZE"));
  config.timeoutMs = 20000;
  config.streams = 2;
  config.tune = "allreduce:ring";
  OK(straitCommInitRank(&comm, g_size, g_rank, getenv("MASTER_ADDR"), atoi(getenv("MASTER_PORT")),
                        &config));
  OK(straitCommUserRank(comm, &rank));
  CHECK(rank == g_rank);
  check_works(comm);
  OK(straitCommSplit(comm, 0, g_rank, &dup));
  check_works(dup);
  OK(straitCommDestroy(comm));
  /* A program may exit with a communicator and a pending request left (Python at interpreter
   * exit): the library's teardown ends them, and the process exits 0, without a crash or hang. */
  {
    static float never[4];
    straitRequest_t request;
    OK(straitRecvAsync(never, 4, straitFloat32, (g_rank + 1) % g_size, 3, dup, NULL, &request));
  }
}

/* ---- store: a file store, one file per key in a directory every rank sees ---- */

typedef struct {
  char dir[256];
} FileStore;

static void key_path(const FileStore* s, const char* key, size_t key_length, char* path,
                     size_t capacity) {
  size_t at = (size_t)snprintf(path, capacity, "%s/", s->dir);
  size_t i;
  for (i = 0; i < key_length && at + 3 < capacity; ++i) {
    at += (size_t)snprintf(path + at, capacity - at, "%02x", (unsigned char)key[i]);
  }
}

static int file_set(void* user, const char* key, size_t key_length, const void* value,
                    size_t length) {
  const FileStore* s = (const FileStore*)user;
  char path[1024];
  char tmp[1100];
  FILE* f;
  key_path(s, key, key_length, path, sizeof path);
  sprintf(tmp, "%s.tmp%d", path, (int)getpid());
  f = fopen(tmp, "wb");
  if (!f) return straitIoError;
  if (length > 0 && fwrite(value, 1, length, f) != length) {
    fclose(f);
    return straitIoError;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) return straitIoError; /* atomic publication */
  return straitSuccess;
}

/* Reads the file of a key: -1 when it does not exist. */
static long read_value(const char* path, void* value, size_t capacity) {
  FILE* f = fopen(path, "rb");
  long length;
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  length = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (value != NULL && capacity > 0) {
    size_t want = (size_t)length < capacity ? (size_t)length : capacity;
    if (fread(value, 1, want, f) != want) length = -2;
  }
  fclose(f);
  return length;
}

static int file_get(void* user, const char* key, size_t key_length, int64_t timeout_ms, void* value,
                    size_t capacity, size_t* length) {
  const FileStore* s = (const FileStore*)user;
  char path[1024];
  const double deadline = now_ms() + (double)timeout_ms;
  long got;
  CHECK(key[key_length] == '\0');
  key_path(s, key, key_length, path, sizeof path);
  while ((got = read_value(path, value, capacity)) == -1) {
    if (now_ms() > deadline) return straitTimeout;
    sleep_ms(1);
  }
  if (got < 0) return straitIoError;
  *length = (size_t)got;
  return straitSuccess;
}

static int file_add(void* user, const char* key, size_t key_length, int64_t delta,
                    int64_t* result) {
  const FileStore* s = (const FileStore*)user;
  char path[1024];
  char lock_path[1100];
  char text[32] = {0};
  long length;
  int lock;
  struct flock whole;
  int rc = straitSuccess;
  key_path(s, key, key_length, path, sizeof path);
  sprintf(lock_path, "%s.lock", path);
  lock = open(lock_path, O_RDWR | O_CREAT, 0600);
  if (lock < 0) return straitIoError;
  memset(&whole, 0, sizeof whole);
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (fcntl(lock, F_SETLKW, &whole) != 0) {
    close(lock);
    return straitIoError;
  }
  length = read_value(path, text, sizeof text - 1);
  *result = (length > 0 ? strtoll(text, NULL, 10) : 0) + delta;
  sprintf(text, "%lld", (long long)*result);
  rc = file_set(user, key, key_length, text, strlen(text));
  close(lock); /* releases the lock */
  return rc;
}

static int file_wait(void* user, const char* const* keys, const size_t* key_lengths, size_t count,
                     int64_t timeout_ms) {
  const FileStore* s = (const FileStore*)user;
  const double deadline = now_ms() + (double)timeout_ms;
  size_t i;
  for (i = 0; i < count; ++i) {
    char path[1024];
    key_path(s, keys[i], key_lengths[i], path, sizeof path);
    while (read_value(path, NULL, 0) == -1) {
      if (now_ms() > deadline) return straitTimeout;
      sleep_ms(1);
    }
  }
  return straitSuccess;
}

/* Callbacks that fail, for the error paths. */
static int set_fails(void* user, const char* key, size_t key_length, const void* value,
                     size_t length) {
  (void)user, (void)key, (void)key_length, (void)value, (void)length;
  return straitPeerLost;
}
static int set_returns_junk(void* user, const char* key, size_t key_length, const void* value,
                            size_t length) {
  (void)user, (void)key, (void)key_length, (void)value, (void)length;
  return 42;
}
static int set_ok(void* user, const char* key, size_t key_length, const void* value,
                  size_t length) {
  (void)user, (void)key, (void)key_length, (void)value, (void)length;
  return straitSuccess;
}
static int get_times_out(void* user, const char* key, size_t key_length, int64_t timeout_ms,
                         void* value, size_t capacity, size_t* length) {
  (void)user, (void)key, (void)key_length, (void)timeout_ms, (void)value, (void)capacity;
  *length = 0;
  return straitTimeout;
}
static int add_ok(void* user, const char* key, size_t key_length, int64_t delta, int64_t* result) {
  (void)user, (void)key, (void)key_length;
  *result = delta;
  return straitSuccess;
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* entry;
  if (!d) fail(__FILE__, __LINE__, "opendir", dir);
  while ((entry = readdir(d)) != NULL) {
    char path[1024];
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
    if (unlink(path) != 0) fail(__FILE__, __LINE__, "unlink", path);
  }
  closedir(d);
  if (rmdir(dir) != 0) fail(__FILE__, __LINE__, "rmdir", dir);
}

static void scenario_store(void) {
  static FileStore files[2];
  const char* tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  int k;
  g_rank = atoi(getenv("RANK"));
  g_size = atoi(getenv("WORLD_SIZE"));
  config.timeoutMs = 20000;
  /* Two worlds, one after the other: with the wait callback, then without (strait gets each key
   * instead). The launcher's pid names this job's directories. */
  for (k = 0; k < 2; ++k) {
    straitStore_t store = STRAIT_STORE_INITIALIZER;
    straitComm_t comm = NULL;
    straitComm_t dup = NULL;
    sprintf(files[k].dir, "%s/strait-capi-store-%d-%d", tmp, (int)getppid(), k);
    if (mkdir(files[k].dir, 0700) != 0 && errno != EEXIST)
      fail(__FILE__, __LINE__, "mkdir", files[k].dir);
    store.userData = &files[k];
    store.set = file_set;
    store.get = file_get;
    store.add = file_add;
    store.wait = k == 0 ? file_wait : NULL;
    OK(straitCommInitStore(&comm, g_size, g_rank, &store, &config));
    check_works(comm);
    OK(straitCommSplit(comm, g_rank % 2, 0, &dup)); /* the split draws its id through the store */
    OK(straitCommDestroy(dup));
    OK(straitBarrier(comm)); /* nobody reads the store any more */
    OK(straitCommDestroy(comm));
  }
  /* Failing stores fail the init with the callback's code, named. nranks 2 so that strait must
   * read a peer's key; nothing is ever connected. */
  {
    straitStore_t store = STRAIT_STORE_INITIALIZER;
    straitComm_t comm = NULL;
    store.set = set_fails;
    store.get = get_times_out;
    store.add = add_ok;
    FAILS(straitPeerLost, "the store's set callback",
          straitCommInitStore(&comm, 2, 0, &store, &config));
    CHECK(comm == NULL);
    store.set = set_returns_junk;
    FAILS(straitInternalError, "returned 42, which is no straitResult_t",
          straitCommInitStore(&comm, 2, 0, &store, &config));
    store.set = set_ok;
    config.timeoutMs = 300;
    FAILS(straitTimeout, "did not start within 300 ms",
          straitCommInitStore(&comm, 2, 0, &store, &config));
    store.add = NULL;
    FAILS(straitInvalidArgument, "no add callback",
          straitCommInitStore(&comm, 2, 0, &store, &config));
    store.magic = 0;
    FAILS(straitInvalidArgument, "STRAIT_STORE_INITIALIZER",
          straitCommInitStore(&comm, 2, 0, &store, &config));
    FAILS(straitInvalidArgument, "store is NULL", straitCommInitStore(&comm, 2, 0, NULL, &config));
  }
  /* Every rank has left the barriers above, so nobody reads the files any more. */
  if (g_rank == 0) {
    remove_dir(files[0].dir);
    remove_dir(files[1].dir);
  }
}

/* ---- failures between ranks ---- */

static void scenario_mismatch(void) {
  straitComm_t comm = init_world(3000);
  static float send[1001], recv[1001];
  const int64_t n = g_rank == 1 ? 1001 : 1000;
  straitResult_t rc = straitAllReduce(send, recv, n, straitFloat32, straitSum, comm, NULL);
  const char* message = straitGetLastError(comm);
  CHECK(rc != straitSuccess);
  printf("rank %d: expected failure: %s\n", g_rank, message);
  CHECK(strcmp(message, straitGetLastError(NULL)) == 0); /* the comm's and the thread's */
  CHECK_CONTAINS(message, "straitAllReduce: ");
  if (g_rank == 1 || g_size == 2) {
    /* Rank 1 and its neighbours see each other's fingerprint. */
    CHECK(rc == straitMismatch);
    CHECK_CONTAINS(message, "Mismatch");
    CHECK_CONTAINS(message, "allreduce #0");
    CHECK_CONTAINS(message, g_rank == 1 ? "this rank called allreduce #0 (f32 x 1001"
                                        : "rank 1 called allreduce #0 (f32 x 1001");
  }
  if (g_rank == 2) {
    CHECK(rc == straitMismatch);
    CHECK_CONTAINS(message, "rank 1 called allreduce #0 (f32 x 1001");
  }
  /* After a failure the communicator refuses to go on. */
  CHECK(straitAllReduce(send, recv, 1, straitFloat32, straitSum, comm, NULL) != straitSuccess);
  OK(straitCommDestroy(comm));
}

static void scenario_timeout(void) {
  straitComm_t comm = init_world(1000);
  float x = 1.0f;
  float y = 0.0f;
  if (g_rank == 1) {
    sleep_ms(2200); /* never calls the allreduce: the others give up after 1 s */
  } else {
    /* Rank 0 waits through a request with a completion callback, which gets the error too. */
    const double start = now_ms();
    straitRequest_t req = NULL;
    Completion done;
    straitResult_t rc;
    double took;
    const char* message;
    completion_init(&done, NULL, 0);
    if (g_rank == 0) {
      OK(straitAllReduceAsync(&x, &y, 1, straitFloat32, straitSum, comm, NULL, &req));
      OK(straitRequestOnComplete(req, on_complete, &done));
      rc = straitWait(req, STRAIT_WAIT_DEADLINE);
    } else {
      rc = straitAllReduce(&x, &y, 1, straitFloat32, straitSum, comm, NULL);
    }
    took = now_ms() - start;
    message = req != NULL ? straitRequestGetError(req) : straitGetLastError(comm);
    if (req != NULL) {
      CHECK(completion_calls(&done, 10000.0) == 1);
      CHECK(done.result == rc);
    }
    printf("rank %d: expected failure after %.0f ms: %s\n", g_rank, took, message);
    /* Rank 0 of 3 may instead see rank 2 leave after its own timeout: still naming rank 1. */
    CHECK(rc == straitTimeout || (rc == straitPeerLost && g_size == 3));
    CHECK_CONTAINS(message, "rank 1");
    CHECK(took >= (rc == straitTimeout ? 950.0 : 500.0));
    CHECK(took < 10000.0);
    if (req != NULL) OK(straitRequestFree(req));
  }
  OK(straitCommDestroy(comm));
}

/* ---- abort from another thread ---- */

typedef struct {
  straitComm_t comm;
  const char* reason;
  long after_ms;
  straitResult_t result;
} AbortJob;

static void* abort_later(void* arg) {
  AbortJob* job = (AbortJob*)arg;
  sleep_ms(job->after_ms);
  job->result = straitCommAbort(job->comm, job->reason);
  return NULL;
}

static void scenario_abort(void) {
  straitComm_t world = init_world(30000);
  straitComm_t dup = NULL;
  straitComm_t other = NULL;
  const int peer = (g_rank + 1) % g_size;
  float buf[4];
  pthread_t thread;
  AbortJob job;
  double start;
  straitResult_t rc;
  straitRequest_t request;
  /* Aborted on split communicators: the world stays usable, and its barrier at the end keeps
   * every rank here until all are done (a rank that exits early is PeerLost to the others). */
  OK(straitCommSplit(world, 0, g_rank, &dup));
  OK(straitCommSplit(world, 0, g_rank, &other));
  /* A blocking receive nobody sends, ended by an abort from another thread long before the
   * 30 s timeout. */
  job.comm = dup;
  job.reason = "aborted by the test's thread";
  job.after_ms = 300;
  job.result = straitInternalError;
  CHECK(pthread_create(&thread, NULL, abort_later, &job) == 0);
  start = now_ms();
  rc = straitRecv(buf, 4, straitFloat32, peer, 9, dup, NULL);
  CHECK(rc == straitAborted);
  CHECK(now_ms() - start < 5000.0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(job.result == straitSuccess);
  printf("rank %d: expected failure: %s\n", g_rank, straitGetLastError(dup));
  CHECK_CONTAINS(straitGetLastError(dup), "aborted by the test's thread");
  CHECK_CONTAINS(straitGetLastError(dup), "straitRecv: Aborted");
  /* Later operations fail too; the others are untouched. */
  FAILS(straitAborted, "Aborted", straitBarrier(dup));
  OK(straitCommDestroy(dup));
  check_works(other);
  /* A wait on a request, ended the same way (default reason). */
  OK(straitRecvAsync(buf, 4, straitFloat32, peer, 10, other, NULL, &request));
  CHECK(straitTest(request) == straitInProgress);
  CHECK(strcmp(straitRequestGetError(request), "") == 0);
  job.comm = other;
  job.reason = NULL;
  CHECK(pthread_create(&thread, NULL, abort_later, &job) == 0);
  start = now_ms();
  FAILS(straitAborted, "straitCommAbort was called", straitWait(request, STRAIT_WAIT_DEADLINE));
  CHECK(now_ms() - start < 5000.0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(straitTest(request) == straitAborted);
  CHECK_CONTAINS(straitRequestGetError(request), "straitCommAbort was called");
  CHECK_CONTAINS(straitGetLastError(other), "straitCommAbort was called");
  /* A request outlives its communicator. */
  OK(straitCommDestroy(other));
  CHECK(straitTest(request) == straitAborted);
  OK(straitRequestFree(request));
  check_works(world);
  OK(straitCommDestroy(world));
}

static void scenario_wait_timeout(void) {
  straitComm_t world = init_world(30000);
  straitComm_t comm = NULL;
  float buf[4];
  straitRequest_t request;
  double start;
  /* On a split communicator, so that the world's barrier at the end keeps every rank here until
   * all have timed out (a rank that exits early would be PeerLost instead). */
  OK(straitCommSplit(world, 0, g_rank, &comm));
  OK(straitRecvAsync(buf, 4, straitFloat32, (g_rank + 1) % g_size, 11, comm, NULL, &request));
  CHECK(straitTest(request) == straitInProgress);
  start = now_ms();
  FAILS(straitTimeout, "Timeout", straitWait(request, 200));
  CHECK(now_ms() - start >= 190.0);
  CHECK(now_ms() - start < 5000.0);
  printf("rank %d: expected failure: %s\n", g_rank, straitGetLastError(comm));
  CHECK_CONTAINS(straitGetLastError(comm), "straitWait: Timeout: recv of 16 bytes");
  CHECK_CONTAINS(straitGetLastError(comm), "within 200 ms");
  CHECK(straitTest(request) == straitTimeout);
  CHECK_CONTAINS(straitRequestGetError(request), "Timeout: recv of 16 bytes");
  CHECK_CONTAINS(straitGetLastError(comm), "straitTest: Timeout"); /* each failing call records */
  OK(straitRequestFree(request));
  OK(straitCommDestroy(comm));
  check_works(world);
  OK(straitCommDestroy(world));
}

/* ---- arguments ---- */

static void scenario_arguments(void) {
  straitComm_t comm = init_world(20000);
  straitComm_t dup = NULL;
  straitComm_t out = NULL;
  straitRequest_t request = NULL;
  straitRequest_t freed = NULL;
  straitComm_t foreign = (straitComm_t)(uintptr_t)0x1235;
  float buf[8] = {0};
  int64_t counts[3] = {1, 1, 1};
  int value_out = 0;
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  straitCompression_t c = STRAIT_COMPRESSION_INITIALIZER;
  straitStats_t stats = STRAIT_STATS_INITIALIZER;
  int64_t timeout = 0;

  /* Handles: NULL, never given out, destroyed, of the other kind, freed. */
  FAILS(straitInvalidArgument, "comm is NULL",
        straitAllReduce(buf, buf, 1, straitFloat32, straitSum, NULL, NULL));
  CHECK_CONTAINS(straitGetLastError(NULL), "straitAllReduce: InvalidArgument: ");
  FAILS(straitInvalidArgument, "strait never gave out this handle",
        straitBroadcast(buf, 1, straitFloat32, 0, foreign, NULL));
  CHECK_CONTAINS(straitGetLastError(foreign), "not a live communicator");
  OK(straitCommSplit(comm, 0, 0, &dup));
  OK(straitCommDestroy(dup));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitCommCount(dup, &value_out));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitCommDestroy(dup));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitCommAbort(dup, "x"));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitBarrier(dup));
  OK(straitBarrierAsync(comm, &request));
  FAILS(straitInvalidArgument, "is a request, not a communicator",
        straitCommUserRank((straitComm_t)(void*)request, &value_out));
  FAILS(straitInvalidArgument, "is a communicator, not a request",
        straitTest((straitRequest_t)(void*)comm));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  freed = request;
  OK(straitRequestFree(request));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitTest(freed));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitWait(freed, 10));
  FAILS(straitInvalidArgument, "destroyed or freed already", straitRequestFree(freed));
  CHECK_CONTAINS(straitRequestGetError(freed), "not a live request");
  FAILS(straitInvalidArgument, "request is NULL", straitTest(NULL));
  FAILS(straitInvalidArgument, "request is NULL", straitRequestFree(NULL));
  FAILS(straitInvalidArgument, "comm is NULL", straitCommDestroy(NULL));
  FAILS(straitInvalidArgument, "comm is NULL", straitCommAbort(NULL, NULL));
  FAILS(straitInvalidArgument, "comm is NULL", straitCommSplit(NULL, 0, 0, &out));

  /* Enums: NCCL's uint32 and uint64 (3, 5) and values out of range. */
  FAILS(straitInvalidArgument, "datatype 3 is not a straitDataType_t",
        straitAllReduce(buf, buf, 1, (straitDataType_t)3, straitSum, comm, NULL));
  FAILS(straitInvalidArgument, "datatype 5 is not",
        straitAllGather(buf, buf, 1, (straitDataType_t)5, comm, NULL));
  FAILS(straitInvalidArgument, "datatype -1 is not",
        straitSend(buf, 1, (straitDataType_t)-1, 0, 0, comm, NULL));
  FAILS(straitInvalidArgument, "datatype 10 is not",
        straitAllToAll(buf, buf, 1, straitNumTypes, comm, NULL));
  FAILS(straitInvalidArgument, "op 8 is not a straitRedOp_t",
        straitReduce(buf, buf, 1, straitFloat32, straitNumOps, 0, comm, NULL));
  FAILS(straitInvalidArgument, "op 99 is not",
        straitReduceScatter(buf, buf, 1, straitFloat32, (straitRedOp_t)99, comm, NULL));
  FAILS(straitInvalidArgument, "avg of i32 is not defined",
        straitAllReduce(buf, buf, 1, straitInt32, straitAvg, comm, NULL));

  /* Counts: negative, absurd, arrays NULL or with a negative entry. */
  FAILS(straitInvalidArgument, "count is -1",
        straitAllReduce(buf, buf, -1, straitFloat32, straitSum, comm, NULL));
  FAILS(straitInvalidArgument, "sendcount is -5",
        straitGather(buf, buf, -5, straitFloat32, 0, comm, NULL));
  FAILS(straitInvalidArgument, "recvcount is -2",
        straitScatterAsync(buf, buf, -2, straitFloat32, 0, comm, NULL, &request));
  CHECK(request == NULL); /* a failed Async call hands out no request */
  FAILS(straitInvalidArgument, "more bytes than memory can hold",
        straitBroadcast(buf, INT64_MAX / 2, straitFloat64, 0, comm, NULL));
  FAILS(straitInvalidArgument, "recvcounts is NULL",
        straitAllGatherV(buf, buf, NULL, straitFloat32, comm));
  counts[g_size - 1] = -3;
  FAILS(straitInvalidArgument, "recvcounts[",
        straitReduceScatterV(buf, buf, counts, straitFloat32, straitSum, comm));
  FAILS(straitInvalidArgument, "sendcounts[",
        straitAllToAllV(buf, counts, buf, counts, straitFloat32, comm));
  FAILS(straitInvalidArgument, "count is -1", straitRecv(buf, -1, straitFloat32, 0, 0, comm, NULL));

  /* Ranks out of range; NULL buffers that must hold data; NULL out-pointers. */
  FAILS(straitInvalidArgument, "root is 7", straitBroadcast(buf, 1, straitFloat32, 7, comm, NULL));
  FAILS(straitInvalidArgument, "root is -1",
        straitReduceAsync(buf, buf, 1, straitFloat32, straitSum, -1, comm, NULL, &request));
  FAILS(straitInvalidArgument, "peer is 3",
        straitSendAsync(buf, 1, straitFloat32, 3, 0, comm, NULL, &request));
  FAILS(straitInvalidArgument, "buffer is null",
        straitAllReduce(NULL, buf, 4, straitFloat32, straitSum, comm, NULL));
  FAILS(straitInvalidArgument, "request is NULL",
        straitAllReduceAsync(buf, buf, 1, straitFloat32, straitSum, comm, NULL, NULL));
  FAILS(straitInvalidArgument, "count is NULL", straitCommCount(comm, NULL));
  FAILS(straitInvalidArgument, "rank is NULL", straitCommUserRank(comm, NULL));
  FAILS(straitInvalidArgument, "version is NULL", straitGetVersion(NULL));
  FAILS(straitInvalidArgument, "newcomm is NULL", straitCommSplit(comm, 0, 0, NULL));
  FAILS(straitInvalidArgument, "comm is NULL", straitCommInitFromEnv(NULL, NULL));
  FAILS(straitInvalidArgument, "timeoutMs is NULL", straitCommGetTimeout(comm, NULL));
  FAILS(straitInvalidArgument, "stats is NULL", straitCommGetStats(comm, NULL));
  stats.size = 3;
  FAILS(straitInvalidArgument, "STRAIT_STATS_INITIALIZER", straitCommGetStats(comm, &stats));
  FAILS(straitInvalidArgument, "timeoutMs is 0", straitCommSetTimeout(comm, 0));
  OK(straitBarrierAsync(comm, &request));
  FAILS(straitInvalidArgument, "timeoutMs is -5", straitWait(request, -5));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));

  /* Versioned structs and init arguments: refused before anything connects. */
  config.magic = 0;
  FAILS(straitInvalidArgument, "STRAIT_CONFIG_INITIALIZER", straitCommInitFromEnv(&out, &config));
  CHECK(out == NULL);
  config.magic = STRAIT_CONFIG_MAGIC;
  config.size = 8;
  FAILS(straitInvalidArgument, "less than its first version's",
        straitCommInitFromEnv(&out, &config));
  config.size = sizeof config + 8;
  FAILS(straitInvalidArgument, "newer strait.h", straitCommInitFromEnv(&out, &config));
  config.size = sizeof config;
  config.streams = 0;
  FAILS(straitInvalidArgument, "config->streams is 0", straitCommInitFromEnv(&out, &config));
  config.streams = STRAIT_CONFIG_UNDEF_INT;
  config.timeoutMs = -4;
  FAILS(straitInvalidArgument, "config->timeoutMs is -4", straitCommInitFromEnv(&out, &config));
  config.timeoutMs = STRAIT_CONFIG_UNDEF_INT;
  config.siteCount = 2;
  FAILS(straitInvalidArgument, "config->siteCount is 2", straitCommInitFromEnv(&out, &config));
  config.siteCount = 0;
  config.tune = "allreduce:bogus";
  FAILS(straitInvalidArgument, "config->tune", straitCommInitFromEnv(&out, &config));
  config.tune = NULL;
  config.tuneFile = "/nonexistent/tune.json";
  FAILS(straitInvalidArgument, "cannot read it", straitCommInitFromEnv(&out, &config));
  config.tuneFile = NULL;
  {
    /* config->secretFile: a secret others can read is refused, naming the fix. */
    char path[] = "/tmp/strait-capi-secret-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789abcdef0123456789abcdef", 32) == 32);
    CHECK(fchmod(fd, 0644) == 0);
    close(fd);
    config.secretFile = path;
    FAILS(straitInvalidArgument, "chmod 600",
          straitCommInitRank(&out, 1, 0, "127.0.0.1", 40000 + (int)(getpid() % 20000), &config));
    unlink(path);
    config.secretFile = NULL;
  }
  FAILS(straitInvalidArgument, "rank 2 of 2 ranks is out of range",
        straitCommInitRank(&out, 2, 2, "127.0.0.1", 1234, NULL));
  FAILS(straitInvalidArgument, "rank 0 of 0 ranks", straitCommInitRank(&out, 0, 0, "x", 1, NULL));
  FAILS(straitInvalidArgument, "address is NULL", straitCommInitRank(&out, 2, 1, NULL, 1234, NULL));
  FAILS(straitInvalidArgument, "port is 0", straitCommInitRank(&out, 2, 1, "127.0.0.1", 0, NULL));
  FAILS(straitInvalidArgument, "rank -1 of 2",
        straitCommInitStore(&out, 2, -1, (const straitStore_t*)NULL, NULL));

  /* Compression: NULL, not initialised, codec NULL or unknown, dtype, op, matrices. */
  FAILS(straitInvalidArgument, "straitCompression_t is NULL",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitSum, NULL, comm));
  c.magic = 1;
  FAILS(straitInvalidArgument, "STRAIT_COMPRESSION_INITIALIZER",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitSum, &c, comm));
  c.magic = STRAIT_COMPRESSION_MAGIC;
  c.codec = NULL;
  FAILS(straitInvalidArgument, "compression->codec is NULL",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitSum, &c, comm));
  c.codec = "zip";
  FAILS(straitInvalidArgument, "zip",
        straitAllReduceCompressedAsync(buf, buf, 8, straitFloat32, straitSum, &c, comm, &request));
  c.codec = "int8";
  FAILS(straitInvalidArgument, "straitFloat32 only",
        straitAllReduceCompressed(buf, buf, 4, straitFloat64, straitSum, &c, comm));
  FAILS(straitInvalidArgument, "is not sum or avg",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitMax, &c, comm));
  c.matrixCount = -1;
  FAILS(straitInvalidArgument, "matrixCount is -1",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitSum, &c, comm));
  c.matrixCount = 0;
  buf[3] = (float)INFINITY;
  FAILS(straitInvalidArgument, "element 3 of the input is inf",
        straitAllReduceCompressed(buf, buf, 8, straitFloat32, straitSum, &c, comm));
  buf[3] = 0.0f;

  /* None of these touched the communicator: it still works, with its settings. */
  OK(straitCommGetTimeout(comm, &timeout));
  CHECK(timeout == 20000);
  check_works(comm);
  OK(straitCommDestroy(comm));
}

/* ---- device buffers ---- */

#ifdef STRAIT_CAPI_TEST_CUDA
#define CUDA_OK(call)                                                               \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    ++g_checks;                                                                     \
    if (e_ != cudaSuccess) fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)

static void scenario_device(void) {
  enum { n = 1 << 16 };
  static float host[n], back[n * 3];
  int devices = 0;
  float* send = NULL;
  float* recv = NULL;
  float* gathered = NULL;
  cudaStream_t stream;
  straitComm_t comm;
  straitRequest_t request;
  size_t i;
  int r;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices == 0 && strait_test_gpu_required()) {
    fail(__FILE__, __LINE__,
         "no CUDA device, and STRAIT_REQUIRE_GPU=1 (bench/gpu_check.sh) says one must be there",
         NULL);
  }
  if (devices < atoi(getenv("WORLD_SIZE"))) {
    printf("rank %s: skipped device: %d CUDA devices for %s ranks (NCCL needs one per rank)\n",
           getenv("RANK"), devices, getenv("WORLD_SIZE"));
    exit(77);
  }
  CUDA_OK(cudaSetDevice(atoi(getenv("LOCAL_RANK"))));
  comm = init_world(60000);
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(cudaMalloc((void**)&send, n * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&recv, n * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&gathered, 3 * n * sizeof(float)));
  fill(host, straitFloat32, g_rank, 0, n);
  CUDA_OK(cudaMemcpy(send, host, sizeof host, cudaMemcpyHostToDevice));
  /* Allreduce on the stream (Async), then blocking forms. */
  OK(straitAllReduceAsync(send, recv, n, straitFloat32, straitSum, comm, stream, &request));
  OK(straitWait(request, STRAIT_WAIT_DEADLINE));
  OK(straitRequestFree(request));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(back, recv, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (i = 0; i < n; ++i) CHECK(back[i] == (float)reference(straitSum, i));
  OK(straitAllGather(send, gathered, n, straitFloat32, comm, stream));
  CUDA_OK(cudaMemcpy(back, gathered, (size_t)g_size * n * sizeof(float), cudaMemcpyDeviceToHost));
  for (r = 0; r < g_size; ++r) CHECK(holds(back + (size_t)r * n, straitFloat32, r, 0, n));
  OK(straitBroadcast(send, n, straitFloat32, 0, comm, stream));
  CUDA_OK(cudaMemcpy(back, send, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(holds(back, straitFloat32, 0, 0, n));
  /* Host and device in one call; device buffers where only host ones go. */
  FAILS(straitInvalidArgument, "",
        straitAllReduce(host, recv, n, straitFloat32, straitSum, comm, stream));
  {
    int64_t counts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    FAILS(straitInvalidArgument, "GPU memory",
          straitAllGatherV(send, gathered, counts, straitFloat32, comm));
  }
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  CUDA_OK(cudaFree(gathered));
  CUDA_OK(cudaStreamDestroy(stream));
  OK(straitCommDestroy(comm));
}
#else
static void scenario_device(void) {
  printf("rank %s: skipped device: this test was built without CUDA\n", getenv("RANK"));
  exit(77);
}
#endif

int main(int argc, char** argv) {
  static const struct {
    const char* name;
    void (*run)(void);
  } scenarios[] = {
      {"collectives", scenario_collectives},
      {"init", scenario_init},
      {"store", scenario_store},
      {"mismatch", scenario_mismatch},
      {"timeout", scenario_timeout},
      {"abort", scenario_abort},
      {"wait_timeout", scenario_wait_timeout},
      {"arguments", scenario_arguments},
      {"device", scenario_device},
  };
  size_t i;
  if (argc != 2 || getenv("RANK") == NULL || getenv("WORLD_SIZE") == NULL) {
    fprintf(stderr, "usage: strait run -n N -- capi_test SCENARIO\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_rank = atoi(getenv("RANK")); /* for messages before a communicator exists */
  for (i = 0; i < COUNT_OF(scenarios); ++i) {
    if (strcmp(argv[1], scenarios[i].name) == 0) {
      scenarios[i].run();
      printf("rank %d: ok %s (%ld checks)\n", g_rank, argv[1], g_checks);
      return 0;
    }
  }
  fprintf(stderr, "capi_test: unknown scenario %s\n", argv[1]);
  return 2;
}
