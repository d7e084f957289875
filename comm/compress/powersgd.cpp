#include "comm/compress/powersgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "comm/compress/codec_args.h"
#include "core/error.h"

// The loops below run at the widest vector unit of the CPU (GCC's function multiversioning).
// Without fused multiply-add (-ffp-contract=off for this file) every clone does the same IEEE
// operations per element, so low_rank_product's bits do not depend on which one runs.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRAIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STRAIT_VECTOR_CLONES
#endif

namespace strait::comm {
namespace {

constexpr std::string_view kName = "powersgd";
constexpr std::size_t kMaxRank = 65536;

std::uint64_t splitmix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A double in (0, 1] from the top 53 bits: log() of it is finite.
double unit(std::uint64_t bits) noexcept {
  return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53;
}

std::uint64_t fnv(std::uint64_t h, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffU)) * 0x100000001b3ULL;
  return h;
}

std::string describe(std::size_t index, const MatrixShape& m) {
  return fmt::format("matrices[{}] (offset {}, {} x {})", index, m.offset, m.rows, m.cols);
}

// The largest divisor of n that is <= sqrt(n) (n > 0).
std::size_t near_square_rows(std::size_t n) {
  auto r = static_cast<std::size_t>(std::sqrt(static_cast<double>(n)));
  while (r * r > n) --r;
  while ((r + 1) * (r + 1) <= n) ++r;
  for (; r > 1; --r) {
    if (n % r == 0) return r;
  }
  return 1;
}

}  // namespace

bool PowerSgdOptions::names_powersgd(std::string_view spec) noexcept {
  return spec == kName ||
         (spec.starts_with(kName) && spec.size() > kName.size() && spec[kName.size()] == ':');
}

PowerSgdOptions PowerSgdOptions::parse(std::string_view spec) {
  if (!names_powersgd(spec)) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("'{}' is not a powersgd spec", spec));
  }
  const std::string_view args =
      spec.size() > kName.size() ? spec.substr(kName.size() + 1) : std::string_view{};
  const detail::CodecArgs parsed(kName, args, {"rank", "min_compression", "warm_start", "seed"});
  PowerSgdOptions o;
  o.rank = parsed.get_uint("rank", o.rank);
  if (o.rank == 0 || o.rank > kMaxRank) parsed.fail_value("rank", "expected 1 .. 65536");
  o.min_compression = parsed.get_double("min_compression", o.min_compression);
  if (!(o.min_compression >= 1.0)) {
    parsed.fail_value("min_compression", "expected a number >= 1 (compression must gain)");
  }
  o.warm_start = parsed.get_bool("warm_start", o.warm_start);
  o.seed = parsed.get_uint("seed", o.seed);
  return o;
}

std::string PowerSgdOptions::spec() const {
  return fmt::format("{}:rank={},min_compression={},warm_start={},seed={}", kName, rank,
                     min_compression, warm_start ? 1 : 0, seed);
}

bool PowerSgdOptions::should_compress(std::size_t rows, std::size_t cols) const noexcept {
  const double compressed = static_cast<double>(rows + cols) * static_cast<double>(rank);
  return compressed * min_compression < static_cast<double>(rows) * static_cast<double>(cols);
}

std::uint64_t PowerSgdPlan::hash(std::string_view spec) const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : spec) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  h = fnv(h, count);
  for (const auto& m : compressed) h = fnv(fnv(fnv(h, m.offset), m.rows), m.cols);
  return h;
}

PowerSgdPlan plan_powersgd(std::size_t count, std::span<const MatrixShape> matrices,
                           const PowerSgdOptions& options) {
  PowerSgdPlan plan;
  plan.count = count;
  plan.rank = options.rank;
  plan.layout_matrices = matrices.size();
  if (matrices.empty()) {
    if (count != 0) {
      const std::size_t rows = near_square_rows(count);
      const std::size_t cols = count / rows;
      if (options.should_compress(rows, cols)) {
        plan.compressed.push_back(MatrixShape{0, rows, cols});
      }
    }
  } else {
    std::vector<std::size_t> order(matrices.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      const MatrixShape& m = matrices[i];
      const bool overflows =
          m.cols != 0 && m.rows > std::numeric_limits<std::size_t>::max() / m.cols;
      if (overflows || m.offset > count || m.rows * m.cols > count - m.offset) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("allreduce_compressed ({}): {} reaches past the buffer of {} "
                                "elements",
                                kName, describe(i, m), count));
      }
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return matrices[a].offset < matrices[b].offset;
    });
    // Sorted by offset, a matrix overlaps another only if it overlaps the one before it that
    // reaches furthest.
    std::size_t reach = 0;
    std::size_t reacher = 0;
    for (const std::size_t i : order) {
      const MatrixShape& m = matrices[i];
      const std::size_t size = m.rows * m.cols;
      if (size == 0) continue;
      if (m.offset < reach) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("allreduce_compressed ({}): {} and {} overlap: each element "
                                "belongs to one matrix at most",
                                kName, describe(reacher, matrices[reacher]), describe(i, m)));
      }
      reach = m.offset + size;
      reacher = i;
      if (options.should_compress(m.rows, m.cols)) plan.compressed.push_back(m);
    }
  }
  std::size_t at = 0;
  for (const auto& m : plan.compressed) {
    if (m.offset > at) plan.plain.push_back(ElementRange{at, m.offset - at});
    at = m.offset + m.rows * m.cols;
    plan.p_count += m.rows * plan.rank;
    plan.q_count += m.cols * plan.rank;
  }
  if (at < count) plan.plain.push_back(ElementRange{at, count - at});
  for (const auto& r : plan.plain) plan.plain_count += r.count;
  return plan;
}

