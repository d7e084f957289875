// What every algorithm is built from, one object each instead of 8 to 11 constructor arguments:
// OpContext (its group, its sequence number, where it counts the bytes it sends), ReduceBuffers
// (a reduction's buffers, count, dtype and op) and CompressedBuffers (a compressed allreduce's,
// with its codec and error-feedback state). comm/algorithm_registry.cpp fills them from an
// operation record; algorithms that run others (hierarchical, PowerSGD) fill them for their parts.
// Buffers are the caller's and must outlive the operation; send may equal recv (in place).
// Thread-safety: values.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

struct Group;
class CompressionState;

struct OpContext {
  std::shared_ptr<const Group> group;
  std::uint64_t seq =
      0;  // the operation's sequence number (comm/transport/tag.h); 0 for point to point
  std::atomic<std::uint64_t>* bytes_sent = nullptr;  // incremented per message sent; may be null

  // The same group and counter at sequence number `s` (an algorithm's parts).
  [[nodiscard]] OpContext at(std::uint64_t s) const { return {group, s, bytes_sent}; }
  // Another group (a site's, a shard's), the same sequence number and counter.
  [[nodiscard]] OpContext on(std::shared_ptr<const Group> g) const {
    return {std::move(g), seq, bytes_sent};
  }
};

struct ReduceBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // elements
  kernels::DType dtype = kernels::DType::F32;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;
};

// f32, Sum (average false) or Avg (true). codec_spec is canonical (comm/compress/codec.h); key
// names the error-feedback residual (empty: none).
struct CompressedBuffers {
  const float* send = nullptr;
  float* recv = nullptr;
  std::size_t count = 0;
  bool average = false;
  std::shared_ptr<CompressionState> state{};
  std::string codec_spec{};
  std::string key{};
};

}  // namespace strait::comm
