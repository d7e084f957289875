// Ring allreduce: a ring reduce-scatter then a ring allgather (comm/algorithms/ring_phases.h;
// Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", 2009;
// the algorithm of Baidu's ring allreduce, Horovod and NCCL's ring).
//
// The buffer is cut into P blocks (the first count % P one element longer, so any count works, 0
// included). Steps: P-1 reduce-scatter steps (partials reduced into the output buffer), after
// which rank r owns the reduced block r; then P-1 allgather steps. Bytes sent per rank:
// 2 (P-1)/P * count * size(dtype), the bandwidth lower bound; 2 (P-1) latency terms.
// Every block is reduced once, by its owner, and then copied: all ranks end bit-identical.
// Avg = Sum, then the owner scales its block by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>

#include "comm/algorithms/ring_phases.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RingAllreduce final : public RingOp {
 public:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  RingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                std::size_t count, kernels::DType dtype, kernels::ReduceOp op);
  bool advance(Transport& t) override;

 private:
  const void* send_;
  std::byte* out_;
  std::size_t bytes_;
  bool started_ = false;
  ReduceScatterPhase reduce_scatter_;
  AllgatherPhase allgather_;
};

}  // namespace strait::comm
