#include "comm/algorithms/point_to_point.h"

namespace strait::comm {

PointToPoint::PointToPoint(OpContext ctx, Kind kind, int peer, std::uint64_t tag, void* buf,
                           std::size_t bytes)
    : CollectiveOp(std::move(ctx)), kind_(kind), peer_(peer), tag_(tag), buf_(buf), bytes_(bytes) {}

bool PointToPoint::advance(Transport& t) {
  if (!posted_) {
    posted_ = true;
    const int src = kind_ == Kind::Send ? group().rank : peer_;
    const Tag tag = p2p_tag(group().comm_id, src, tag_);
    if (kind_ == Kind::Send) {
      post_send(t, peer_, tag, buf_, bytes_);
    } else {
      post_recv(t, peer_, tag, buf_, bytes_);
    }
  }
  return all_done(t);
}

}  // namespace strait::comm