void powersgd_random_normal(std::uint64_t seed, std::uint64_t call, std::size_t matrix,
                            std::span<float> out) {
  const std::uint64_t base = splitmix(splitmix(splitmix(seed) ^ call) ^ matrix);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t a = splitmix(base ^ (2 * i));
    const std::uint64_t b = splitmix(base ^ (2 * i + 1));
    const double radius = std::sqrt(-2.0 * std::log(unit(a)));
    out[i] = static_cast<float>(radius * std::cos(2.0 * std::numbers::pi * unit(b)));
  }
}

std::size_t orthogonalize_columns(float* a, std::size_t rows, std::size_t cols) {
  std::size_t zeroed = 0;
  const auto at = [&](std::size_t i, std::size_t j) -> float& { return a[i * cols + j]; };
  for (std::size_t k = 0; k < cols; ++k) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t j = 0; j < k; ++j) {
        double dot = 0.0;
        for (std::size_t i = 0; i < rows; ++i) dot += double{at(i, j)} * double{at(i, k)};
        const auto d = static_cast<float>(dot);
        for (std::size_t i = 0; i < rows; ++i) at(i, k) -= d * at(i, j);
      }
    }
    double norm2 = 0.0;
    for (std::size_t i = 0; i < rows; ++i) norm2 += double{at(i, k)} * double{at(i, k)};
    const double norm = std::sqrt(norm2);
    const float inv = norm < 1e-30 ? 0.0F : static_cast<float>(1.0 / norm);
    if (inv == 0.0F) ++zeroed;
    for (std::size_t i = 0; i < rows; ++i) at(i, k) *= inv;
  }
  return zeroed;
}

// Blocks of the loops below: kLanes partial sums or outputs stay in vector registers, kGroup
// factor columns share one read of a row of m.
constexpr std::size_t kLanes = 16;
constexpr std::size_t kGroup = 4;

// The clones have internal linkage and the declared functions below call them: GCC gives a
// target_clones function's ifunc default visibility whatever -fvisibility or its attributes say,
// so an external one would be exported from libstrait.so.
namespace {

STRAIT_VECTOR_CLONES void matrix_times_factor_clones(const float* m, std::size_t rows,
                                                     std::size_t cols, std::size_t ld,
                                                     const float* q, std::size_t r, float* p,
                                                     std::vector<float>& scratch) {
  // q^T, so that each dot product runs along a row of m and a row of q^T.
  scratch.resize(r * cols);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t k = 0; k < r; ++k) scratch[k * cols + j] = q[j * r + k];
  }
  const std::size_t whole = cols - cols % kLanes;
  std::size_t i = 0;
  if (r == kGroup) {
    // r = 4 (the default) on kGroup rows at once: q^T is read once per kGroup rows of m.
    for (; i + kGroup <= rows; i += kGroup) {
      std::array<std::array<std::array<float, kLanes>, kGroup>, kGroup> acc{};
      for (std::size_t j = 0; j < whole; j += kLanes) {
        for (std::size_t rr = 0; rr < kGroup; ++rr) {
          const float* row = m + (i + rr) * ld + j;
          for (std::size_t g = 0; g < kGroup; ++g) {
            const float* qk = scratch.data() + g * cols + j;
            for (std::size_t l = 0; l < kLanes; ++l) acc[rr][g][l] += row[l] * qk[l];
          }
        }
      }
      for (std::size_t rr = 0; rr < kGroup; ++rr) {
        const float* row = m + (i + rr) * ld;
        for (std::size_t g = 0; g < kGroup; ++g) {
          float sum = 0.0F;
          for (const float a : acc[rr][g]) sum += a;
          for (std::size_t j = whole; j < cols; ++j) sum += row[j] * scratch[g * cols + j];
          p[(i + rr) * r + g] = sum;
        }
      }
    }
  }
  for (; i < rows; ++i) {
    const float* row = m + i * ld;
    std::size_t k = 0;
    for (; k + kGroup <= r; k += kGroup) {
      std::array<std::array<float, kLanes>, kGroup> acc{};
      const float* qk = scratch.data() + k * cols;
      for (std::size_t j = 0; j < whole; j += kLanes) {
        for (std::size_t g = 0; g < kGroup; ++g) {
          for (std::size_t l = 0; l < kLanes; ++l) {
            acc[g][l] += row[j + l] * qk[g * cols + j + l];
          }
        }
      }
      for (std::size_t g = 0; g < kGroup; ++g) {
        float sum = 0.0F;
        for (const float a : acc[g]) sum += a;
        for (std::size_t j = whole; j < cols; ++j) sum += row[j] * qk[g * cols + j];
        p[i * r + k + g] = sum;
      }
    }
    for (; k < r; ++k) {
      const float* qk = scratch.data() + k * cols;
      std::array<float, kLanes> acc{};
      for (std::size_t j = 0; j < whole; j += kLanes) {
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += row[j + l] * qk[j + l];
      }
      float sum = 0.0F;
      for (const float a : acc) sum += a;
      for (std::size_t j = whole; j < cols; ++j) sum += row[j] * qk[j];
      p[i * r + k] = sum;
    }
  }
}

