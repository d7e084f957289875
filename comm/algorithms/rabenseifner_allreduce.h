// Rabenseifner's allreduce: a reduce-scatter by recursive halving, then an allgather by recursive
// doubling (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
// MPICH", IJHPCA 2005, section 4.4; MPICH's choice for long vectors of predefined ops).
//
// With P' the largest power of two <= P (comm/algorithms/power_of_two_fold.h folds the other
// ranks in and out), the vector is cut into P' near-equal blocks (comm/transport/partition.h, so
// any count works). Reduce-scatter, steps 1 .. log2 P', distance 2^(log2 P' - i): rank v keeps
// the half of its current window on its side of the partner v XOR distance, sends the other half
// and reduces the half it receives into its own; at the end it owns block v, fully reduced.
// Allgather, steps log2 P' + 1 .. 2 log2 P', distance 1, 2, 4, ...: partners swap their windows.
// Latency terms: 2 log2 P' (+2 when P is not a power of two). Bytes sent per rank:
// 2 (P'-1)/P' * count * size(dtype) (+ one vector each way for the folded ranks): the bandwidth
// bound in half the ring's latency terms.
// Every block is reduced by its owner only and then copied: all ranks end bit-identical. Avg =
// Sum, then each owner scales its block by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/algorithms/allreduce_op.h"
#include "comm/algorithms/power_of_two_fold.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RabenseifnerAllreduce final : public AllreduceOp {
 public:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  RabenseifnerAllreduce(OpContext ctx, const ReduceBuffers& b);
  bool advance(Transport& t) override;

 private:
  struct Window {  // blocks [first, last) of the P' blocks
    int first = 0;
    int last = 0;
  };
  bool post_step(Transport& t) override;
  // Reduces what a reduce-scatter step (or the fold) received.
  void finish_step() override;
  [[nodiscard]] std::byte* at(std::size_t element) const { return out_ + element * elem_; }
  [[nodiscard]] std::size_t block_bytes(Window w) const;
  [[nodiscard]] std::size_t block_offset(Window w) const;  // in elements

  PowerOfTwoFold fold_;
  bool started_ = false;
  Window mine_;      // the blocks this rank holds (reduce-scatter: still reducing)
  Window incoming_;  // the blocks being received into the scratch this step
  // Incoming halves during the reduce-scatter (the whole vector for a rank that folds one in).
  // Shared with the receives: a receive UCX has matched lands even after this op has gone.
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
