#include "comm/algorithms/ring_allreduce.h"

#include <algorithm>

#include "comm/algorithms/partition.h"
#include "comm/algorithms/scratch.h"

namespace strait::comm {

RingAllreduce::RingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                             std::size_t count, kernels::DType dtype, kernels::ReduceOp op,
                             std::size_t segment_bytes)
    : AllreduceOp(std::move(group), seq, bytes_sent, send, recv, count, dtype, op),
      segment_bytes_(segment_bytes) {}

RingAllreduce::Piece RingAllreduce::piece(std::size_t unit, bool outgoing) const {
  const int p = group().size();
  const int r = group().rank;
  const auto step = static_cast<int>(unit / segments_);
  const bool reduce_scatter = step < p - 1;
  const int k = reduce_scatter ? step : step - (p - 1);
  int chunk = 0;
  if (reduce_scatter) {
    chunk = outgoing ? r - k : r - k - 1;
  } else {
    chunk = outgoing ? r + 1 - k : r - k;
  }
  chunk = (chunk % p + p) % p;
  const Part c = part(count_, static_cast<std::size_t>(p), static_cast<std::size_t>(chunk));
  const Part s = part(c.count, segments_, unit % segments_);
  return Piece{c.offset + s.offset, s.count};
}

int RingAllreduce::tag_step(std::size_t unit) {
  // Units that share a step number are at least 65535 units apart, and at most 2 kWindow are in
  // flight: they cannot be confused.
  return static_cast<int>(unit % static_cast<std::size_t>(kHeaderStep));
}

void RingAllreduce::start() {
  started_ = true;
  copy_input();
  const auto p = static_cast<std::size_t>(group().size());
  if (p == 1) return;
  const std::size_t largest_chunk = part(count_, p, 0).count;
  if (segment_bytes_ != 0 && largest_chunk != 0) {
    const std::size_t bytes = largest_chunk * elem_;
    segments_ = std::min((bytes + segment_bytes_ - 1) / segment_bytes_, largest_chunk);
  }
  units_ = 2 * (p - 1) * segments_;
  window_ = std::min(kWindow, segments_);
  slot_bytes_ = part(largest_chunk, segments_, 0).count * elem_;
  if (slot_bytes_ != 0) {
    scratch_ = scratch_buffer(window_ * slot_bytes_);
  }
}

bool RingAllreduce::advance(Transport& t) {
  if (!started_) start();
  const int p = group().size();
  const int r = group().rank;
  const auto reduce_op = elementwise_op();
  const std::size_t ring_lag = static_cast<std::size_t>(p - 1) * segments_;
  all_done(t);  // throws when a message failed or had the wrong size
  for (bool moved = true; moved;) {
    moved = false;
    while (!recvs_.empty() && recvs_.front()->state == TransportRequest::State::Done) {
      if (reduces(received_)) {
        const Piece in = piece(received_, false);
        kernels::reduce(dtype_, reduce_op, out_ + in.offset * elem_, slot(received_), in.count);
      }
      recvs_.pop_front();
      ++received_;
      moved = true;
    }
    while (!sends_.empty() && sends_.front()->state == TransportRequest::State::Done) {
      sends_.pop_front();
      ++sent_;
      moved = true;
    }
    // At most window_ units ahead of both the receives and the sends: unsegmented (window 1), a
    // step's receive waits for the previous step's send, so a rank waits on one peer at a time.
    while (recv_posted_ < units_ && recv_posted_ < received_ + window_ &&
           recv_posted_ < sent_ + window_) {
      const std::size_t u = recv_posted_;
      // An allgather segment lands where this rank's reduce-scatter sent the same segment P-1
      // steps earlier: that send must be over.
      if (!reduces(u) && sent_ <= u - ring_lag) break;
      const Piece in = piece(u, false);
      std::byte* dst = reduces(u) ? slot(u) : out_ + in.offset * elem_;
      RequestPtr rx = recv_from(t, (r - 1 + p) % p, tag_step(u), dst, in.count * elem_);
      if (reduces(u)) rx->keep_alive = scratch_;
      recvs_.push_back(std::move(rx));
      ++recv_posted_;
      moved = true;
    }
    // Segment s of step k forwards what segment s of step k-1 brought in.
    while (send_posted_ < units_ && send_posted_ < sent_ + window_ &&
           (send_posted_ < segments_ || send_posted_ - segments_ < received_)) {
      const std::size_t u = send_posted_;
      const Piece outgoing = piece(u, true);
      sends_.push_back(send_to(t, (r + 1) % p, tag_step(u), out_ + outgoing.offset * elem_,
                               outgoing.count * elem_));
      ++send_posted_;
      moved = true;
    }
  }
  if (received_ < units_ || sent_ < units_ || !all_done(t)) return false;
  scale_if_avg(out_, count_);
  return true;
}

}  // namespace strait::comm
