// BinomialBlocksOp: what binomial gather and scatter share: their buffers (one block of `bytes`
// per rank on the root, in rank order), the tree (binomial_tree.h), whose subtrees are runs of
// relative ranks, and the copy between rank order and relative order (relative block i is rank
// (i + root) mod P's), which a root other than rank 0 needs.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

#include "comm/algorithms/binomial_tree.h"
#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class BinomialBlocksOp : public CollectiveOp {
 protected:
  BinomialBlocksOp(OpContext ctx, const void* send, void* recv, std::size_t bytes, int root)
      : CollectiveOp(std::move(ctx)),
        send_(static_cast<const std::byte*>(send)),
        recv_(static_cast<std::byte*>(recv)),
        bytes_(bytes),
        root_(root) {}

  [[nodiscard]] BinomialTree tree() const { return {group().size(), group().rank, root_}; }
  // The bytes of the subtree of relative rank `rel`.
  [[nodiscard]] std::size_t span_bytes(int rel) const {
    return static_cast<std::size_t>(tree().span(rel)) * bytes_;
  }
  // P blocks from rank order to relative order, or back.
  enum class Order : std::uint8_t { ToRelative, ToRanks };
  void reorder(std::byte* dst, const std::byte* src, Order order) const {
    if (bytes_ == 0) return;
    const auto head = static_cast<std::size_t>(group().size() - root_) * bytes_;  // ranks >= root
    const auto tail = static_cast<std::size_t>(root_) * bytes_;                   // ranks < root
    if (order == Order::ToRelative) {
      std::memcpy(dst, src + tail, head);
      std::memcpy(dst + head, src, tail);
    } else {
      std::memcpy(dst + tail, src, head);
      std::memcpy(dst, src + head, tail);
    }
  }

  const std::byte* send_;
  std::byte* recv_;
  std::size_t bytes_;
  int root_;
  enum class Phase { Start, Receiving, Sending } phase_ = Phase::Start;
  // This rank's subtree's blocks in relative order, where no caller's buffer can hold them.
  // Shared with the requests (see ring_phases.h).
  std::shared_ptr<std::byte[]> scratch_;
};

}  // namespace strait::comm
