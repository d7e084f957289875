#include "comm/algorithms/compressed_ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/algorithms/partition.h"
#include "comm/tag.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

CompressedRingAllreduce::CompressedRingAllreduce(
    std::shared_ptr<const Group> group, std::uint64_t seq, std::atomic<std::uint64_t>* bytes_sent,
    const float* send, float* recv, std::size_t count, bool average,
    std::shared_ptr<CompressionState> state, std::string codec_spec, std::string key)
    : CompressedAllreduceOp(std::move(group), seq, bytes_sent, send, recv, count, average,
                            std::move(state), std::move(codec_spec), std::move(key)) {}

CompressedRingAllreduce::Piece CompressedRingAllreduce::piece(std::size_t unit,
                                                              bool outgoing) const {
  const int p = group().size();
  const int r = group().rank;
  const int step = step_of(unit);
  int chunk = 0;
  if (step < p - 1) {  // reduce-scatter
    chunk = outgoing ? r - step : r - step - 1;
  } else {  // allgather
    const int k = step - (p - 1);
    chunk = outgoing ? r + 1 - k : r - k;
  }
  chunk = (chunk % p + p) % p;
  const Part c = part(count_, static_cast<std::size_t>(p), static_cast<std::size_t>(chunk));
  // Segments cut at multiples of segment_elems_; a chunk one element shorter than the largest may
  // end with an empty one (0 bytes on the wire).
  const std::size_t first = std::min(c.count, (unit % segments_) * segment_elems_);
  const std::size_t last = std::min(c.count, first + segment_elems_);
  return Piece{c.offset + first, last - first};
}

void CompressedRingAllreduce::start() {
  started_ = true;
  if (send_ != out_ && count_ != 0) std::memcpy(out_, send_, count_ * sizeof(float));
  codec_ = &state_->codec(spec_);
  if (!key_.empty()) {
    // The input plus what this rank's encodes of the key lost last time.
    residual_ = state_->error_feedback().residual(key_, count_);
    kernels::reduce(kernels::DType::F32, kernels::ReduceOp::Sum, out_, residual_.data(), count_);
  }
  const auto p = static_cast<std::size_t>(group().size());
  const std::size_t largest = part(count_, p, 0).count;
  segment_elems_ = std::max<std::size_t>(largest, 1);
  const std::size_t g = codec_->granularity();
  if (g != 0 && largest > kSegmentElements) {
    const std::size_t wanted = (largest + kSegmentElements - 1) / kSegmentElements;
    const std::size_t per = (largest + wanted - 1) / wanted;
    segment_elems_ = (per + g - 1) / g * g;
  }
  segments_ = (std::max<std::size_t>(largest, 1) + segment_elems_ - 1) / segment_elems_;
  units_ = 2 * (p - 1) * segments_;
  window_ = std::min(kWindow, segments_);
}

CompressedRingAllreduce::Bytes CompressedRingAllreduce::encode(Piece pc) {
  const std::span<const float> values(out_ + pc.offset, pc.count);
  auto bytes = std::make_shared<std::vector<std::byte>>(codec_->encoded_bytes(pc.count));
  codec_->encode(values, *bytes);
  if (!residual_.empty()) {
    // Every element is encoded once per call by this rank: its error replaces the old residual.
    decoded_.resize(pc.count);
    codec_->decode(*bytes, decoded_);
    for (std::size_t i = 0; i < pc.count; ++i) residual_[pc.offset + i] = values[i] - decoded_[i];
  }
  return bytes;
}

CompressedRingAllreduce::Bytes CompressedRingAllreduce::outgoing(std::size_t unit) {
  const int p = group().size();
  const int step = step_of(unit);
  if (step < p - 1) return encode(piece(unit, true));  // a partial sum
  if (step == p - 1) {
    // The owner's one encode of its reduced segment; it keeps the decoded bytes too, like everyone.
    const Piece owned = piece(unit, true);
    Bytes bytes = encode(owned);
    codec_->decode(*bytes, std::span<float>(out_ + owned.offset, owned.count));
    return bytes;
  }
  // Forward what the previous step brought, unchanged.
  const auto it = to_forward_.find(unit);
  Bytes bytes = std::move(it->second);
  to_forward_.erase(it);
  return bytes;
}

void CompressedRingAllreduce::take_in(std::size_t unit, const Bytes& bytes) {
  const int p = group().size();
  const int step = step_of(unit);
  const Piece in = piece(unit, false);
  const std::span<float> into(out_ + in.offset, in.count);
  if (step < p - 1) {
    codec_->decode_add(*bytes, into);
    return;
  }
  codec_->decode(*bytes, into);
  if (step < 2 * (p - 1) - 1) to_forward_.emplace(unit + segments_, bytes);
}

bool CompressedRingAllreduce::advance(Transport& t) {
  if (!started_) start();
  const int p = group().size();
  const int r = group().rank;
  if (p == 1) {
    if (received_ == 0) {  // alone, the rank owns everything: one encode, one decode
      const Bytes bytes = encode(Piece{0, count_});
      codec_->decode(*bytes, std::span<float>(out_, count_));
      received_ = 1;
    }
    scale_if_average();
    return true;
  }
  // Units share a tag's step field only 65535 units apart, with at most 2 kWindow in flight.
  const auto tag_step = [](std::size_t unit) {
    return static_cast<int>(unit % static_cast<std::size_t>(kHeaderStep));
  };
  all_done(t);  // throws when a message failed or had the wrong size
  for (bool moved = true; moved;) {
    moved = false;
    while (!recvs_.empty() && recvs_.front().first->state == TransportRequest::State::Done) {
      take_in(received_, recvs_.front().second);
      recvs_.pop_front();
      ++received_;
      moved = true;
    }
    while (!sends_.empty() && sends_.front()->state == TransportRequest::State::Done) {
      sends_.pop_front();
      ++sent_;
      moved = true;
    }
    // Unsegmented (window 1), a step's receive waits for the previous step's send, so a rank
    // waits on one peer at a time and names the right one when it is lost.
    while (recv_posted_ < units_ && recv_posted_ < received_ + window_ &&
           recv_posted_ < sent_ + window_) {
      const std::size_t u = recv_posted_;
      auto bytes =
          std::make_shared<std::vector<std::byte>>(codec_->encoded_bytes(piece(u, false).count));
      RequestPtr rx = recv_from(t, (r - 1 + p) % p, tag_step(u), bytes->data(), bytes->size());
      rx->keep_alive = bytes;
      recvs_.emplace_back(std::move(rx), std::move(bytes));
      ++recv_posted_;
      moved = true;
    }
    // Segment s of step k goes once segment s of step k-1 has come in and been decoded.
    while (send_posted_ < units_ && send_posted_ < sent_ + window_ &&
           (send_posted_ < segments_ || send_posted_ - segments_ < received_)) {
      const std::size_t u = send_posted_;
      Bytes bytes = outgoing(u);
      RequestPtr tx = send_to(t, (r + 1) % p, tag_step(u), bytes->data(), bytes->size());
      tx->keep_alive = std::move(bytes);
      sends_.push_back(std::move(tx));
      ++send_posted_;
      moved = true;
    }
  }
  if (received_ < units_ || sent_ < units_ || !all_done(t)) return false;
  scale_if_average();
  return true;
}

}  // namespace strait::comm
