/* Out-of-tree C99 consumer through pkg-config and <strait/strait.h>: on every rank of
 * `strait run -n N`, a blocking f64 sum allreduce and an asynchronous i32 max allreduce, each
 * checked against its closed form, and a bad argument answered with straitInvalidArgument. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strait/strait.h>

#define COUNT 4099 /* not a multiple of any segment or rank count */

static int fail(const char* what, straitResult_t result) {
  fprintf(stderr, "%s: %s: %s\n", what, straitGetErrorString(result), straitGetLastError(NULL));
  return 1;
}

int main(void) {
  straitConfig_t config = STRAIT_CONFIG_INITIALIZER;
  straitComm_t comm;
  straitRequest_t request;
  straitResult_t result;
  static double x[COUNT];
  static int32_t y[COUNT];
  static int32_t y_max[COUNT];
  int rank = 0;
  int size = 0;
  int version = 0;
  int wrong = 0;
  int i;

  config.timeoutMs = 30000;
  result = straitCommInitFromEnv(&comm, &config);
  if (result != straitSuccess) return fail("straitCommInitFromEnv", result);
  straitCommUserRank(comm, &rank);
  straitCommCount(comm, &size);
  straitGetVersion(&version);
  if (version != STRAIT_VERSION_CODE) {
    fprintf(stderr, "rank %d: library version %d, header %d\n", rank, version, STRAIT_VERSION_CODE);
    return 1;
  }

  /* x[i] = (rank + 1) * (i + 1): the sum over ranks is (i + 1) * P(P + 1)/2, exact in f64. */
  for (i = 0; i < COUNT; ++i) x[i] = (rank + 1.0) * (i + 1);
  result = straitAllReduce(x, x, COUNT, straitFloat64, straitSum, comm, NULL);
  if (result != straitSuccess) return fail("straitAllReduce", result);
  for (i = 0; i < COUNT; ++i) wrong += x[i] != (i + 1) * (size * (size + 1) / 2.0);

  /* The max over ranks of y[i] = i * (rank + 1) - rank is i * P - (P - 1) for i >= 1, 0 at 0. */
  for (i = 0; i < COUNT; ++i) y[i] = i * (rank + 1) - rank;
  result = straitAllReduceAsync(y, y_max, COUNT, straitInt32, straitMax, comm, NULL, &request);
  if (result != straitSuccess) return fail("straitAllReduceAsync", result);
  result = straitWait(request, STRAIT_WAIT_DEADLINE);
  if (result != straitSuccess) return fail("straitWait", result);
  straitRequestFree(request);
  wrong += y_max[0] != 0;
  for (i = 1; i < COUNT; ++i) wrong += y_max[i] != i * size - (size - 1);

  /* A negative count is refused before anything is sent. */
  result = straitAllReduce(x, x, -1, straitFloat64, straitSum, comm, NULL);
  if (result != straitInvalidArgument) {
    fprintf(stderr, "rank %d: a negative count gave %s\n", rank, straitGetErrorString(result));
    ++wrong;
  }
  straitCommDestroy(comm);
  if (wrong != 0) {
    fprintf(stderr, "rank %d: %d wrong results\n", rank, wrong);
    return 1;
  }
  printf("rank %d of %d: allreduce f64 sum, async i32 max and a bad argument OK (C99)\n", rank,
         size);
  return EXIT_SUCCESS;
}
