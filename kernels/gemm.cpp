#include "kernels/gemm.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cstddef>
#include <type_traits>

#include "core/error.h"

namespace strait::kernels {
namespace {

CBLAS_TRANSPOSE to_cblas(Trans t) {
  return t == Trans::Yes ? CblasTrans : CblasNoTrans;
}

void check(Trans ta, Trans tb, int m, int n, int k, int lda, int ldb, int ldc) {
  // Row-major: a stored row holds k elements of op(a) when not transposed, m when transposed.
  const int a_row = ta == Trans::No ? k : m;
  const int b_row = tb == Trans::No ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < a_row || ldb < b_row || ldc < n) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::gemm: bad shape m={} n={} k={} lda={} ldb={} ldc={}: sizes "
                            "must be >= 0 and each leading dimension >= its stored row length",
                            m, n, k, lda, ldb, ldc));
  }
}

}  // namespace

void set_gemm_threads(int threads) {
  if (threads < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::set_gemm_threads: {} threads; give at least 1", threads));
  }
  openblas_set_num_threads(threads);
}

template <class F>
void gemm(Trans ta, Trans tb, int m, int n, int k, F alpha, const F* a, int lda, const F* b,
          int ldb, F beta, F* c, int ldc) {
  check(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // Nothing to multiply; BLAS would also reject lda = 0.
    for (int i = 0; i < m; ++i) {
      F* row = c + static_cast<std::ptrdiff_t>(i) * ldc;
      for (int j = 0; j < n; ++j) row[j] = beta == F(0) ? F(0) : beta * row[j];
    }
    return;
  }
  if constexpr (std::is_same_v<F, float>) {
    cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
  } else {
    cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
  }
}

template void gemm<float>(Trans, Trans, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(Trans, Trans, int, int, int, double, const double*, int, const double*,
                           int, double, double*, int);

}  // namespace strait::kernels
