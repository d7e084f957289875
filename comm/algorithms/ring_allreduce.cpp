#include "comm/algorithms/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "comm/algorithms/scratch.h"
#include "comm/transport/partition.h"

namespace strait::comm {

RingAllreduce::RingAllreduce(OpContext ctx, const ReduceBuffers& b, std::size_t segment_bytes)
    : AllreduceOp(std::move(ctx), b), segment_bytes_(segment_bytes) {}

RingAllreduce::Piece RingAllreduce::piece(std::size_t unit, bool outgoing) const {
  const int p = group().size();
  const int r = group().rank;
  const std::size_t segments = ring_.segments();
  const auto step = static_cast<int>(unit / segments);
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
  const Part s = part(c.count, segments, unit % segments);
  return Piece{c.offset + s.offset, s.count};
}

void RingAllreduce::start() {
  started_ = true;
  const auto p = static_cast<std::size_t>(group().size());
  // With peers the input is not copied to the output first: every chunk but this rank's own is
  // reduced into the output from the input as it arrives, the first send reads the input, and
  // the allgather fills the rest (one pass over the data fewer).
  if (p == 1) {
    copy_input();
    return;
  }
  const std::size_t largest_chunk = part(count_, p, 0).count;
  std::size_t segments = 1;
  if (segment_bytes_ != 0 && largest_chunk != 0) {
    const std::size_t bytes = largest_chunk * elem_;
    segments = std::min((bytes + segment_bytes_ - 1) / segment_bytes_, largest_chunk);
  }
  window_ = std::min(kWindow, segments);
  ring_.configure(2 * (p - 1), segments, window_);
  slot_bytes_ = part(largest_chunk, segments, 0).count * elem_;
  if (slot_bytes_ != 0) {
    scratch_ = scratch_buffer(window_ * slot_bytes_);
  }
}

RingEngine::Landing RingAllreduce::landing(std::size_t unit) {
  const Piece in = piece(unit, false);
  if (reduces(unit)) {
    const std::size_t at = in.offset * elem_;
    return {slot(unit), in.count * elem_, scratch_,
            ReduceOnArrival{dtype_, elementwise_op(), out_ + at, input() + at}};
  }
  return {out_ + in.offset * elem_, in.count * elem_, nullptr};
}

void RingAllreduce::arrived(std::size_t unit) {
  if (!reduces(unit)) return;
  const Piece in = piece(unit, false);
  const std::size_t at = in.offset * elem_;
  if (input() != out_) std::memcpy(out_ + at, input() + at, in.count * elem_);
  kernels::reduce(dtype_, elementwise_op(), out_ + at, slot(unit), in.count);
}

RingEngine::Outgoing RingAllreduce::outgoing(std::size_t unit) {
  // Segment s of step k forwards what segment s of step k-1 brought in; step 0 sends the input.
  const Piece out = piece(unit, true);
  const std::byte* base = unit < ring_.segments() ? input() : out_;
  return {base + out.offset * elem_, out.count * elem_, nullptr};
}

bool RingAllreduce::may_receive(std::size_t unit, std::size_t sent) const {
  // An allgather segment lands where this rank's reduce-scatter sent the same segment P-1 steps
  // earlier: that send must be over.
  const std::size_t ring_lag = static_cast<std::size_t>(group().size() - 1) * ring_.segments();
  return reduces(unit) || sent > unit - ring_lag;
}

bool RingAllreduce::advance(Transport& t) {
  if (!started_) start();
  if (!ring_.advance(*this, t, *this)) return false;
  scale_if_avg(out_, count_);
  return true;
}

}  // namespace strait::comm
