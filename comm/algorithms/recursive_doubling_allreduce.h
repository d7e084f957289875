// Recursive-doubling allreduce, the latency-optimal algorithm for short vectors (Thakur,
// Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA
// 2005, section 4.4; MPICH's choice below 2 KiB).
//
// Steps, with P' the largest power of two <= P (comm/algorithms/power_of_two_fold.h handles the
// P - P' extra ranks): step 0, the fold; steps 1 .. log2 P', rank v exchanges its whole partial
// vector with v XOR 2^(i-1) and both reduce; last step, the unfold. Latency terms: log2 P' (+2 when
// P is not a power of two). Bytes sent per rank: log2 P' * count * size(dtype) (+ one vector for
// the folded ranks): log P times the bandwidth bound, so it is for short vectors only.
// Both partners of a step compute the same elements, so each reduces in one fixed order (the
// partial of the lower-ranked half first): all ranks end bit-identical, for min/max of signed
// zeros and NaNs too. Avg = Sum, then a scale by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/algorithms/allreduce_op.h"
#include "comm/algorithms/power_of_two_fold.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RecursiveDoublingAllreduce final : public AllreduceOp {
 public:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  RecursiveDoublingAllreduce(OpContext ctx, const ReduceBuffers& b);
  bool advance(Transport& t) override;

 private:
  bool post_step(Transport& t) override;
  // Folds in what step step_ received.
  void finish_step() override;

  std::size_t bytes_;  // of the whole vector
  PowerOfTwoFold fold_;
  bool started_ = false;
  int partner_ = -1;  // the new rank of this step's partner
  // The partial sits in `current_` (out_ or the scratch); messages arrive in the other one. Shared
  // with the requests that use it: UCX may still touch it after this op has failed and gone.
  std::shared_ptr<std::byte[]> scratch_;
  std::byte* current_ = nullptr;
};

}  // namespace strait::comm
