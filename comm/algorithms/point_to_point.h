// Point-to-point send and receive as operations of the progress engine. The tag carries the
// communicator, the sender's rank and the user's tag (comm/transport/tag.h), so a receive matches
// exactly one peer and tag; messages between the same pair with the same tag arrive in the order
// sent. A receive must get exactly the number of bytes posted (a different size is a Mismatch
// error).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/algorithms/collective_op.h"

namespace strait::comm {

class PointToPoint final : public CollectiveOp {
 public:
  enum class Kind { Send, Recv };
  PointToPoint(OpContext ctx, Kind kind, int peer, std::uint64_t tag, void* buf, std::size_t bytes);
  bool advance(Transport& t) override;

 private:
  Kind kind_;
  int peer_;
  std::uint64_t tag_;
  void* buf_;
  std::size_t bytes_;
  bool posted_ = false;
};

}  // namespace strait::comm
