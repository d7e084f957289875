// Pairwise-exchange alltoall(v) (MPICH's MPIR_Alltoall(v)_intra_pairwise; Thakur, Rabenseifner &
// Gropp, "Optimization of collective communication operations in MPICH", 2005): this rank's own
// block is copied locally; then in step k = 1..P-1 rank r sends its block for r+k and receives
// the block of r-k (mod P), one exchange at a time, so no rank is flooded by P-1 senders at once.
// P-1 latency terms; each rank sends every block but its own once, the lower bound. Bruck's
// algorithm (log2 P steps, each block forwarded up to log2 P times) would suit tiny blocks better.
// Dtype-agnostic (it only moves bytes). In place (send == recv, same layout) costs a copy of the
// send buffer, since a block received would otherwise overwrite one not yet sent.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "comm/algorithms/blocks.h"
#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class PairwiseAlltoall final : public CollectiveOp {
 public:
  // send_bytes[j]: what goes to rank j, packed in send; recv_bytes[i]: what comes from rank i,
  // packed in recv (size() entries each). send may equal recv when the two layouts are the same.
  PairwiseAlltoall(OpContext ctx, const void* send, std::span<const std::size_t> send_bytes,
                   void* recv, std::span<const std::size_t> recv_bytes);
  bool advance(Transport& t) override;

 private:
  const std::byte* send_;
  std::byte* recv_;
  Blocks send_blocks_;
  Blocks recv_blocks_;
  bool started_ = false;
  bool posted_ = false;
  int step_ = 1;
  std::shared_ptr<std::byte[]> copy_;  // the send buffer, when in place
};

}  // namespace strait::comm
