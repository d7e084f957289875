#include "comm/algorithms/binomial_reduce.h"

#include <algorithm>
#include <cstring>

#include "comm/algorithms/binomial_tree.h"
#include "comm/algorithms/scratch.h"

namespace strait::comm {

BinomialReduce::BinomialReduce(OpContext ctx, const ReduceBuffers& b, int root)
    : CollectiveOp(std::move(ctx)),
      send_(static_cast<const std::byte*>(b.send)),
      recv_(static_cast<std::byte*>(b.recv)),
      count_(b.count),
      dtype_(b.dtype),
      op_(b.op),
      root_(root) {}

bool BinomialReduce::advance(Transport& t) {
  const BinomialTree tree(group().size(), group().rank, root_);
  const std::size_t bytes = count_ * kernels::dtype_size(dtype_);
  if (phase_ == Phase::Start) {
    phase_ = Phase::Reducing;
    std::vector<int> children = tree.children();
    std::reverse(children.begin(), children.end());
    const bool inner = !tree.is_root() && !children.empty();
    const std::size_t slots = children.size() + (inner ? 1 : 0);
    if (slots != 0) scratch_ = scratch_buffer(slots * bytes);
    for (std::size_t i = 0; i < children.size(); ++i) {
      RequestPtr rx = recv_from(t, tree.real(children[i]), 0, scratch_.get() + i * bytes, bytes);
      rx->keep_alive = scratch_;
      from_children_.push_back(std::move(rx));
    }
    // A leaf sends its send buffer as it is; the others reduce into a copy of it.
    if (tree.is_root()) {
      acc_ = recv_;
    } else if (inner) {
      acc_ = scratch_.get() + children.size() * bytes;
    }
    if (acc_ != nullptr && acc_ != send_ && bytes != 0) std::memcpy(acc_, send_, bytes);
  }
  if (phase_ == Phase::Reducing) {
    const bool all = all_done(t);  // checks sizes and failures of what has arrived
    const auto reduce_op = op_ == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : op_;
    while (reduced_ < from_children_.size() &&
           from_children_[reduced_]->state == TransportRequest::State::Done) {
      kernels::reduce(dtype_, reduce_op, acc_, scratch_.get() + reduced_ * bytes, count_);
      ++reduced_;
    }
    if (!all || reduced_ < from_children_.size()) return false;
    phase_ = Phase::Sending;
    if (tree.is_root()) {
      if (op_ == kernels::ReduceOp::Avg && count_ != 0) {
        kernels::scale(dtype_, recv_, count_, 1.0 / group().size());
      }
    } else {
      RequestPtr tx =
          send_to(t, tree.real(tree.parent()), 0, acc_ != nullptr ? acc_ : send_, bytes);
      tx->keep_alive = scratch_;
    }
  }
  return all_done(t);
}

}  // namespace strait::comm
