// strait-bench's settings (nccl-tests' flags) and the parsing of their values: sizes with K/M/G
// suffixes, dtype and reduction names, the list of sizes a run walks through.
// Errors: strait::Error(InvalidArgument) naming the bad value and what is accepted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::bench {

// How one time per rank becomes the reported time (nccl-tests' -a: 0 rank 0, 1 mean, 2 min,
// 3 max). strait-bench defaults to the maximum: a collective is over when its slowest rank is.
enum class TimeStat : std::uint8_t { Rank0 = 0, Mean = 1, Min = 2, Max = 3 };
std::string_view time_stat_name(TimeStat s) noexcept;

struct BenchOptions {
  std::string collective;
  std::size_t min_bytes = 32U << 20U;
  std::size_t max_bytes = 32U << 20U;
  std::size_t factor = 2;
  kernels::DType dtype = kernels::DType::F32;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  TimeStat time_stat = TimeStat::Max;
  std::string json_path;
  // allreduce only: a codec spec (comm/compress/codec.h) to run allreduce_compressed with
  // (f32, sum or avg; results are lossy, so -c 0).
  std::string codec;
  // --bound: before each size, measure the copy rate with every rank copying bound_bytes at once
  // and show each busbw as a fraction of the collective's memory bound (bench/bound.h).
  bool bound = false;
  std::size_t bound_bytes = 64U << 20U;
  // --symmetric: buffers from Communicator::alloc (comm/symmetric_memory.h).
  bool symmetric = false;
};

// "8", "64K", "1M", "2G" (powers of 1024, either case, an optional trailing B).
std::size_t parse_size(std::string_view text);
// strait's names (f32, bf16, i8, ...) and nccl-tests' (float, half, bfloat16, int8, ...).
kernels::DType parse_dtype(std::string_view text);
// sum, prod, min, max, avg.
kernels::ReduceOp parse_op(std::string_view text);

// MIN, MIN*FACTOR, ... while <= MAX. Throws when MIN > MAX or FACTOR < 2 with MIN < MAX.
std::vector<std::size_t> size_list(std::size_t min_bytes, std::size_t max_bytes,
                                   std::size_t factor);

// Checks what does not depend on the world size: sizes, iterations, avg of integers.
void validate(const BenchOptions& o);

}  // namespace strait::bench
