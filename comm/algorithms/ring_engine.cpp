#include "comm/algorithms/ring_engine.h"

#include "comm/algorithms/collective_op.h"
#include "comm/transport/tag.h"

namespace strait::comm {

void RingEngine::configure(std::size_t steps, std::size_t segments, std::size_t window,
                           int first_step) {
  segments_ = segments;
  units_ = steps * segments;
  window_ = window == 0 ? 1 : window;
  first_step_ = first_step;
}

int RingEngine::tag_step(std::size_t unit) const {
  return static_cast<int>((static_cast<std::size_t>(first_step_) + unit) %
                          static_cast<std::size_t>(kHeaderStep));
}

bool RingEngine::advance(CollectiveOp& op, Transport& t, Policy& policy) {
  const int p = op.group().size();
  const int r = op.group().rank;
  const int left = (r - 1 + p) % p;
  const int right = (r + 1) % p;
  op.all_done(t);  // throws when a message failed or had the wrong size
  for (bool moved = true; moved;) {
    moved = false;
    while (!recvs_.empty() && recvs_.front()->state == TransportRequest::State::Done) {
      if (!recvs_.front()->reduced) policy.arrived(received_);
      recvs_.pop_front();
      ++received_;
      moved = true;
    }
    while (!sends_.empty() && sends_.front()->state == TransportRequest::State::Done) {
      sends_.pop_front();
      ++sent_;
      moved = true;
    }
    while (recv_posted_ < units_ && recv_posted_ < received_ + window_ &&
           recv_posted_ < sent_ + window_ && policy.may_receive(recv_posted_, sent_)) {
      const std::size_t u = recv_posted_;
      Landing in = policy.landing(u);
      RequestPtr rx = in.reduce ? op.recv_from(t, left, tag_step(u), in.data, in.bytes, *in.reduce)
                                : op.recv_from(t, left, tag_step(u), in.data, in.bytes);
      rx->keep_alive = std::move(in.keep);
      recvs_.push_back(std::move(rx));
      ++recv_posted_;
      moved = true;
    }
    while (send_posted_ < units_ && send_posted_ < sent_ + window_ &&
           (send_posted_ < segments_ || send_posted_ - segments_ < received_)) {
      const std::size_t u = send_posted_;
      Outgoing out = policy.outgoing(u);
      RequestPtr tx = op.send_to(t, right, tag_step(u), out.data, out.bytes);
      tx->keep_alive = std::move(out.keep);
      sends_.push_back(std::move(tx));
      ++send_posted_;
      moved = true;
    }
  }
  return received_ == units_ && sent_ == units_ && op.all_done(t);
}

}  // namespace strait::comm
