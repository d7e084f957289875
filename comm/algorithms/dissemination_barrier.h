// Dissemination barrier (Hensgen, Finkel & Manber, 1988): in round k every rank sends an empty
// message to rank + 2^k and waits for one from rank - 2^k. After ceil(log2 P) rounds every rank has
// heard, directly or not, from every other: no rank leaves before all have arrived. Works for any
// P, no root, ceil(log2 P) latency terms, zero payload bytes.
#pragma once

#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class DisseminationBarrier final : public CollectiveOp {
 public:
  explicit DisseminationBarrier(OpContext ctx);
  bool advance(Transport& t) override;

 private:
  int round_ = 0;
  bool posted_ = false;
};

}  // namespace strait::comm
