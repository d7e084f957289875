#include "comm/algorithms/compressed_ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/transport/partition.h"
#include "comm/transport/tag.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

CompressedRingAllreduce::CompressedRingAllreduce(OpContext ctx, CompressedBuffers b)
    : CompressedAllreduceOp(std::move(ctx), std::move(b)) {}

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
  const std::size_t first = std::min(c.count, (unit % ring_.segments()) * segment_elems_);
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
  const std::size_t segments =
      (std::max<std::size_t>(largest, 1) + segment_elems_ - 1) / segment_elems_;
  ring_.configure(p == 1 ? 0 : 2 * (p - 1), segments, std::min(kWindow, segments));
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

RingEngine::Outgoing CompressedRingAllreduce::outgoing(std::size_t unit) {
  const int p = group().size();
  const int step = step_of(unit);
  Bytes bytes;
  if (step < p - 1) {
    bytes = encode(piece(unit, true));  // a partial sum
  } else if (step == p - 1) {
    // The owner's one encode of its reduced segment; it keeps the decoded bytes too, like everyone.
    const Piece owned = piece(unit, true);
    bytes = encode(owned);
    codec_->decode(*bytes, std::span<float>(out_ + owned.offset, owned.count));
  } else {
    // Forward what the previous step brought, unchanged.
    const auto it = to_forward_.find(unit);
    bytes = std::move(it->second);
    to_forward_.erase(it);
  }
  const std::byte* data = bytes->data();
  const std::size_t size = bytes->size();
  return {data, size, std::move(bytes)};
}

RingEngine::Landing CompressedRingAllreduce::landing(std::size_t unit) {
  auto bytes =
      std::make_shared<std::vector<std::byte>>(codec_->encoded_bytes(piece(unit, false).count));
  std::byte* data = bytes->data();
  const std::size_t size = bytes->size();
  landed_.push_back(bytes);
  return {data, size, std::move(bytes)};
}

void CompressedRingAllreduce::arrived(std::size_t unit) {
  const Bytes bytes = std::move(landed_.front());
  landed_.pop_front();
  const int p = group().size();
  const int step = step_of(unit);
  const Piece in = piece(unit, false);
  const std::span<float> into(out_ + in.offset, in.count);
  if (step < p - 1) {
    codec_->decode_add(*bytes, into);
    return;
  }
  codec_->decode(*bytes, into);
  if (step < 2 * (p - 1) - 1) to_forward_.emplace(unit + ring_.segments(), bytes);
}

bool CompressedRingAllreduce::advance(Transport& t) {
  if (!started_) start();
  if (group().size() == 1) {
    // Alone, the rank owns everything: one encode, one decode (advance runs once: it finishes).
    const Bytes bytes = encode(Piece{0, count_});
    codec_->decode(*bytes, std::span<float>(out_, count_));
    scale_if_average();
    return true;
  }
  if (!ring_.advance(*this, t, *this)) return false;
  scale_if_average();
  return true;
}

}  // namespace strait::comm
