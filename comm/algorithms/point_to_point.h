// Point-to-point send and receive as operations of the progress engine. The tag carries the
// communicator, the sender's rank and the user's tag (comm/transport/tag.h), so a receive matches
// exactly one peer and tag; messages between the same pair with the same tag arrive in the order
// sent. A receive must get exactly the number of bytes posted (a different size is a Mismatch
// error). A receive from any source (peer kAnySource, -1) matches the tag whatever the sender
// and writes the sender's rank where report_source_to() said, before the operation completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class PointToPoint final : public CollectiveOp {
 public:
  enum class Kind { Send, Recv };
  PointToPoint(OpContext ctx, Kind kind, int peer, std::uint64_t tag, void* buf, std::size_t bytes);
  bool advance(Transport& t) override;
  /// A receive from any source: where the sender's rank goes (must outlive the operation).
  void report_source_to(std::shared_ptr<int> source) noexcept { source_ = std::move(source); }

 private:
  RequestPtr any_;  // the receive from any source, to read the sender from
  std::shared_ptr<int> source_;
  Kind kind_;
  int peer_;
  std::uint64_t tag_;
  void* buf_;
  std::size_t bytes_;
  bool posted_ = false;
};

}  // namespace strait::comm
