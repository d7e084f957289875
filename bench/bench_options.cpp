#include "bench/bench_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <utility>

#include "core/error.h"

namespace strait::bench {
namespace {

using kernels::DType;
using kernels::ReduceOp;

std::string lower(std::string_view s) {
  std::string out(s);
  std::ranges::transform(out, out.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string_view time_stat_name(TimeStat s) noexcept {
  switch (s) {
    case TimeStat::Rank0: return "rank 0's";
    case TimeStat::Mean: return "the mean over ranks of each rank's";
    case TimeStat::Min: return "the minimum over ranks of each rank's";
    case TimeStat::Max: return "the maximum over ranks of each rank's";
  }
  return "?";
}

std::size_t parse_size(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("size '{}' {}: give bytes as a whole number with an optional K, M or "
                             "G suffix (powers of 1024), e.g. 8, 64K, 256M",
                             text, why));
  };
  std::string_view s = text;
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b')) s.remove_suffix(1);
  std::size_t shift = 0;
  if (!s.empty()) {
    switch (std::tolower(static_cast<unsigned char>(s.back()))) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec == std::errc::invalid_argument || end != s.data() + s.size()) {
    throw bad("is not a size");
  }
  if (ec == std::errc::result_out_of_range ||
      value > (std::numeric_limits<std::size_t>::max() >> shift)) {
    throw bad("is too large");
  }
  return value << shift;
}

DType parse_dtype(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, DType>, 16> kNames{{
      {"f32", DType::F32},
      {"float", DType::F32},
      {"f64", DType::F64},
      {"double", DType::F64},
      {"f16", DType::F16},
      {"half", DType::F16},
      {"bf16", DType::BF16},
      {"bfloat16", DType::BF16},
      {"i8", DType::I8},
      {"int8", DType::I8},
      {"u8", DType::U8},
      {"uint8", DType::U8},
      {"i32", DType::I32},
      {"int32", DType::I32},
      {"i64", DType::I64},
      {"int64", DType::I64},
  }};
  const std::string name = lower(text);
  for (const auto& [n, t] : kNames) {
    if (n == name) return t;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown dtype '{}': use f32, f64, f16, bf16, i8, u8, i32 or i64 (or "
                          "nccl-tests' float, double, half, bfloat16, int8, uint8, int32, int64)",
                          text));
}

ReduceOp parse_op(std::string_view text) {
  const std::string name = lower(text);
  for (const auto op :
       {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    if (kernels::reduce_op_name(op) == name) return op;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown reduction '{}': use sum, prod, min, max or avg", text));
}

std::vector<std::size_t> size_list(std::size_t min_bytes, std::size_t max_bytes,
                                   std::size_t factor) {
  if (min_bytes == 0) {
    throw Error(ErrorCode::InvalidArgument, "-b (MIN) must be at least 1 byte");
  }
  if (min_bytes > max_bytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-b (MIN, {} B) is larger than -e (MAX, {} B): give MIN <= MAX",
                            min_bytes, max_bytes));
  }
  if (factor < 2 && min_bytes < max_bytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-f (FACTOR) is {}: it must be at least 2 when MIN < MAX", factor));
  }
  std::vector<std::size_t> sizes;
  for (std::size_t s = min_bytes; s <= max_bytes; s *= factor) {
    sizes.push_back(s);
    if (s > max_bytes / std::max<std::size_t>(factor, 2)) break;  // the next step would pass MAX
  }
  return sizes;
}

void validate(const BenchOptions& o) {
  (void)size_list(o.min_bytes, o.max_bytes, o.factor);
  if (o.iters < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-n (ITERS) is {}: time at least 1 iteration", o.iters));
  }
  if (o.warmup < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-w (WARMUP) is {}: it must be 0 or more", o.warmup));
  }
  if (o.op == ReduceOp::Avg && !kernels::dtype_is_float(o.dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-o avg needs a floating-point dtype, not {}: use -o sum, or -d f32",
                            kernels::dtype_name(o.dtype)));
  }
  if (!o.codec.empty()) {
    if (o.collective != "allreduce" || o.dtype != kernels::DType::F32 ||
        (o.op != ReduceOp::Sum && o.op != ReduceOp::Avg)) {
      throw Error(ErrorCode::InvalidArgument,
                  "--codec is for allreduce of f32 with -o sum or avg (allreduce_compressed)");
    }
    if (o.check) {
      throw Error(ErrorCode::InvalidArgument,
                  "--codec results are lossy and cannot match the exact reference: pass -c 0 "
                  "(tests/comm/compressed_allreduce_test.cpp checks each codec's error bound)");
    }
  }
  if (o.bound && o.bound_bytes < 4096) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--bound-bytes is {} B: copy at least 4K (64M measures memory, not "
                            "caches)",
                            o.bound_bytes));
  }
  if (o.root < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-r (ROOT) is {}: give a rank, 0 .. world size - 1", o.root));
  }
}

}  // namespace strait::bench
