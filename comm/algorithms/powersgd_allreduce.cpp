#include "comm/algorithms/powersgd_allreduce.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "core/error.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

PowerSgdAllreduce::PowerSgdAllreduce(OpContext ctx, CompressedBuffers b, PowerSgdOptions options,
                                     std::shared_ptr<const PowerSgdPlan> plan)
    : CollectiveOp(std::move(ctx)),
      send_(b.send),
      out_(b.recv),
      average_(b.average),
      state_(std::move(b.state)),
      options_(options),
      plan_(std::move(plan)),
      spec_(std::move(b.codec_spec)),
      key_(std::move(b.key)) {}

std::unique_ptr<RingAllreduce> PowerSgdAllreduce::ring(std::uint64_t seq_offset, float* data,
                                                       std::size_t count) const {
  // The built-in table's segments (comm/algorithms/selection.cpp): eager messages either way.
  constexpr std::size_t kSmall = std::size_t{1} << 20;
  const std::size_t segment = count * sizeof(float) < kSmall ? std::size_t{8} << 10 : kSmall;
  return std::make_unique<RingAllreduce>(
      context().at(seq() + seq_offset),
      ReduceBuffers{data, data, count, kernels::DType::F32, kernels::ReduceOp::Sum}, segment);
}

void PowerSgdAllreduce::start() {
  const PowerSgdPlan& plan = *plan_;
  const std::size_t r = plan.rank;
  if (!key_.empty()) {
    entry_ = &state_->powersgd().entry(key_, plan.hash(spec_), plan.count, plan.q_count);
    // The residual buffer becomes M = grad + error until finish() takes the approximation out.
    for (const auto& m : plan.compressed) {
      float* e = entry_->error.data() + m.offset;
      const float* g = send_ + m.offset;
      for (std::size_t i = 0; i < m.rows * m.cols; ++i) e[i] += g[i];
    }
    m_ = entry_->error.data();
  } else {
    m_ = send_;  // read until finish(), which is the first to write these elements of out_
  }

  // Q: the key's last one, or drawn from the seed; orthogonalized either way, as PyTorch does.
  const bool warm = entry_ != nullptr && options_.warm_start && entry_->calls > 0;
  const std::uint64_t call = entry_ != nullptr ? entry_->calls : 0;
  second_.resize(plan.q_count);
  first_.resize(plan.first_count());
  std::size_t q_at = 0;
  std::size_t p_at = plan.plain_count;
  for (std::size_t idx = 0; idx < plan.compressed.size(); ++idx) {
    const MatrixShape& m = plan.compressed[idx];
    float* q = second_.data() + q_at;
    if (warm) std::copy_n(entry_->q.data() + q_at, m.cols * r, q);
    // A warm Q with a zero column (a zero gradient last time) would keep the column dead.
    if (!warm || orthogonalize_columns(q, m.cols, r) != 0) {
      powersgd_random_normal(options_.seed, call, idx, std::span<float>(q, m.cols * r));
      orthogonalize_columns(q, m.cols, r);
    }
    // P = M Q, into the first allreduce's buffer.
    matrix_times_factor(m_ + m.offset, m.rows, m.cols, m.cols, q, r, first_.data() + p_at,
                        scratch_);
    q_at += m.cols * r;
    p_at += m.rows * r;
  }
  std::size_t at = 0;
  for (const auto& range : plan.plain) {
    if (range.count != 0) std::memcpy(first_.data() + at, send_ + range.offset, range.count * 4);
    at += range.count;
  }
}

void PowerSgdAllreduce::after_p() {
  const PowerSgdPlan& plan = *plan_;
  const std::size_t r = plan.rank;
  // The uncompressed elements are done: a plain fp32 allreduce, scaled as RingAllreduce scales.
  if (average_ && plan.plain_count != 0) {
    kernels::scale(kernels::DType::F32, first_.data(), plan.plain_count, 1.0 / group().size());
  }
  std::size_t at = 0;
  for (const auto& range : plan.plain) {
    if (range.count != 0) std::memcpy(out_ + range.offset, first_.data() + at, range.count * 4);
    at += range.count;
  }
  std::size_t q_at = 0;
  std::size_t p_at = plan.plain_count;
  for (const auto& m : plan.compressed) {
    float* p = first_.data() + p_at;
    orthogonalize_columns(p, m.rows, r);
    // Q = M^T P^, into the second allreduce's buffer.
    matrix_transposed_times_factor(m_ + m.offset, m.rows, m.cols, m.cols, p, r,
                                   second_.data() + q_at, scratch_);
    q_at += m.cols * r;
    p_at += m.rows * r;
  }
}

void PowerSgdAllreduce::finish() {
  const PowerSgdPlan& plan = *plan_;
  const std::size_t r = plan.rank;
  const int world = group().size();
  if (average_ && plan.q_count != 0) {
    kernels::scale(kernels::DType::F32, second_.data(), plan.q_count, 1.0 / world);
  }
  std::size_t q_at = 0;
  std::size_t p_at = plan.plain_count;
  for (const auto& m : plan.compressed) {
    low_rank_product(first_.data() + p_at, second_.data() + q_at, m.rows, m.cols, r,
                     out_ + m.offset, m.cols, scratch_);
    q_at += m.cols * r;
    p_at += m.rows * r;
  }
  if (entry_ == nullptr) return;
  // This rank's share of what the result left out: the ranks' residuals add up to sum(M) - sum.
  const float share = average_ ? 1.0F : 1.0F / static_cast<float>(world);
  for (const auto& m : plan.compressed) {
    float* e = entry_->error.data() + m.offset;
    const float* o = out_ + m.offset;
    for (std::size_t i = 0; i < m.rows * m.cols; ++i) e[i] -= share * o[i];
  }
  entry_->q = second_;
  ++entry_->calls;
}

bool PowerSgdAllreduce::drive(Transport& t) {
  try {
    return phase_->advance(t);
  } catch (const Error&) {
    // Ranks that disagree about the plan send allreduces of other sizes: name the disagreement.
    (void)all_done(t);
    throw;
  }
}

bool PowerSgdAllreduce::advance(Transport& t) {
  const PowerSgdPlan& plan = *plan_;
  if (stage_ == Stage::Start) {
    // Ahead of the data: the fingerprint (with the plan's hash) goes around the ring once.
    exchange_fingerprints_around_ring(t);
    start();
    if (plan.first_count() != 0) phase_ = ring(1, first_.data(), first_.size());
    stage_ = Stage::ReduceP;
  }
  (void)all_done(t);  // a disagreeing fingerprint fails the operation at once
  if (stage_ == Stage::ReduceP) {
    if (phase_ && !drive(t)) return false;
    after_p();
    phase_.reset();
    if (plan.q_count != 0) phase_ = ring(2, second_.data(), second_.size());
    stage_ = Stage::ReduceQ;
  }
  if (stage_ == Stage::ReduceQ) {
    if (phase_ && !drive(t)) return false;
    phase_.reset();
    finish();
    stage_ = Stage::Done;
  }
  return all_done(t);
}

void PowerSgdAllreduce::cancel(Transport& t) {
  CollectiveOp::cancel(t);
  if (phase_) phase_->cancel(t);
}

std::string PowerSgdAllreduce::waiting_for() const {
  return phase_ ? phase_->waiting_for() : CollectiveOp::waiting_for();
}

}  // namespace strait::comm
