// Ring allgather (comm/algorithms/ring_phases.h): each rank contributes a block, of the same size
// on every rank (allgather) or of per-rank sizes (allgatherv); out holds the blocks in rank order,
// packed. Step k (of P-1): send block r-k to the right, receive block r-k-1 from the left. Bytes
// sent per rank: every block but block r+1, (P-1) * bytes for equal blocks, the lower bound; P-1
// latency terms. Dtype-agnostic (it only moves bytes).
#pragma once

#include <cstddef>
#include <span>

#include "comm/algorithms/ring_phases.h"

namespace strait::comm {

class RingAllgather final : public RingOp {
 public:
  // `bytes[i]`: the size of rank i's block (size() entries). `send` (bytes[rank] long) may alias
  // out's block `rank` (in place).
  RingAllgather(OpContext ctx, const void* send, void* out, std::span<const std::size_t> bytes);
  // Every block `bytes` long.
  RingAllgather(const OpContext& ctx, const void* send, void* out, std::size_t bytes);
  bool advance(Transport& t) override;

 private:
  AllgatherPhase phase_;
};

}  // namespace strait::comm
