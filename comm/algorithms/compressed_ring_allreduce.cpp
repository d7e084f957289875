#include "comm/algorithms/compressed_ring_allreduce.h"

#include <cstring>
#include <utility>

#include "comm/algorithms/partition.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

CompressedRingAllreduce::CompressedRingAllreduce(
    std::shared_ptr<const Group> group, std::uint64_t seq, std::atomic<std::uint64_t>* bytes_sent,
    const float* send, float* recv, std::size_t count, bool average,
    std::shared_ptr<CompressionState> state, std::string codec_spec, std::string key)
    : CompressedAllreduceOp(std::move(group), seq, bytes_sent, send, recv, count, average,
                            std::move(state), std::move(codec_spec), std::move(key)),
      sending_(std::make_shared<std::vector<std::byte>>()),
      receiving_(std::make_shared<std::vector<std::byte>>()) {}

std::size_t CompressedRingAllreduce::chunk_of(int step, bool outgoing) const {
  const int p = group().size();
  const int r = group().rank;
  int chunk = 0;
  if (step < p - 1) {  // reduce-scatter
    chunk = outgoing ? r - step : r - step - 1;
  } else {  // allgather
    const int k = step - (p - 1);
    chunk = outgoing ? r + 1 - k : r - k;
  }
  return static_cast<std::size_t>((chunk % p + p) % p);
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
}

void CompressedRingAllreduce::encode_chunk(std::size_t chunk, std::vector<std::byte>& bytes) {
  const Part c = part(count_, static_cast<std::size_t>(group().size()), chunk);
  const std::span<const float> values(out_ + c.offset, c.count);
  bytes.resize(codec_->encoded_bytes(c.count));
  codec_->encode(values, bytes);
  if (residual_.empty()) return;
  // Every chunk is encoded once per call by this rank: its error replaces the old residual.
  decoded_.resize(c.count);
  codec_->decode(bytes, decoded_);
  for (std::size_t i = 0; i < c.count; ++i) residual_[c.offset + i] = values[i] - decoded_[i];
}

bool CompressedRingAllreduce::post_step(Transport& t) {
  const int p = group().size();
  const int r = group().rank;
  const auto np = static_cast<std::size_t>(p);
  const std::size_t in_chunk = chunk_of(step_, false);
  if (step_ < p - 1) {
    encode_chunk(chunk_of(step_, true), *sending_);
  } else if (step_ == p - 1) {
    // The owner's one encode of its reduced chunk; it keeps the decoded bytes too, like everyone.
    const std::size_t owned = chunk_of(step_, true);
    encode_chunk(owned, *sending_);
    const Part c = part(count_, np, owned);
    codec_->decode(*sending_, std::span<float>(out_ + c.offset, c.count));
  } else {
    std::swap(sending_, receiving_);  // forward what the last step brought, unchanged
  }
  send_to(t, (r + 1) % p, step_, sending_->data(), sending_->size())->keep_alive = sending_;
  receiving_->resize(codec_->encoded_bytes(part(count_, np, in_chunk).count));
  recv_from(t, (r - 1 + p) % p, step_, receiving_->data(), receiving_->size())->keep_alive =
      receiving_;
  return true;
}

void CompressedRingAllreduce::finish_step() {
  const int p = group().size();
  const Part c = part(count_, static_cast<std::size_t>(p), chunk_of(step_, false));
  const std::span<float> into(out_ + c.offset, c.count);
  if (step_ < p - 1) {
    codec_->decode_add(*receiving_, into);
  } else {
    codec_->decode(*receiving_, into);
  }
}

bool CompressedRingAllreduce::advance(Transport& t) {
  if (!started_) start();
  const int p = group().size();
  if (p == 1) {
    if (step_ == 0) {  // alone, the rank is the owner of everything: one encode, one decode
      encode_chunk(0, *sending_);
      codec_->decode(*sending_, std::span<float>(out_, count_));
      step_ = 1;
    }
  } else {
    const int last = 2 * (p - 1) - 1;
    while (step_ <= last) {
      if (!posted_) posted_ = post_step(t);
      if (!all_done(t)) return false;
      finish_step();
      posted_ = false;
      ++step_;
    }
  }
  if (!all_done(t)) return false;
  scale_if_average();
  return true;
}

}  // namespace strait::comm
