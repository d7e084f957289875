#include "comm/algorithms/binomial_gather.h"

#include <cstring>

#include "comm/algorithms/scratch.h"

namespace strait::comm {

BinomialGather::BinomialGather(OpContext ctx, const void* send, void* recv, std::size_t bytes,
                               int root)
    : BinomialBlocksOp(std::move(ctx), send, recv, bytes, root) {}

bool BinomialGather::advance(Transport& t) {
  const BinomialTree tree = this->tree();
  const int v = tree.relative();
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    const auto children = tree.children();
    // Root 0's relative order is rank order: it gathers straight into recv. A leaf sends its
    // send buffer as it is.
    if (tree.is_root() && root_ == 0) {
      subtree_ = recv_;
    } else if (!children.empty()) {
      scratch_ = scratch_buffer(span_bytes(v));
      subtree_ = scratch_.get();
    }
    if (subtree_ != nullptr && subtree_ != send_ && bytes_ != 0) {
      std::memcpy(subtree_, send_, bytes_);
    }
    for (const int child : children) {
      std::byte* into = subtree_ + static_cast<std::size_t>(child - v) * bytes_;
      RequestPtr rx = recv_from(t, tree.real(child), 0, into, span_bytes(child));
      rx->keep_alive = scratch_;
    }
  }
  if (phase_ == Phase::Receiving) {
    if (!all_done(t)) return false;
    phase_ = Phase::Sending;
    if (!tree.is_root()) {
      const std::byte* out = subtree_ != nullptr ? subtree_ : send_;
      RequestPtr tx = send_to(t, tree.real(tree.parent()), 0, out, span_bytes(v));
      tx->keep_alive = scratch_;
    } else if (root_ != 0) {
      reorder(recv_, subtree_, Order::ToRanks);
    }
  }
  return all_done(t);
}

}  // namespace strait::comm
