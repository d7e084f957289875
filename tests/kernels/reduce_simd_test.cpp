// reduce() and scale() on every SIMD level this CPU runs (scalar, AVX2, AVX-512), for every dtype,
// op, a spread of counts (tails of every length) and misaligned buffers, against a naive
// reference computed here: double precision for floats, rounded once to the element type (or to
// f32 and then to f16/bf16 by the software conversions of kernels/dtype.h), exact integer
// arithmetic wrapped to the element width. Results must match bit for bit; the only freedom is
// the documented one (Sum/Prod of two NaNs may give either NaN). Bytes around the buffers must
// be left alone, and `in` unchanged.
#include "kernels/reduce_simd.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"
#include "tests/common/simd_levels.h"

namespace strait::kernels {
namespace {

constexpr std::array kDtypes = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                DType::I8,  DType::U8,  DType::I32, DType::I64};
constexpr std::array kOps = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};

inline std::vector<SimdLevel> cpu_levels() {
  return test::supported_simd_levels();
}
using LevelScope = test::ScopedSimdLevel;

// ---- element access by dtype, as raw bits ----

std::uint64_t get_bits(DType t, const unsigned char* p, std::size_t i) {
  const std::size_t sz = dtype_size(t);
  std::uint64_t v = 0;
  std::memcpy(&v, p + i * sz, sz);  // little-endian: the low bytes
  return v;
}

void put_bits(DType t, unsigned char* p, std::size_t i, std::uint64_t v) {
  const std::size_t sz = dtype_size(t);
  std::memcpy(p + i * sz, &v, sz);
}

float bits_f32(std::uint64_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b));
}
double bits_f64(std::uint64_t b) {
  return std::bit_cast<double>(b);
}
std::uint64_t f32_bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}
std::uint64_t f64_bits(double d) {
  return std::bit_cast<std::uint64_t>(d);
}

// The f32 value of a float element (f16/bf16 widened by kernels/dtype.h).
float widen(DType t, std::uint64_t b) {
  const auto h = static_cast<std::uint16_t>(b);
  switch (t) {
    case DType::F16: return f16_to_f32(h);
    case DType::BF16: return bf16_to_f32(h);
    default: return bits_f32(b);
  }
}

std::uint64_t narrow(DType t, float f) {
  switch (t) {
    case DType::F16: return f32_to_f16(f);
    case DType::BF16: return f32_to_bf16(f);
    default: return f32_bits(f);
  }
}

bool is_nan(DType t, std::uint64_t b) {
  if (t == DType::F64) return std::isnan(bits_f64(b));
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) return std::isnan(widen(t, b));
  return false;
}

// The NaN x, quieted, as the element type stores it.
std::uint64_t quieted(DType t, std::uint64_t b) {
  if (t == DType::F64) return b | 0x0008000000000000ULL;
  if (t == DType::F32) return b | 0x00400000U;
  return narrow(t, widen(t, b));  // f16: sign | 0x7e00; bf16: | 0x40
}

// std::min / std::max written out: the documented semantics, with x the inout element.
template <class T>
T ref_min(T x, T y) {
  return y < x ? y : x;
}
template <class T>
T ref_max(T x, T y) {
  return x < y ? y : x;
}

// f32 result of x (op) y: computed in double and rounded once (double has more than 2 * 24 + 2
// bits, so this is the correctly rounded f32 result).
float ref_f32(ReduceOp op, float x, float y) {
  const double dx = x;
  const double dy = y;
  switch (op) {
    case ReduceOp::Sum: return static_cast<float>(dx + dy);
    case ReduceOp::Prod: return static_cast<float>(dx * dy);
    case ReduceOp::Min: return ref_min(x, y);
    case ReduceOp::Max: return ref_max(x, y);
    case ReduceOp::Avg:
    case ReduceOp::Band:
    case ReduceOp::Bor:
    case ReduceOp::Bxor: break;  // not elementwise / integer-only: reduce_bitwise_test.cpp
  }
  return 0.0F;
}

