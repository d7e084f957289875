// Binomial-tree reduce (MPICH's MPIR_Reduce_intra_binomial; the mirror of binomial_broadcast.h
// over the tree of binomial_tree.h): every rank receives its children's partial results, reduces
// them into its own contribution in a fixed order (smallest subtree first) and sends the result to
// its parent; the root ends with the reduction over all ranks. ceil(log2 P) latency terms; each
// non-root rank sends count elements once, the root receives ceil(log2 P) of them. The order of
// the reduction depends only on (P, root), so the result is the same bit for bit every time.
// Scratch: one buffer per child (all receives are posted at once), and on an inner non-root rank
// the accumulator. For large counts, a reduce-scatter + gather (Rabenseifner) moves fewer bytes
// through the root; this is the latency-optimal choice. Avg = Sum, then the root scales by 1/P.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/algorithms/collective_op.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class BinomialReduce final : public CollectiveOp {
 public:
  // `recv` (count elements) is written on the root only (null elsewhere is fine); on the root it
  // may equal `send` (in place).
  BinomialReduce(OpContext ctx, const ReduceBuffers& b, int root);
  bool advance(Transport& t) override;

 private:
  const std::byte* send_;
  std::byte* recv_;
  std::size_t count_;
  kernels::DType dtype_;
  kernels::ReduceOp op_;
  int root_;
  enum class Phase { Start, Reducing, Sending } phase_ = Phase::Start;
  std::vector<RequestPtr> from_children_;  // smallest subtree first: the reduction order
  std::size_t reduced_ = 0;                // children reduced so far
  std::byte* acc_ = nullptr;               // this rank's partial result
  // Children's partials, then the accumulator; shared with the requests (see ring_phases.h).
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
