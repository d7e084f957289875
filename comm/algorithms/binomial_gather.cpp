#include "comm/algorithms/binomial_gather.h"

#include <cstring>

#include "comm/algorithms/binomial_tree.h"

namespace strait::comm {

BinomialGather::BinomialGather(std::shared_ptr<const Group> group, std::uint64_t seq,
                               std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                               std::size_t bytes, int root)
    : CollectiveOp(std::move(group), seq, bytes_sent),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      bytes_(bytes),
      root_(root) {}

bool BinomialGather::advance(Transport& t) {
  const int p = group().size();
  const BinomialTree tree(p, group().rank, root_);
  const int v = tree.relative();
  const auto span_bytes = [&](int rel) {
    return static_cast<std::size_t>(tree.span(rel)) * bytes_;
  };
  if (phase_ == Phase::Start) {
    phase_ = Phase::Receiving;
    const auto children = tree.children();
    // Root 0's relative order is rank order: it gathers straight into recv. A leaf sends its
    // send buffer as it is.
    if (tree.is_root() && root_ == 0) {
      subtree_ = recv_;
    } else if (!children.empty()) {
      scratch_ = std::make_shared_for_overwrite<std::byte[]>(span_bytes(v));
      subtree_ = scratch_.get();
    }
    if (subtree_ != nullptr && subtree_ != send_ && bytes_ != 0) {
      std::memcpy(subtree_, send_, bytes_);
    }
    for (const int child : children) {
      RequestPtr rx =
          recv_from(t, tree.real(child), 0, subtree_ + static_cast<std::size_t>(child - v) * bytes_,
                    span_bytes(child));
      rx->keep_alive = scratch_;
    }
  }
  if (phase_ == Phase::Receiving) {
    if (!all_done(t)) return false;
    phase_ = Phase::Sending;
    if (!tree.is_root()) {
      RequestPtr tx = send_to(t, tree.real(tree.parent()), 0,
                              subtree_ != nullptr ? subtree_ : send_, span_bytes(v));
      tx->keep_alive = scratch_;
    } else if (root_ != 0 && bytes_ != 0) {
      // Relative block i belongs to rank (i + root) mod P.
      const auto head = static_cast<std::size_t>(p - root_) * bytes_;
      std::memcpy(recv_ + static_cast<std::size_t>(root_) * bytes_, subtree_, head);
      std::memcpy(recv_, subtree_ + head, static_cast<std::size_t>(root_) * bytes_);
    }
  }
  return all_done(t);
}

}  // namespace strait::comm
