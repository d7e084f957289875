#include "comm/algorithms/binomial_scatter.h"

#include <cstring>

#include "comm/algorithms/scratch.h"

namespace strait::comm {

BinomialScatter::BinomialScatter(OpContext ctx, const void* send, void* recv, std::size_t bytes,
                                 int root)
    : BinomialBlocksOp(std::move(ctx), send, recv, bytes, root) {}

bool BinomialScatter::advance(Transport& t) {
  const BinomialTree tree = this->tree();
  const int v = tree.relative();
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    if (tree.is_root() && root_ == 0) {
      subtree_ = send_;  // relative order is rank order
    } else if (tree.is_root()) {
      scratch_ = scratch_buffer(span_bytes(0));
      reorder(scratch_.get(), send_, Order::ToRelative);
      subtree_ = scratch_.get();
    } else {
      // A leaf receives its block straight into recv.
      std::byte* into = recv_;
      if (tree.span(v) > 1) {
        scratch_ = scratch_buffer(span_bytes(v));
        into = scratch_.get();
      }
      RequestPtr rx = recv_from(t, tree.real(tree.parent()), 0, into, span_bytes(v));
      rx->keep_alive = scratch_;
      subtree_ = into;
    }
  }
  if (phase_ == Phase::Receiving) {
    if (!all_done(t)) return false;
    phase_ = Phase::Sending;
    // Largest subtree first: it has the most steps still to go.
    for (const int child : tree.children()) {
      const std::byte* out = subtree_ + static_cast<std::size_t>(child - v) * bytes_;
      RequestPtr tx = send_to(t, tree.real(child), 0, out, span_bytes(child));
      tx->keep_alive = scratch_;
    }
    if (subtree_ != recv_ && bytes_ != 0) std::memcpy(recv_, subtree_, bytes_);
  }
  return all_done(t);
}

}  // namespace strait::comm
