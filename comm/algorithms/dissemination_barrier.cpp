#include "comm/algorithms/dissemination_barrier.h"

namespace strait::comm {

DisseminationBarrier::DisseminationBarrier(OpContext ctx) : CollectiveOp(std::move(ctx)) {}

bool DisseminationBarrier::advance(Transport& t) {
  const int p = group().size();
  const int r = group().rank;
  while ((1 << round_) < p) {
    if (!posted_) {
      const int dist = 1 << round_;
      recv_from(t, (r - dist + p) % p, round_, nullptr, 0);
      send_to(t, (r + dist) % p, round_, nullptr, 0);
      posted_ = true;
    }
    if (!all_done(t)) return false;
    posted_ = false;
    ++round_;
  }
  return true;
}

}  // namespace strait::comm
