// RingOp: the two halves of the ring algorithm, over one block per rank of any sizes, as the base
// of RingReduceScatter and RingAllgather (and of any ring collective composed of them), so that
// the block and step logic exists once. Source: Patarasuk & Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations" (2009), the ring of Baidu's allreduce, Horovod and NCCL.
//
// Rank r sends to r+1 and receives from r-1 (mod P); each phase is P-1 steps, one latency term
// each.
// - Reduce-scatter: step k sends the partial reduction of block r-k-1 to the right, receives the
//   partial of block r-k-2 from the left and reduces this rank's contribution into it. The last
//   partial received is of block r-P = r: rank r ends with block r reduced over all ranks (NCCL's
//   ncclReduceScatter layout). Rank r sends every block but its own: total - count[r] elements.
//   Each block is reduced in one fixed order (starting at rank b+1 around the ring), by one rank.
// - Allgather: step k sends block r-k to the right and receives block r-k-1 from the left. Rank r
//   sends every block but block r+1: total - count[r+1] elements.
// Both: (P-1)/P of the data for even blocks, the bandwidth lower bound. Both run on the ring engine
// (comm/algorithms/ring_engine.h), unsegmented: one message each way per step.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/algorithms/blocks.h"
#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/ring_engine.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class RingOp : public CollectiveOp {
 public:
  // A phase's arguments and progress (public so that the ring engine's policies can read them).
  struct ReduceScatterPhase {
    // This rank's contribution: one block per rank (layout `blocks`, in elements); read only.
    const std::byte* send = nullptr;
    // Where block `rank` ends up reduced; may be send's block `rank` (in place).
    std::byte* own = nullptr;
    Blocks blocks;
    kernels::DType dtype{};
    kernels::ReduceOp op{};  // Avg: Sum, then the owner scales its block by 1/P once
    int first_step = 0;      // the message step (comm/transport/tag.h) of the phase's first step
    // Progress.
    bool started = false;
    bool finished = false;
    RingEngine ring{};
    // Two slots of the largest block: the partial being received and the one being sent. Shared
    // with the requests: a receive UCX has matched still lands after the operation has failed
    // and gone, and a queued send may still be read.
    std::shared_ptr<std::byte[]> scratch{};
  };

  struct AllgatherPhase {
    const std::byte* own_send = nullptr;  // this rank's block; may be out's block `rank`
    std::byte* out = nullptr;             // every block, layout `blocks` (in bytes)
    Blocks blocks;
    int first_step = 0;
    bool started = false;
    RingEngine ring{};
  };

 protected:
  using CollectiveOp::CollectiveOp;

  // Advance a phase; true when it has finished. Throws as CollectiveOp::all_done does.
  bool advance_phase(Transport& t, ReduceScatterPhase& s);
  bool advance_phase(Transport& t, AllgatherPhase& s);
};

}  // namespace strait::comm
