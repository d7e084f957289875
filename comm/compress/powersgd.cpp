#include "comm/compress/powersgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "comm/compress/codec_args.h"
#include "core/error.h"

namespace strait::comm {
namespace {

constexpr std::string_view kName = "powersgd";
constexpr std::size_t kMaxRank = 65536;
// The GEMM takes int sizes.
constexpr auto kMaxSide = static_cast<std::size_t>(std::numeric_limits<int>::max());

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
      if (cols <= kMaxSide && options.should_compress(rows, cols)) {
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
      if (m.rows > kMaxSide || m.cols > kMaxSide) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("allreduce_compressed ({}): {} has a side of 2^31 or more "
                                "elements, more than the GEMM takes",
                                kName, describe(i, m)));
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

void low_rank_product(const float* p, const float* q, std::size_t rows, std::size_t cols,
                      std::size_t r, float* out, std::size_t ld, std::vector<float>& qt) {
  // q^T, r x cols, so the inner loop runs along a row of out.
  qt.resize(r * cols);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t k = 0; k < r; ++k) qt[k * cols + j] = q[j * r + k];
  }
  for (std::size_t i = 0; i < rows; ++i) {
    float* row = out + i * ld;
    const float* pi = p + i * r;
    const float p0 = r == 0 ? 0.0F : pi[0];
    for (std::size_t j = 0; j < cols; ++j) row[j] = r == 0 ? 0.0F : p0 * qt[j];
    for (std::size_t k = 1; k < r; ++k) {
      const float pk = pi[k];
      const float* qk = qt.data() + k * cols;
      for (std::size_t j = 0; j < cols; ++j) row[j] += pk * qk[j];
    }
  }
}

}  // namespace strait::comm
