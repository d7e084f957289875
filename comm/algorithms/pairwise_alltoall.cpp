#include "comm/algorithms/pairwise_alltoall.h"

#include <cstring>

#include "comm/algorithms/scratch.h"

namespace strait::comm {

PairwiseAlltoall::PairwiseAlltoall(OpContext ctx, const void* send,
                                   std::span<const std::size_t> send_bytes, void* recv,
                                   std::span<const std::size_t> recv_bytes)
    : CollectiveOp(std::move(ctx)),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      send_blocks_(Blocks::packed(send_bytes)),
      recv_blocks_(Blocks::packed(recv_bytes)) {}

bool PairwiseAlltoall::advance(Transport& t) {
  const int p = group().size();
  const auto r = static_cast<std::size_t>(group().rank);
  if (!started_) {
    started_ = true;
    if (send_ == recv_ && p > 1 && send_blocks_.total() != 0) {
      copy_ = scratch_buffer(send_blocks_.total());
      std::memcpy(copy_.get(), send_, send_blocks_.total());
      send_ = copy_.get();
    }
    // The sizes of the own block agree by construction (both come from this rank's arguments,
    // checked by the communicator).
    if (send_ != recv_ && send_blocks_.count[r] != 0) {
      std::memcpy(recv_ + recv_blocks_.offset[r], send_ + send_blocks_.offset[r],
                  send_blocks_.count[r]);
    }
  }
  while (step_ < p) {
    const auto to = (r + static_cast<std::size_t>(step_)) % static_cast<std::size_t>(p);
    const auto from = (r + static_cast<std::size_t>(p - step_)) % static_cast<std::size_t>(p);
    if (!posted_) {
      posted_ = true;
      RequestPtr rx = recv_from(t, static_cast<int>(from), step_ - 1,
                                recv_ + recv_blocks_.offset[from], recv_blocks_.count[from]);
      RequestPtr tx = send_to(t, static_cast<int>(to), step_ - 1, send_ + send_blocks_.offset[to],
                              send_blocks_.count[to]);
      tx->keep_alive = copy_;
    }
    if (!all_done(t)) return false;
    posted_ = false;
    ++step_;
  }
  return true;
}

}  // namespace strait::comm
