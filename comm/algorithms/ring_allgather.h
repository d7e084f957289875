// Ring allgather: each rank contributes `bytes`; out holds the P contributions in rank order.
// Step k (of P-1): send block r-k to the right, receive block r-k-1 from the left. Bytes sent per
// rank: (P-1) * bytes, the lower bound; P-1 latency terms. Dtype-agnostic (it only moves bytes).
#pragma once

#include <cstddef>

#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class RingAllgather final : public CollectiveOp {
 public:
  // `send` may alias out + rank * bytes (in place).
  RingAllgather(std::shared_ptr<const Group> group, std::uint64_t seq,
                std::atomic<std::uint64_t>* bytes_sent, const void* send, void* out,
                std::size_t bytes);
  bool advance(Transport& t) override;

 private:
  const void* send_;
  std::byte* out_;
  std::size_t bytes_;
  bool started_ = false;
  bool posted_ = false;
  int step_ = 0;
};

}  // namespace strait::comm
