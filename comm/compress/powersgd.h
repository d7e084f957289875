// PowerSGD's parts that do not talk to the network: its spec ("powersgd:rank=4,..."), the plan of
// which matrices of a buffer it compresses, and the deterministic fp32 numerics every rank must run
// identically (Vogels, Karimireddy & Jaggi, NeurIPS 2019, "PowerSGD: Practical Low-Rank Gradient
// Compression"; the algorithm and its wire bytes: comm/algorithms/powersgd_allreduce.h).
//
// Spec: "powersgd" or "powersgd:key=value,...", canonical form
// "powersgd:rank=4,min_compression=2,warm_start=1,seed=0":
//   rank             r, the rank of the approximation (default 4, 1 .. 65536)
//   min_compression  compress a rows x cols matrix only when (rows + cols) * r * min_compression <
//                    rows * cols (PyTorch's _should_compress; default 2, at least 1)
//   warm_start       start each call's power iteration from the key's last Q (default 1)
//   seed             the seed of the first Q, N(0, 1) (default 0)
// Matrices are row-major f32, shapes in elements. Thread-safety: the functions are pure
// (reentrant).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/compress/matrix_shape.h"

namespace strait::comm {

struct PowerSgdOptions {
  std::size_t rank{4};
  double min_compression{2.0};
  bool warm_start{true};
  std::uint64_t seed{0};

  // Whether `spec` names PowerSGD ("powersgd" or "powersgd:...").
  static bool names_powersgd(std::string_view spec) noexcept;
  // Throws InvalidArgument naming the bad key and the valid ones.
  static PowerSgdOptions parse(std::string_view spec);
  // The canonical spec, what ranks compare (through the fingerprint).
  [[nodiscard]] std::string spec() const;
  // PyTorch's _should_compress: whether a rows x cols matrix gains at least min_compression.
  [[nodiscard]] bool should_compress(std::size_t rows, std::size_t cols) const noexcept;
};

// A run of consecutive elements, [offset, offset + count).
struct ElementRange {
  std::size_t offset{};
  std::size_t count{};
};

// What one call compresses: the matrices worth it, sorted by offset, and every other element
// (outside all matrices, or in a matrix too small to gain), which goes uncompressed.
struct PowerSgdPlan {
  std::size_t count{};                  // elements of the buffer
  std::size_t rank{};                   // r
  std::vector<MatrixShape> compressed;  // sorted by offset, disjoint
  std::vector<ElementRange> plain;      // the rest, in order, maximal runs
  std::size_t plain_count{};            // elements in `plain`
  std::size_t p_count{};                // sum of rows * r: the P factors
  std::size_t q_count{};                // sum of cols * r: the Q factors
  std::size_t layout_matrices{};        // matrices the caller gave (0: the default layout)

  // f32 elements each allreduce carries: the first plain_count + p_count, the second q_count.
  [[nodiscard]] std::size_t first_count() const noexcept { return plain_count + p_count; }
  // FNV-1a over the spec and the plan: ranks whose plans differ fail with Mismatch.
  [[nodiscard]] std::uint64_t hash(std::string_view spec) const noexcept;
};

// The plan of a `count`-element buffer for `matrices` (elements, row-major; the order does not
// matter). Empty `matrices`: the buffer viewed as one rows x cols matrix, rows the largest divisor
// of count <= sqrt(count) (4096 x 4096 for 16M), compressed if it gains (a prime count does not).
// Throws InvalidArgument naming the matrix for one that reaches past the buffer, and naming both
// for two that overlap.
PowerSgdPlan plan_powersgd(std::size_t count, std::span<const MatrixShape> matrices,
                           const PowerSgdOptions& options);

// Draws `out` from N(0, 1), a pure function of (seed, call, matrix, index): every rank draws the
// same values. SplitMix64, then Box-Muller in double.
void powersgd_random_normal(std::uint64_t seed, std::uint64_t call, std::size_t matrix,
                            std::span<float> out);

// Orthonormalizes the columns of a (rows x cols, row-major) in place: Gram-Schmidt, each column
// projected out of the earlier ones twice ("twice is enough", Giraud et al. 2005) so that
// numerically dependent columns still come out orthogonal, then normalized. Sums in double, a fixed
// order, fp32 storage: the same input gives the same bits on every rank. A column whose norm is
// below 1e-30 after the projections (an all-zero gradient) becomes zero rather than NaN: where
// PyTorch adds an epsilon to the norm, this leaves the column out of the approximation. Returns
// how many columns became zero.
std::size_t orthogonalize_columns(float* a, std::size_t rows, std::size_t cols);

// The two products of the power iteration, streaming over m (rows x cols, row-major, leading
// dimension ld) once each: a BLAS GEMM would first copy (pack) all of m for a product only r
// columns wide. p (rows x r) = m q (q: cols x r); q (cols x r) = m^T p (p: rows x r). fp32 sums
// in an order the CPU's vector width decides, so not bit-identical across machines: PowerSGD
// allreduces both results, and only the allreduced values must agree. `scratch` is resized.
void matrix_times_factor(const float* m, std::size_t rows, std::size_t cols, std::size_t ld,
                         const float* q, std::size_t r, float* p, std::vector<float>& scratch);
void matrix_transposed_times_factor(const float* m, std::size_t rows, std::size_t cols,
                                    std::size_t ld, const float* p, std::size_t r, float* q,
                                    std::vector<float>& scratch);

// out (rows x cols, row-major, leading dimension ld) = p (rows x r) * q^T (q: cols x r), in fp32
// with a fixed order of operations (k ascending, no BLAS, no fused multiply-add: the file is built
// with -ffp-contract=off), so equal p and q give equal bits on every rank and every CPU, whichever
// vector width runs it. r >= 1; `qt` is scratch (resized to r * cols).
void low_rank_product(const float* p, const float* q, std::size_t rows, std::size_t cols,
                      std::size_t r, float* out, std::size_t ld, std::vector<float>& qt);

}  // namespace strait::comm
