#include "comm/algorithms/point_to_point.h"

namespace strait::comm {

PointToPoint::PointToPoint(OpContext ctx, Kind kind, int peer, std::uint64_t tag, void* buf,
                           std::size_t bytes)
    : CollectiveOp(std::move(ctx)), kind_(kind), peer_(peer), tag_(tag), buf_(buf), bytes_(bytes) {}

bool PointToPoint::advance(Transport& t) {
  if (!posted_) {
    posted_ = true;
    const int src = kind_ == Kind::Send ? group().rank : peer_;
    const Tag tag = p2p_tag(group().comm_id, src < 0 ? 0 : src, tag_);
    if (src < 0) {
      any_ = post_recv_any(t, tag, ~kSourceBits, buf_, bytes_);
    } else if (kind_ == Kind::Send) {
      post_send(t, peer_, tag, buf_, bytes_);
    } else {
      post_recv(t, peer_, tag, buf_, bytes_);
    }
  }
  if (!all_done(t)) return false;
  if (any_ != nullptr && source_ != nullptr) {
    *source_ = static_cast<int>((any_->sender_tag & kSourceBits) >> kSourceShift);
  }
  return true;
}

}  // namespace strait::comm
