// Ring allreduce: a reduce-scatter then an allgather around the ring rank -> rank + 1
// (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", 2009;
// the algorithm of Baidu's ring allreduce, Horovod and NCCL's ring), optionally pipelined.
//
// The buffer is cut into P chunks (comm/transport/partition.h: any count works, 0 included).
// Steps: P-1 reduce-scatter steps (step k: send chunk r-k to the right, receive chunk r-k-1 from
// the left and reduce it into place), after which rank r owns the reduced chunk r+1; then P-1
// allgather steps (send chunk r+1-k, receive chunk r-k). Bytes sent per rank:
// 2 (P-1)/P * count * size(dtype), the bandwidth lower bound; 2 (P-1) latency terms.
// Pipelining (segment_bytes > 0, as NCCL and Open MPI's segmented ring do): every chunk is further
// cut into S segments of at most segment_bytes, and segment s of step k is sent as soon as segment
// s of step k-1 has arrived and been reduced, with up to kWindow segments in flight each way, so
// the reduction of one segment overlaps the transfer of the next and no rank waits for a whole
// chunk. Latency terms: 2 (P-1) + S - 1; the bytes are the same.
// Every chunk is reduced once, by its owner, and then copied: all ranks end bit-identical.
// The output is not first a copy of the input: a reduce-scatter arrival is reduced from the
// input into the output, and where the transport reads the segment from the sender's memory
// (single copy, Transport::irecv_reduce) it reduces it there, in cache-sized pieces as it reads.
// Avg = Sum, then a scale by 1/P (floating-point dtypes only).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/algorithms/allreduce_op.h"
#include "comm/algorithms/ring_engine.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RingAllreduce final : public AllreduceOp, private RingEngine::Policy {
 public:
  // Segments in flight each way when pipelining (each needs one segment of scratch).
  static constexpr std::size_t kWindow = 4;

  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  // segment_bytes: 0 sends each chunk as one message; else the pipeline's segment size.
  RingAllreduce(OpContext ctx, const ReduceBuffers& b, std::size_t segment_bytes = 0);
  bool advance(Transport& t) override;

 private:
  // The engine's units (comm/algorithms/ring_engine.h): the first P-1 steps reduce-scatter into
  // scratch slots and reduce on arrival, the last P-1 allgather straight into the output.
  struct Piece {
    std::size_t offset = 0;  // in elements, into the output
    std::size_t count = 0;
  };
  [[nodiscard]] Piece piece(std::size_t unit, bool outgoing) const;
  [[nodiscard]] bool reduces(std::size_t unit) const { return unit < ring_.units() / 2; }
  [[nodiscard]] const std::byte* input() const { return static_cast<const std::byte*>(send_); }
  [[nodiscard]] std::byte* slot(std::size_t unit) const {
    return scratch_.get() + (unit % window_) * slot_bytes_;
  }
  void start();
  RingEngine::Landing landing(std::size_t unit) override;
  void arrived(std::size_t unit) override;
  RingEngine::Outgoing outgoing(std::size_t unit) override;
  [[nodiscard]] bool may_receive(std::size_t unit, std::size_t sent) const override;

  std::size_t segment_bytes_;
  bool started_ = false;
  std::size_t window_ = 1;
  std::size_t slot_bytes_ = 0;
  RingEngine ring_;
  // Incoming segments of the reduce-scatter, window_ slots. Shared with the receives' requests: a
  // receive UCX has matched still lands after this op has failed and gone.
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