template <class T>
std::uint64_t ref_int(ReduceOp op, std::uint64_t xb, std::uint64_t yb) {
  T x;
  T y;
  std::memcpy(&x, &xb, sizeof(T));
  std::memcpy(&y, &yb, sizeof(T));
  // Exact in 64 bits for 8- and 32-bit types; for 64-bit types, unsigned arithmetic is exact
  // modulo 2^64. Converting back to T wraps (modular since C++20).
  using Wide = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::int64_t>;
  // Sign-extending an int8_t is what is meant here.
  const auto wx = static_cast<Wide>(x);  // NOLINT(bugprone-signed-char-misuse)
  const auto wy = static_cast<Wide>(y);  // NOLINT(bugprone-signed-char-misuse)
  T r{};
  switch (op) {
    case ReduceOp::Sum: r = static_cast<T>(wx + wy); break;
    case ReduceOp::Prod: r = static_cast<T>(wx * wy); break;
    case ReduceOp::Min: r = ref_min(x, y); break;
    case ReduceOp::Max: r = ref_max(x, y); break;
    case ReduceOp::Avg:
    case ReduceOp::Band:
    case ReduceOp::Bor:
    case ReduceOp::Bxor: break;  // not elementwise / integer-only: reduce_bitwise_test.cpp
  }
  std::uint64_t out = 0;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

// The expected bits of x (op) y, and the other allowed bits (the same, except for Sum/Prod of two
// NaNs: either NaN, quieted).
struct Expected {
  std::uint64_t want;
  std::uint64_t alt;
};

Expected reference(DType t, ReduceOp op, std::uint64_t x, std::uint64_t y) {
  const bool arith = op == ReduceOp::Sum || op == ReduceOp::Prod;
  if (arith && is_nan(t, x) && is_nan(t, y)) return {quieted(t, x), quieted(t, y)};
  std::uint64_t r = 0;
  switch (t) {
    case DType::F64: {
      const double dx = bits_f64(x);
      const double dy = bits_f64(y);
      double d = 0;
      switch (op) {
        case ReduceOp::Sum: d = dx + dy; break;
        case ReduceOp::Prod: d = dx * dy; break;
        case ReduceOp::Min: d = ref_min(dx, dy); break;
        case ReduceOp::Max: d = ref_max(dx, dy); break;
        case ReduceOp::Avg:
        case ReduceOp::Band:
        case ReduceOp::Bor:
        case ReduceOp::Bxor: break;  // not elementwise / integer-only: reduce_bitwise_test.cpp
      }
      r = f64_bits(d);
      break;
    }
    case DType::F32:
    case DType::F16:
    case DType::BF16: r = narrow(t, ref_f32(op, widen(t, x), widen(t, y))); break;
    case DType::I8: r = ref_int<std::int8_t>(op, x, y); break;
    case DType::U8: r = ref_int<std::uint8_t>(op, x, y); break;
    case DType::I32: r = ref_int<std::int32_t>(op, x, y); break;
    case DType::I64: r = ref_int<std::int64_t>(op, x, y); break;
  }
  return {r, r};
}

// ---- inputs ----

// Values every dtype must get right: zeros of both signs, Inf, NaNs (quiet, signalling, with
// payloads, negative), subnormals, the largest finite values, rounding ties, f16 overflow.
std::vector<std::uint64_t> specials(DType t) {
  switch (t) {
    case DType::F32:
      return {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
              0x7fc00000, 0xffc00000, 0x7f800001, 0xff812345, 0x7fc12345, 0x7fbfffff,
              0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
              0x3f808000, 0x3f818000, 0x33800000, 0x4b800000, 0x34000000, 0xcb800001};
    case DType::F64:
      return {0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000, 0xbff0000000000000,
              0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0xfff8000000000000,
              0x7ff0000000000001, 0xfff0000000abcdef, 0x7ff80000deadbeef, 0x0000000000000001,
              0x800fffffffffffff, 0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
              0x3ca0000000000000, 0x4340000000000000, 0x3ff0000000000001};
    case DType::F16:
      return {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01,
              0xfd55, 0x7e3f, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7bfe,
              0x4800, 0x4c00, 0x5000, 0x1400, 0x0200, 0x5bff, 0x3555};
    case DType::BF16:
      return {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0xffc0,
              0x7f81, 0xff95, 0x7fe3, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f,
              0xff7f, 0x3b80, 0x3f81, 0x3c00, 0x4b80, 0x3f7f, 0x0100};
    case DType::I8:
    case DType::U8: return {0x00, 0x01, 0xff, 0x7f, 0x80, 0x81, 0x7e, 0x10, 0x02, 0xfe};
    case DType::I32:
      return {0x00000000, 0x00000001, 0xffffffff, 0x7fffffff, 0x80000000,
              0x80000001, 0x00010000, 0x0000ffff, 0xfffe0000, 0x00000002};
    case DType::I64:
      return {0x0000000000000000, 0x0000000000000001, 0xffffffffffffffff, 0x7fffffffffffffff,
              0x8000000000000000, 0x8000000000000001, 0x0000000100000000, 0x00000000ffffffff,
              0xffffffff00000000, 0x0000000200000003, 0x123456789abcdef0};
  }
  return {};
}

// n values: a quarter specials, a quarter raw random bits (every exponent, NaNs, subnormals), and
// half "ordinary" values of similar size so that sums round and products may overflow.
std::vector<std::uint64_t> make_values(DType t, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto sp = specials(t);
  const std::uint64_t mask = dtype_size(t) == 8 ? ~0ULL : (1ULL << (8 * dtype_size(t))) - 1;
  std::uniform_real_distribution<double> ordinary(-300.0, 300.0);
  std::vector<std::uint64_t> v(n);
  for (auto& x : v) {
    const std::uint64_t r = rng();
    switch (r & 3U) {
      case 0: x = sp[(r >> 8) % sp.size()]; break;
      case 1: x = rng() & mask; break;
      default: {
        const double d = ordinary(rng);
        if (t == DType::F64) {
          x = f64_bits(d);
        } else if (dtype_is_float(t)) {
          x = narrow(t, static_cast<float>(d));
        } else {
          x = static_cast<std::uint64_t>(static_cast<std::int64_t>(d)) & mask;
        }
      }
    }
  }
  return v;
}

// ---- running one configuration ----

// A buffer with 64 guard bytes before and after the data, the data at `offset` bytes past a
// 64-byte boundary.
class Guarded {
 public:
  static constexpr unsigned char kCanary = 0xa5;
  Guarded(std::size_t bytes, std::size_t offset) : bytes_(bytes), storage_(bytes + 256, kCanary) {
    auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    const std::size_t lead = (64 - addr % 64) % 64 + 64 + offset;
    data_ = storage_.data() + lead;
  }
  unsigned char* data() { return data_; }
  bool guards_intact() const {
    for (const unsigned char* p = storage_.data(); p < data_; ++p) {
      if (*p != kCanary) return false;
    }
    for (const unsigned char* p = data_ + bytes_; p < storage_.data() + storage_.size(); ++p) {
      if (*p != kCanary) return false;
    }
    return true;
  }

 private:
  std::size_t bytes_;
  std::vector<unsigned char> storage_;
  unsigned char* data_ = nullptr;
};

struct Inputs {
  DType t;
  ReduceOp op;
  std::vector<unsigned char> x, y;       // raw elements
  std::vector<std::uint64_t> want, alt;  // x (op) y
  std::vector<std::uint64_t> want_self;  // x (op) x
};

Inputs make_inputs(DType t, ReduceOp op, std::size_t n) {
  Inputs in{t, op, {}, {}, {}, {}, {}};
  const std::size_t sz = dtype_size(t);
  const auto seed = static_cast<std::uint64_t>(n) * 131 + static_cast<std::uint64_t>(t) * 7 +
                    static_cast<std::uint64_t>(op);
  const auto xs = make_values(t, n, seed);
  const auto ys = make_values(t, n, seed ^ 0x9e3779b97f4a7c15ULL);
  in.x.resize(n * sz);
  in.y.resize(n * sz);
  in.want.resize(n);
  in.alt.resize(n);
  in.want_self.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    put_bits(t, in.x.data(), i, xs[i]);
    put_bits(t, in.y.data(), i, ys[i]);
    const Expected e = reference(t, op, xs[i], ys[i]);
    in.want[i] = e.want;
    in.alt[i] = e.alt;
    in.want_self[i] = reference(t, op, xs[i], xs[i]).want;
  }
  return in;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Runs reduce() at the current level with x at byte offset off_x and y at off_y (or in place when
// aliased), and reports the first wrong element. Returns false on a failure.
bool run_case(const Inputs& in, std::size_t off_x, std::size_t off_y, bool aliased,
              const std::string& where) {
  const std::size_t bytes = in.x.size();
  const std::size_t n = in.want.size();
  Guarded a(bytes, off_x);
  Guarded b(bytes, off_y);
  if (bytes != 0) std::memcpy(a.data(), in.x.data(), bytes);
  if (bytes != 0) std::memcpy(b.data(), in.y.data(), bytes);
  reduce(in.t, in.op, a.data(), aliased ? a.data() : b.data(), n);
  const std::string ctx = where + " " + std::string(dtype_name(in.t)) + " " +
                          std::string(reduce_op_name(in.op)) + " n=" + std::to_string(n) + " x@+" +
                          std::to_string(off_x) +
                          (aliased ? std::string(" in place") : " y@+" + std::to_string(off_y));
  if (!a.guards_intact() || !b.guards_intact()) {
    ADD_FAILURE() << ctx << ": wrote outside the buffer";
    return false;
  }
  if (!aliased && bytes != 0 && std::memcmp(b.data(), in.y.data(), bytes) != 0) {
    ADD_FAILURE() << ctx << ": changed `in`";
    return false;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t got = get_bits(in.t, a.data(), i);
    const std::uint64_t want = aliased ? in.want_self[i] : in.want[i];
    const std::uint64_t alt = aliased ? want : in.alt[i];
    if (got == want || got == alt) continue;
    ADD_FAILURE() << ctx << ": element " << i << " x=" << hex(get_bits(in.t, in.x.data(), i))
                  << " y="
                  << hex(aliased ? get_bits(in.t, in.x.data(), i) : get_bits(in.t, in.y.data(), i))
                  << " got " << hex(got) << ", want " << hex(want)
                  << (alt != want ? " or " + hex(alt) : std::string());
    return false;
  }
  return true;
}

class ReduceEveryLevel : public ::testing::TestWithParam<DType> {};

TEST_P(ReduceEveryLevel, MatchesReferenceForEveryOpCountAndAlignment) {
  const DType t = GetParam();
  const std::size_t sz = dtype_size(t);
  // Counts around every vector width (4, 8, 16, 32, 64 lanes, unrolled 4 times) and one large
  // count that is no multiple of anything.
  const std::vector<std::size_t> counts = {0,   1,   2,   3,   7,   8,    15,   16,   17,
                                           31,  32,  33,  63,  64,  65,   127,  128,  129,
                                           255, 256, 257, 511, 513, 1000, 1023, 1025, 1000003};
  // Byte offsets of x and y past a 64-byte boundary: whole elements, and odd bytes for dtypes
  // wider than one byte.
  std::vector<std::pair<std::size_t, std::size_t>> offsets = {
      {0, 0}, {sz, 0}, {0, sz}, {2 * sz, 3 * sz}, {3 * sz, sz}};
  if (sz > 1) offsets.insert(offsets.end(), {{1, 3}, {3, 0}, {0, sz + 1}});
  int failures = 0;
  for (ReduceOp op : kOps) {
    for (std::size_t n : counts) {
      const Inputs in = make_inputs(t, op, n);
      for (SimdLevel level : cpu_levels()) {
        const LevelScope scope(level);
        const std::string where(simd_level_name(level));
        const bool large = n > 100000;  // fewer layouts for the large count, to keep it quick
        for (std::size_t k = 0; k < offsets.size(); ++k) {
          if (large && k != 0 && k != 3 && k != 5) continue;
          const auto [ox, oy] = offsets[k];
          if (!run_case(in, ox, oy, false, where)) ++failures;
        }
        if (!run_case(in, 0, 0, true, where)) ++failures;
        if (sz > 1 && !run_case(in, 1, 0, true, where)) ++failures;
        if (failures > 20) FAIL() << "stopping after 20 failing cases";
      }
    }
  }
}

// Every pair of special values (Inf, NaNs, signed zeros, subnormals, extremes) on both sides.
TEST_P(ReduceEveryLevel, EveryPairOfSpecialValues) {
  const DType t = GetParam();
  const auto sp = specials(t);
  for (ReduceOp op : kOps) {
    Inputs in{t, op, {}, {}, {}, {}, {}};
    const std::size_t n = sp.size() * sp.size();
    in.x.resize(n * dtype_size(t));
    in.y.resize(n * dtype_size(t));
    for (std::size_t i = 0; i < sp.size(); ++i) {
      for (std::size_t j = 0; j < sp.size(); ++j) {
        const std::size_t k = i * sp.size() + j;
        put_bits(t, in.x.data(), k, sp[i]);
        put_bits(t, in.y.data(), k, sp[j]);
        const Expected e = reference(t, op, sp[i], sp[j]);
        in.want.push_back(e.want);
        in.alt.push_back(e.alt);
        in.want_self.push_back(reference(t, op, sp[i], sp[i]).want);
      }
    }
    for (SimdLevel level : cpu_levels()) {
      const LevelScope scope(level);
      run_case(in, 0, 0, false, std::string(simd_level_name(level)));
      run_case(in, 1, 0, true, std::string(simd_level_name(level)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReduceEveryLevel, ::testing::ValuesIn(kDtypes),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(dtype_name(param.param));
                         });

// Literal cases, independent of the reference above, on every level (at an index past the first
// vectors so the SIMD body, not a tail, computes them).
template <class T>
T reduce_at_every_level(DType t, ReduceOp op, T x, T y, const char* what) {
  constexpr std::size_t kAt = 200;
  T first{};
  bool have_first = false;
  for (SimdLevel level : cpu_levels()) {
    const LevelScope scope(level);
    std::vector<T> a(300, x);
    std::vector<T> b(300, y);
    reduce(t, op, a.data(), b.data(), a.size());
    T r = a[kAt];
    if (!have_first) {
      first = r;
      have_first = true;
    }
    std::uint64_t got_bits = 0;
    std::uint64_t first_bits = 0;
    std::memcpy(&got_bits, &r, sizeof(T));
    std::memcpy(&first_bits, &first, sizeof(T));
    EXPECT_EQ(got_bits, first_bits)
        << what << ": " << simd_level_name(level) << " differs from scalar";
  }
  return first;
}

std::uint32_t f32b(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

// A 16-bit float case: inout op in at every level, whose bits must be `want`.
struct HalfCase {
  DType dtype;
  ReduceOp op;
  std::uint16_t inout;
  std::uint16_t in;
  std::uint16_t want;
};

void expect_halves(std::initializer_list<HalfCase> cases) {
  for (const HalfCase& c : cases) {
    const auto name = std::string(dtype_name(c.dtype));
    EXPECT_EQ(reduce_at_every_level<std::uint16_t>(c.dtype, c.op, c.inout, c.in, name.c_str()),
              c.want)
        << name << " " << reduce_op_name(c.op) << " " << std::hex << c.inout << ", " << c.in;
  }
}

TEST(ReduceLiterals, IntegersWrap) {
  EXPECT_EQ(reduce_at_every_level<std::int8_t>(DType::I8, ReduceOp::Sum, 127, 1, "i8 127+1"), -128);
  EXPECT_EQ(reduce_at_every_level<std::int8_t>(DType::I8, ReduceOp::Prod, -128, -1, "i8 -128*-1"),
            -128);
  EXPECT_EQ(reduce_at_every_level<std::uint8_t>(DType::U8, ReduceOp::Prod, 200, 3, "u8 200*3"), 88);
  EXPECT_EQ(reduce_at_every_level<std::uint8_t>(DType::U8, ReduceOp::Max, 200, 3, "u8 max"), 200);
  EXPECT_EQ(reduce_at_every_level<std::int8_t>(DType::I8, ReduceOp::Max, -56, 3, "i8 max"), 3);
  EXPECT_EQ(reduce_at_every_level<std::int32_t>(DType::I32, ReduceOp::Prod, 65537, 65537, "i32"),
            131073);  // 2^32 + 2^17 + 1, modulo 2^32
  EXPECT_EQ(reduce_at_every_level<std::int64_t>(DType::I64, ReduceOp::Prod, 0x100000001LL,
                                                0x100000001LL, "i64 prod"),
            0x200000001LL);
  EXPECT_EQ(reduce_at_every_level<std::int64_t>(DType::I64, ReduceOp::Prod, -3, 5, "i64 -3*5"),
            -15);
  EXPECT_EQ(reduce_at_every_level<std::int64_t>(DType::I64, ReduceOp::Min, -1, 1LL << 40, "min"),
            -1);
  EXPECT_EQ(reduce_at_every_level<std::int64_t>(
                DType::I64, ReduceOp::Max, std::numeric_limits<std::int64_t>::min(), -7, "i64 max"),
            -7);
}

TEST(ReduceLiterals, MinMaxKeepTheInoutSideOnNaNAndZeros) {
  const float nan = std::bit_cast<float>(0x7fc12345U);
  const float snan = std::bit_cast<float>(0xff800001U);
  EXPECT_EQ(f32b(reduce_at_every_level(DType::F32, ReduceOp::Min, nan, 1.0F, "min(nan, 1)")),
            0x7fc12345U);
  EXPECT_EQ(reduce_at_every_level(DType::F32, ReduceOp::Min, 1.0F, nan, "min(1, nan)"), 1.0F);
  EXPECT_EQ(reduce_at_every_level(DType::F32, ReduceOp::Max, 1.0F, nan, "max(1, nan)"), 1.0F);
  EXPECT_EQ(f32b(reduce_at_every_level(DType::F32, ReduceOp::Max, snan, 1.0F, "max(snan, 1)")),
            0xff800001U);  // returned as is: still signalling
  EXPECT_EQ(f32b(reduce_at_every_level(DType::F32, ReduceOp::Min, -0.0F, 0.0F, "min(-0, 0)")),
            0x80000000U);
  EXPECT_EQ(f32b(reduce_at_every_level(DType::F32, ReduceOp::Min, 0.0F, -0.0F, "min(0, -0)")), 0U);
  EXPECT_EQ(f32b(reduce_at_every_level(DType::F32, ReduceOp::Max, 0.0F, -0.0F, "max(0, -0)")), 0U);
  EXPECT_EQ(reduce_at_every_level(DType::F64, ReduceOp::Max, 1.0, -std::nan(""), "f64"), 1.0);
  expect_halves({
      // f16: a NaN result is sign | 0x7e00, the sign taken from the side min/max keeps.
      {DType::F16, ReduceOp::Min, 0xfd55, 0x3c00, 0xfe00},
      {DType::F16, ReduceOp::Max, 0x3c00, 0xfd55, 0x3c00},
      // bf16: a NaN keeps its bits, with the quiet bit set.
      {DType::BF16, ReduceOp::Max, 0xff95, 0x3f80, 0xffd5},
  });
}

TEST(ReduceLiterals, HalfRoundingAndOverflow) {
  // f16: 65504 + 8 = 65512 rounds back down to 65504; 65504 + 16 = 65520 is the tie with 65536,
  // which goes to the even side: Inf. 2^-24 * 0.5 = 2^-25 ties to even zero; 3 * 2^-25 rounds to
  // 2 * 2^-24.
  expect_halves({
      {DType::F16, ReduceOp::Sum, 0x7bff, 0x4800, 0x7bff},
      {DType::F16, ReduceOp::Sum, 0x7bff, 0x4c00, 0x7c00},
      {DType::F16, ReduceOp::Prod, 0x0001, 0x3800, 0x0000},
      {DType::F16, ReduceOp::Prod, 0x0001, 0x3e00, 0x0002},
      {DType::F16, ReduceOp::Prod, 0xd800, 0x5800, 0xf400},  // -128 * 128 = -16384 fits
      {DType::F16, ReduceOp::Prod, 0xdc00, 0x5c00, 0xfc00},  // -256 * 256 = -65536: -Inf
      // bf16: 1 + 2^-8 ties to even 1; 1 + 3 * 2^-8 ties to even 1 + 2^-6.
      {DType::BF16, ReduceOp::Sum, 0x3f80, 0x3b80, 0x3f80},
      {DType::BF16, ReduceOp::Sum, 0x3f81, 0x3b80, 0x3f82},
  });
  // Inf - Inf is the default NaN; Inf * 0 too.
  EXPECT_TRUE(std::isnan(f16_to_f32(
      reduce_at_every_level<std::uint16_t>(DType::F16, ReduceOp::Sum, 0x7c00, 0xfc00, "f16"))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(
      reduce_at_every_level<std::uint16_t>(DType::BF16, ReduceOp::Prod, 0x7f80, 0x0000, "bf"))));
}

// The SIMD entry points themselves cover every dtype and op: AVX-512 the whole buffer, AVX2 all
// but fewer than one vector (32 bytes). Without this, a path that handed everything back to the
// scalar code would pass every test above.
TEST(ReduceSimdPaths, HandleEveryDtypeAndOp) {
#if defined(__x86_64__)
  if (cpu_simd_level() == SimdLevel::Scalar)
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const std::size_t n = 1001;
  for (DType t : kDtypes) {
    std::vector<unsigned char> a(n * dtype_size(t), 1);
    std::vector<unsigned char> b(n * dtype_size(t), 1);
    for (ReduceOp op : kOps) {
      const std::size_t done2 = detail::reduce_avx2(t, op, a.data(), b.data(), n);
      EXPECT_LE(done2, n) << dtype_name(t) << " " << reduce_op_name(op);
      EXPECT_LT((n - done2) * dtype_size(t), 32U) << dtype_name(t) << " " << reduce_op_name(op);
      if (cpu_simd_level() == SimdLevel::Avx512) {
        EXPECT_EQ(detail::reduce_avx512(t, op, a.data(), b.data(), n), n)
            << dtype_name(t) << " " << reduce_op_name(op);
      }
    }
    if (dtype_is_float(t)) {
      EXPECT_LT((n - detail::scale_avx2(t, a.data(), n, 0.5)) * dtype_size(t), 32U);
      if (cpu_simd_level() == SimdLevel::Avx512) {
        EXPECT_EQ(detail::scale_avx512(t, a.data(), n, 0.5), n);
      }
    } else {
      EXPECT_EQ(detail::scale_avx2(t, a.data(), n, 0.5), 0U);
    }
  }
#else
  GTEST_SKIP() << "no SIMD paths on this architecture";
#endif
}

TEST(ScaleEveryLevel, MatchesReferenceForEveryFloatDtype) {
  const std::vector<double> factors = {0.25, 1.0 / 3.0, -1.5, 1e-5, 3e4, 0.0};
  const std::vector<std::size_t> counts = {0, 1, 7, 15, 16, 17, 31, 33, 64, 1000, 100003};
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    const std::size_t sz = dtype_size(t);
    for (std::size_t n : counts) {
      const auto xs = make_values(t, n, n * 17 + static_cast<std::size_t>(t));
      for (double factor : factors) {
        std::vector<std::uint64_t> want(n);
        for (std::size_t i = 0; i < n; ++i) {
          if (t == DType::F64) {
            want[i] = f64_bits(bits_f64(xs[i]) * factor);
          } else {
            const auto f = static_cast<float>(factor);
            want[i] = narrow(t, static_cast<float>(static_cast<double>(widen(t, xs[i])) * f));
          }
        }
        for (SimdLevel level : cpu_levels()) {
          const LevelScope scope(level);
          for (std::size_t off : {std::size_t{0}, sz, std::size_t{1}}) {
            Guarded a(n * sz, off);
            for (std::size_t i = 0; i < n; ++i) put_bits(t, a.data(), i, xs[i]);
            scale(t, a.data(), n, factor);
            ASSERT_TRUE(a.guards_intact()) << simd_level_name(level) << " " << dtype_name(t);
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint64_t got = get_bits(t, a.data(), i);
              ASSERT_EQ(got, want[i])
                  << simd_level_name(level) << " " << dtype_name(t) << " n=" << n << " off=" << off
                  << " factor=" << factor << " element " << i << " x=" << hex(xs[i]);
            }
          }
        }
      }
    }
  }
}

TEST(ReduceEveryLevelErrors, AvgAndIntegerScaleAreRejectedOnEveryLevel) {
  for (SimdLevel level : cpu_levels()) {
    const LevelScope scope(level);
    std::vector<float> a(64, 1.0F);
    EXPECT_THROW(reduce(DType::F32, ReduceOp::Avg, a.data(), a.data(), a.size()), Error);
    std::vector<std::int32_t> i(64, 1);
    EXPECT_THROW(scale(DType::I32, i.data(), i.size(), 0.5), Error);
  }
}

}  // namespace
}  // namespace strait::kernels
