#include "comm/algorithms/ring_allgather.h"

#include <cstring>

namespace strait::comm {

RingAllgather::RingAllgather(std::shared_ptr<const Group> group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* out,
                             std::size_t bytes)
    : CollectiveOp(std::move(group), seq, bytes_sent),
      send_(send),
      out_(static_cast<std::byte*>(out)),
      bytes_(bytes) {}

bool RingAllgather::advance(Transport& t) {
  const int p = group().size();
  const int r = group().rank;
  const auto block = [&](int i) {
    return out_ + static_cast<std::size_t>((i % p + p) % p) * bytes_;
  };
  if (!started_) {
    started_ = true;
    if (send_ != block(r) && bytes_ != 0) std::memmove(block(r), send_, bytes_);
  }
  while (step_ < p - 1) {
    if (!posted_) {
      recv_from(t, (r - 1 + p) % p, step_, block(r - step_ - 1), bytes_);
      send_to(t, (r + 1) % p, step_, block(r - step_), bytes_);
      posted_ = true;
    }
    if (!all_done(t)) return false;
    posted_ = false;
    ++step_;
  }
  return true;
}

}  // namespace strait::comm
