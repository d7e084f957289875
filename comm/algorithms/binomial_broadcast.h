// Binomial-tree broadcast (the MPICH short-message algorithm): ranks are renumbered relative to
// the root; rank v receives from v minus its lowest set bit, then sends to v + 2^j for each 2^j
// below that bit. ceil(log2 P) latency terms; each non-root rank receives the buffer once and the
// root sends it ceil(log2 P) times. Large-message variants (scatter + allgather, pipelined chains)
// belong beside it in this folder.
#pragma once

#include <cstddef>

#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class BinomialBroadcast final : public CollectiveOp {
 public:
  BinomialBroadcast(OpContext ctx, void* buf, std::size_t bytes, int root);
  bool advance(Transport& t) override;

 private:
  void* buf_;
  std::size_t bytes_;
  int root_;
  enum class Phase { Start, Receiving, Sending } phase_ = Phase::Start;
};

}  // namespace strait::comm
