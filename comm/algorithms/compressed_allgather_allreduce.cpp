#include "comm/algorithms/compressed_allgather_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

CompressedAllgatherAllreduce::CompressedAllgatherAllreduce(OpContext ctx, CompressedBuffers b)
    : CompressedAllreduceOp(std::move(ctx), std::move(b)),
      blobs_(std::make_shared<std::vector<std::byte>>()) {}

void CompressedAllgatherAllreduce::start() {
  started_ = true;
  codec_ = &state_->codec(spec_);
  const auto p = static_cast<std::size_t>(group().size());
  const auto r = static_cast<std::size_t>(group().rank);
  blob_bytes_ = codec_->encoded_bytes(count_);
  blobs_->resize(p * blob_bytes_);
  const std::span<std::byte> mine(blobs_->data() + r * blob_bytes_, blob_bytes_);
  if (key_.empty()) {
    codec_->encode(std::span<const float>(send_, count_), mine);
  } else {
    state_->error_feedback().encode(*codec_, key_, std::span<const float>(send_, count_), mine);
  }
}

bool CompressedAllgatherAllreduce::advance(Transport& t) {
  if (!started_) start();
  const int p = group().size();
  const int r = group().rank;
  const auto blob = [&](int i) {
    return blobs_->data() + static_cast<std::size_t>((i % p + p) % p) * blob_bytes_;
  };
  while (step_ < p - 1) {
    if (!posted_) {
      send_to(t, (r + 1) % p, step_, blob(r - step_), blob_bytes_)->keep_alive = blobs_;
      recv_from(t, (r - 1 + p) % p, step_, blob(r - step_ - 1), blob_bytes_)->keep_alive = blobs_;
      posted_ = true;
    }
    if (!all_done(t)) return false;
    posted_ = false;
    ++step_;
  }
  if (!all_done(t)) return false;
  // The sum in rank order on every rank (send_ may be out_: it was encoded already).
  std::fill(out_, out_ + count_, 0.0F);
  for (int i = 0; i < p; ++i) {
    codec_->decode_add(std::span<const std::byte>(blob(i), blob_bytes_),
                       std::span<float>(out_, count_));
  }
  scale_if_average();
  return true;
}

}  // namespace strait::comm
