#include "train/data_parallel_sync.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strait::train {

using kernels::DType;
using kernels::ReduceOp;

DataParallelSync::DataParallelSync(sched::PipelineComms comms, int stage, int stages,
                                   GradientLayout layout, GradientCompression compression,
                                   double max_norm, offload::AdamWState* optimizer)
    : comms_(comms),
      stage_(stage),
      stages_(stages),
      layout_(std::move(layout)),
      compression_(std::move(compression)),
      max_norm_(max_norm),
      optimizer_(optimizer) {}

void DataParallelSync::reduce_grads(std::int64_t step, std::span<float> grads) {
  const auto sent = [this] {
    std::uint64_t n = 0;
    for (comm::Communicator* c : {comms_.tied, comms_.data}) {
      if (c != nullptr) n += c->stats().allreduce_bytes;
    }
    return n;
  };
  const std::uint64_t sent0 = sent();
  const auto tied_allreduce = [&](ReduceOp op) {
    if (comms_.tied != nullptr && layout_.tied) {
      float* w = grads.data() + layout_.tied->offset;
      comms_.tied->allreduce(w, w, layout_.tied->count, DType::F32, op);
    }
    if (layout_.tied && layout_.tied_copy) {  // both copies on this rank
      float* a = grads.data() + layout_.tied->offset;
      float* b = grads.data() + layout_.tied_copy->offset;
      for (std::size_t j = 0; j < layout_.tied->count; ++j) {
        const float sum = a[j] + b[j];
        a[j] = b[j] = op == ReduceOp::Avg ? sum * 0.5F : sum;
      }
    }
  };
  tied_allreduce(ReduceOp::Sum);
  if (comms_.data != nullptr && comms_.data->size() > 1) {
    if (!compression_.codec.empty() && step >= compression_.warmup_steps) {
      comm::Compression c;
      c.codec = compression_.codec;
      c.key = fmt::format("grads/stage{}", stage_);
      c.matrices = layout_.matrices;
      if (compression_.momentum) {
        average_momentum(grads, c);
      } else {
        comms_.data->allreduce_compressed(grads.data(), grads.data(), grads.size(), ReduceOp::Avg,
                                          c);
      }
      // Each stage's data-parallel group compressed its own buffer, so the first and the last
      // stage's copies of the tied weights came out differently: average them back into one.
      tied_allreduce(ReduceOp::Avg);
    } else {
      comms_.data->allreduce(grads.data(), grads.data(), grads.size(), DType::F32, ReduceOp::Avg);
    }
  }
  bytes_sent_ = sent() - sent0;
}

double DataParallelSync::clip_grads(std::span<float> grads) {
  if (clipped_) {  // momentum mode clipped this replica's own gradient before the average
    clipped_ = false;
    return norm_;
  }
  return clip(grads);
}

void DataParallelSync::average_momentum(std::span<float> grads, const comm::Compression& c) {
  if (optimizer_ == nullptr || optimizer_->count() != grads.size()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("momentum compression at stage {}: the optimizer holds {} moments for "
                            "{} parameters; pass the AdamW state of this rank's parameters",
                            stage_, optimizer_ == nullptr ? 0 : optimizer_->count(), grads.size()));
  }
  // AdamW's m as of the last step, from its one owner (v is read and dropped).
  std::vector<float> momentum(grads.size()), unused(grads.size());
  optimizer_->read_moments(momentum, unused);
  norm_ = clip(grads);  // this replica's own gradient (DGC's local clipping)
  clipped_ = true;
  // avg_r (g_r + b1 / (1 - b1) m) = avg_r (b1 m + (1 - b1) g_r) / (1 - b1): the local momenta,
  // scaled so that the result is gradient-sized and needs no division afterwards.
  const auto k = static_cast<float>(compression_.beta1 / (1.0 - compression_.beta1));
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] += k * momentum[i];
  comms_.data->allreduce_compressed(grads.data(), grads.data(), grads.size(), ReduceOp::Avg, c);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] -= k * momentum[i];
}

double DataParallelSync::clip(std::span<float> grads) const {
  // The last stage's copy of the tied weights duplicates the first stage's: count it once.
  std::size_t skip_begin = 0, skip_end = 0;
  if (layout_.tied_copy) {
    skip_begin = layout_.tied_copy->offset;
    skip_end = layout_.tied_copy->offset + layout_.tied_copy->count;
  } else if (stages_ > 1 && stage_ == stages_ - 1 && layout_.tied) {
    skip_begin = layout_.tied->offset;
    skip_end = layout_.tied->offset + layout_.tied->count;
  }
  double sumsq = 0;
  for (std::size_t j = 0; j < grads.size(); ++j) {
    if (j >= skip_begin && j < skip_end) continue;
    sumsq += static_cast<double>(grads[j]) * grads[j];
  }
  if (comms_.pipeline != nullptr && comms_.pipeline->size() > 1) {
    comms_.pipeline->allreduce(&sumsq, &sumsq, 1, DType::F64, ReduceOp::Sum);
  }
  const double norm = std::sqrt(sumsq);
  if (!std::isfinite(norm)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the gradient norm is {} at stage {}: training diverged; lower the "
                            "learning rate or enable gradient clipping",
                            norm, stage_));
  }
  if (max_norm_ > 0 && norm > max_norm_) {
    const auto scale = static_cast<float>(max_norm_ / (norm + 1e-6));
    for (float& g : grads) g *= scale;
  }
  return norm;
}

}  // namespace strait::train