STRAIT_VECTOR_CLONES void matrix_transposed_times_factor_clones(const float* m, std::size_t rows,
                                                                std::size_t cols, std::size_t ld,
                                                                const float* p, std::size_t r,
                                                                float* q,
                                                                std::vector<float>& scratch) {
  // q^T (r x cols) accumulated over kGroup rows of m at a time: each row of m is read once, and
  // q^T (in cache) is updated once per kGroup rows.
  scratch.assign(r * cols, 0.0F);
  std::size_t i = 0;
  for (; i + kGroup <= rows; i += kGroup) {
    const float* r0 = m + i * ld;
    const float* r1 = r0 + ld;
    const float* r2 = r1 + ld;
    const float* r3 = r2 + ld;
    for (std::size_t k = 0; k < r; ++k) {
      const float p0 = p[i * r + k];
      const float p1 = p[(i + 1) * r + k];
      const float p2 = p[(i + 2) * r + k];
      const float p3 = p[(i + 3) * r + k];
      float* qk = scratch.data() + k * cols;
      for (std::size_t j = 0; j < cols; ++j) {
        qk[j] += ((p0 * r0[j] + p1 * r1[j]) + (p2 * r2[j] + p3 * r3[j]));
      }
    }
  }
  for (; i < rows; ++i) {
    const float* row = m + i * ld;
    for (std::size_t k = 0; k < r; ++k) {
      const float pik = p[i * r + k];
      float* qk = scratch.data() + k * cols;
      for (std::size_t j = 0; j < cols; ++j) qk[j] += pik * row[j];
    }
  }
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t k = 0; k < r; ++k) q[j * r + k] = scratch[k * cols + j];
  }
}

STRAIT_VECTOR_CLONES void low_rank_product_clones(const float* p, const float* q, std::size_t rows,
                                                  std::size_t cols, std::size_t r, float* out,
                                                  std::size_t ld, std::vector<float>& qt) {
  // q^T, r x cols, so the inner loops run along a row of out.
  qt.resize(r * cols);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t k = 0; k < r; ++k) qt[k * cols + j] = q[j * r + k];
  }
  // Every element is p[i][0] q[j][0] + p[i][1] q[j][1] + ..., added in that order (kLanes of them
  // at a time in registers, then stored once).
  const std::size_t whole = cols - cols % kLanes;
  for (std::size_t i = 0; i < rows; ++i) {
    float* row = out + i * ld;
    const float* pi = p + i * r;
    for (std::size_t j = 0; j < whole; j += kLanes) {
      std::array<float, kLanes> acc{};
      for (std::size_t l = 0; l < kLanes; ++l) acc[l] = pi[0] * qt[j + l];
      for (std::size_t k = 1; k < r; ++k) {
        const float* qk = qt.data() + k * cols + j;
        for (std::size_t l = 0; l < kLanes; ++l) acc[l] += pi[k] * qk[l];
      }
      for (std::size_t l = 0; l < kLanes; ++l) row[j + l] = acc[l];
    }
    for (std::size_t j = whole; j < cols; ++j) {
      float acc = pi[0] * qt[j];
      for (std::size_t k = 1; k < r; ++k) acc += pi[k] * qt[k * cols + j];
      row[j] = acc;
    }
  }
}

}  // namespace

void matrix_times_factor(const float* m, std::size_t rows, std::size_t cols, std::size_t ld,
                         const float* q, std::size_t r, float* p, std::vector<float>& scratch) {
  matrix_times_factor_clones(m, rows, cols, ld, q, r, p, scratch);
}

void matrix_transposed_times_factor(const float* m, std::size_t rows, std::size_t cols,
                                    std::size_t ld, const float* p, std::size_t r, float* q,
                                    std::vector<float>& scratch) {
  matrix_transposed_times_factor_clones(m, rows, cols, ld, p, r, q, scratch);
}

void low_rank_product(const float* p, const float* q, std::size_t rows, std::size_t cols,
                      std::size_t r, float* out, std::size_t ld, std::vector<float>& qt) {
  low_rank_product_clones(p, q, rows, cols, r, out, ld, qt);
}

}  // namespace strait::comm
