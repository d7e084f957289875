// Row-major GEMM for float and double through OpenBLAS (cblas_sgemm / cblas_dgemm).
//
// c[m, n] = alpha * op(a)[m, k] . op(b)[k, n] + beta * c[m, n], where op(x) is x or x^T. All
// matrices are row-major with leading dimensions (row strides, in elements) lda, ldb, ldc, so a
// column slice of a wider matrix (a head of qkv) is passed as a pointer plus the wide row stride.
// beta = 1 accumulates into c, which is how the transformer backward passes add into gradients.
// k = 0 scales c by beta; m = 0 or n = 0 does nothing.
// Thread-safety: reentrant; OpenBLAS may use its own threads (openblas_set_num_threads).
// Errors: InvalidArgument for negative sizes or a leading dimension smaller than a row.
#pragma once

#include <cstdint>

namespace strait::kernels {

enum class Trans : std::uint8_t { No, Yes };

// Threads OpenBLAS may use for one GEMM in this process (>= 1). Ranks sharing a machine should
// split its cores between them rather than oversubscribe.
void set_gemm_threads(int threads);

template <class F>
void gemm(Trans ta, Trans tb, int m, int n, int k, F alpha, const F* a, int lda, const F* b,
          int ldb, F beta, F* c, int ldc);

}  // namespace strait::kernels
