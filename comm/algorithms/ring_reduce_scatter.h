// Ring reduce-scatter (comm/algorithms/ring_phases.h; Patarasuk & Yuan 2009, NCCL's ring): send
// holds one block per rank (equal blocks, or per-rank counts for reduce_scatter_v); rank r ends
// with block r reduced over all ranks. Step k (of P-1): send the partial of block r-k-1 to the
// right, receive the partial of block r-k-2 from the left and reduce this rank's block into it.
// Bytes sent per rank: total - count[r] elements, (P-1)/P of the buffer for equal blocks, the
// bandwidth lower bound; P-1 latency terms. Scratch: two blocks of the largest count (the send
// buffer is read only). Avg = Sum, then a scale of the result by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>
#include <span>

#include "comm/algorithms/ring_phases.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RingReduceScatter final : public RingOp {
 public:
  // `counts[i]`: elements of block i (size() entries); block i of send starts at the prefix sum.
  // `recv` (counts[rank] elements) may be send's block `rank` (in place), must not overlap the
  // other blocks. Buffers are caller-owned and must outlive the operation.
  RingReduceScatter(OpContext ctx, const void* send, void* recv,
                    std::span<const std::size_t> counts, kernels::DType dtype,
                    kernels::ReduceOp op);
  bool advance(Transport& t) override;

 private:
  ReduceScatterPhase phase_;
};

}  // namespace strait::comm
