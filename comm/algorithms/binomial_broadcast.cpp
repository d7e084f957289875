#include "comm/algorithms/binomial_broadcast.h"

#include "comm/algorithms/binomial_tree.h"

namespace strait::comm {

BinomialBroadcast::BinomialBroadcast(OpContext ctx, void* buf, std::size_t bytes, int root)
    : CollectiveOp(std::move(ctx)), buf_(buf), bytes_(bytes), root_(root) {}

bool BinomialBroadcast::advance(Transport& t) {
  const BinomialTree tree(group().size(), group().rank, root_);
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    if (!tree.is_root()) recv_from(t, tree.real(tree.parent()), 0, buf_, bytes_);
  }
  if (phase_ == Phase::Receiving) {
    if (!all_done(t)) return false;
    phase_ = Phase::Sending;
    for (const int child : tree.children()) send_to(t, tree.real(child), 0, buf_, bytes_);
  }
  return all_done(t);
}

}  // namespace strait::comm
