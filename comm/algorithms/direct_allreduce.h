// Direct allreduce: a reduce-scatter and an allgather in which every rank exchanges with every
// other at once, for ranks on one host whose large messages the transport reads straight from the
// sender's memory (UcxTransport's single copy): 2 synchronisations instead of the ring's 2 (P-1)
// steps, which matters most when ranks share cores and each ring step waits for a descheduled
// neighbour. The shape of NCCL's and MSCCL's "one-shot / two-shot" intra-node allreduce, and of
// reduce-scatter and allgather done by direct reads in shared-memory MPI (e.g. Open MPI's
// coll/xhc, MVAPICH2's CMA-based collectives).
//
// The vector is cut into P chunks (comm/transport/partition.h); rank r owns chunk r.
//   1. Reduce-scatter: rank r sends chunk q of its input to every rank q != r at once, and reduces
//      chunk r of every peer's input into its output in a fixed order, rank r+1 first, then r+2,
//      ... (the first from its own input: the output is not first a copy of the input). Each is
//      reduced as it is read where the transport can (Transport::irecv_reduce), else it lands in a
//      chunk of scratch and is reduced from there.
//   2. Allgather: once every send of step 1 has completed (so that in place, no peer still reads a
//      chunk about to be overwritten), rank r sends its reduced chunk to every peer and receives
//      every peer's into the output.
// Bytes sent per rank: 2 (P-1)/P * count * size(dtype), as the ring; latency terms: 2, but P-1
// messages in flight each way per rank: on a network (TCP, one NIC) they contend where the ring's
// do not, so the built-in table never picks it; `STRAIT_TUNE=allreduce:ranks=3-inf:1M-inf:direct`
// does. Every chunk is reduced by its owner alone, in one order: all ranks end bit-identical.
// Avg = Sum, then the owner scales its chunk by 1/P before the allgather.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/algorithms/allreduce_op.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class DirectAllreduce final : public AllreduceOp {
 public:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  DirectAllreduce(OpContext ctx, const ReduceBuffers& b);
  bool advance(Transport& t) override;

 private:
  struct Chunk {
    std::size_t offset = 0;  // in bytes
    std::size_t bytes = 0;
  };
  [[nodiscard]] Chunk chunk(int c) const;
  void start(Transport& t);
  void post_next_reduce(Transport& t);

  bool started_ = false;
  int reduced_ = 0;      // peers whose chunk has been reduced into the output (phase 1)
  RequestPtr reducing_;  // the receive of peer r + reduced_ + 1's chunk
  bool gathering_ = false;
  std::vector<RequestPtr> scatter_sends_;
  // A chunk of scratch for a message the transport could not reduce on arrival. Shared with the
  // receive: it may still land after this op has failed and gone.
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
