#include "comm/algorithms/binomial_broadcast.h"

namespace strait::comm {

BinomialBroadcast::BinomialBroadcast(std::shared_ptr<const Group> group, std::uint64_t seq,
                                     std::atomic<std::uint64_t>* bytes_sent, void* buf,
                                     std::size_t bytes, int root)
    : CollectiveOp(std::move(group), seq, bytes_sent), buf_(buf), bytes_(bytes), root_(root) {}

bool BinomialBroadcast::advance(Transport& t) {
  const int p = group().size();
  const int v = (group().rank - root_ + p) % p;  // rank relative to the root
  const auto real = [&](int rel) { return (rel + root_) % p; };
  const int low = v & -v;  // lowest set bit; 0 for the root
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    if (v != 0) recv_from(t, real(v - low), 0, buf_, bytes_);
  }
  if (phase_ == Phase::Receiving) {
    if (!all_done(t)) return false;
    phase_ = Phase::Sending;
    int mask = 1;
    if (v == 0) {
      while (mask < p) mask <<= 1;
    } else {
      mask = low;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < p) send_to(t, real(v + mask), 0, buf_, bytes_);
    }
  }
  return all_done(t);
}

}  // namespace strait::comm
