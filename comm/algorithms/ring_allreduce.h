// Ring allreduce: a reduce-scatter then an allgather around the ring rank -> rank + 1
// (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", 2009;
// the algorithm of Baidu's ring allreduce, Horovod and NCCL's ring).
//
// The buffer is cut into P chunks (the first count % P chunks one element longer, so any count
// works, 0 included). Steps: P-1 reduce-scatter steps (step k: send chunk r-k to the right, receive
// chunk r-k-1 from the left and reduce it into place), after which rank r owns the reduced chunk
// r+1; then P-1 allgather steps (send chunk r+1-k, receive chunk r-k). Bytes sent per rank:
// 2 (P-1)/P * count * size(dtype), the bandwidth lower bound; 2 (P-1) latency terms.
// Every chunk is reduced once, by its owner, and then copied: all ranks end bit-identical.
// Avg = Sum, then a scale by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/algorithms/collective_op.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RingAllreduce final : public CollectiveOp {
 public:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  RingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                std::size_t count, kernels::DType dtype, kernels::ReduceOp op);
  bool advance(Transport& t) override;

 private:
  [[nodiscard]] std::size_t chunk_offset(int chunk) const;  // in elements
  [[nodiscard]] std::size_t chunk_count(int chunk) const;

  const void* send_;
  std::byte* out_;
  std::size_t count_;
  kernels::DType dtype_;
  kernels::ReduceOp op_;
  std::size_t elem_;
  bool started_ = false;
  bool posted_ = false;
  int step_ = 0;
  int recv_chunk_ = 0;
  // The incoming chunk during reduce-scatter. Shared with the receive's request: a receive UCX has
  // matched still lands after this op has failed and gone.
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
