#include "comm/algorithms/binomial_scatter.h"

#include <cstring>

#include "comm/algorithms/binomial_tree.h"

namespace strait::comm {

BinomialScatter::BinomialScatter(std::shared_ptr<const Group> group, std::uint64_t seq,
                                 std::atomic<std::uint64_t>* bytes_sent, const void* send,
                                 void* recv, std::size_t bytes, int root)
    : CollectiveOp(std::move(group), seq, bytes_sent),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      bytes_(bytes),
      root_(root) {}

bool BinomialScatter::advance(Transport& t) {
  const int p = group().size();
  const BinomialTree tree(p, group().rank, root_);
  const int v = tree.relative();
  const auto span_bytes = [&](int rel) {
    return static_cast<std::size_t>(tree.span(rel)) * bytes_;
  };
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    if (tree.is_root()) {
      if (root_ == 0) {
        subtree_ = send_;  // relative order is rank order
      } else {
        // Relative block i is rank (i + root) mod P's.
        scratch_ = std::make_shared_for_overwrite<std::byte[]>(span_bytes(0));
        const auto head = static_cast<std::size_t>(p - root_) * bytes_;
        if (bytes_ != 0) {
          std::memcpy(scratch_.get(), send_ + static_cast<std::size_t>(root_) * bytes_, head);
          std::memcpy(scratch_.get() + head, send_, static_cast<std::size_t>(root_) * bytes_);
        }
        subtree_ = scratch_.get();
      }
    } else {
      // A leaf receives its block straight into recv.
      std::byte* into = recv_;
      if (tree.span(v) > 1) {
        scratch_ = std::make_shared_for_overwrite<std::byte[]>(span_bytes(v));
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
    for (const int child : tree.children()) {
      RequestPtr tx =
          send_to(t, tree.real(child), 0, subtree_ + static_cast<std::size_t>(child - v) * bytes_,
                  span_bytes(child));
      tx->keep_alive = scratch_;
    }
    if (subtree_ != recv_ && bytes_ != 0) std::memcpy(recv_, subtree_, bytes_);
  }
  return all_done(t);
}

}  // namespace strait::comm
