#include "scheduler/outer_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <future>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/compress/codec.h"
#include "core/error.h"

namespace strait::sched {

using kernels::DType;
using kernels::ReduceOp;

namespace {

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

// The codecs of the outer average: the elementwise ones the issue asks for (DiLoCo used fp32,
// OpenDiLoCo fp16 / bf16, INTELLECT-1 int8), in canonical form; "none" for uncompressed.
std::string outer_codec(const std::string& spec) {
  const std::string_view name = std::string_view(spec).substr(0, spec.find(':'));
  constexpr std::array<std::string_view, 4> kAllowed{"none", "bf16", "int8", "int4"};
  if (std::find(kAllowed.begin(), kAllowed.end(), name) == kAllowed.end()) {
    throw bad(
        fmt::format("--outer-codec {:?} is not one of none, bf16, int8, int4 (arguments "
                    "after a colon, e.g. int8:block=128)",
                    spec));
  }
  if (name == "none") {
    if (name.size() != spec.size()) throw bad("--outer-codec none takes no arguments");
    return "none";
  }
  return comm::canonical_codec_spec(spec);
}

}  // namespace

void validate(const OuterOptions& o) {
  if (o.outer_steps < 1) {
    throw bad(
        fmt::format("--outer-steps {} must be at least 1 (inner steps per round)", o.outer_steps));
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    throw bad(fmt::format("--outer-lr {} must be a finite number > 0 (DiLoCo uses 0.7)", o.lr));
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    throw bad(fmt::format("--outer-momentum {} must be in [0, 1) (DiLoCo uses 0.9; 0: none)",
                          o.momentum));
  }
  (void)outer_codec(o.codec);
}

OuterSync::OuterSync(PipelineComms comms, int stage, std::span<const float> initial,
                     std::optional<GradientLayout::Range> tied, OuterOptions options,
                     std::shared_ptr<offload::PinnedPool> pool,
                     std::shared_ptr<offload::SwapStore> store)
    : comms_(comms),
      stage_(stage),
      tied_(tied),
      options_(std::move(options)),
      codec_(outer_codec(options_.codec)),
      pool_(pool ? std::move(pool) : std::make_shared<offload::PinnedPool>()),
      store_(std::move(store)),
      n_(initial.size()) {
  validate(options_);
  if (tied_ && tied_->offset + tied_->count > n_) {
    throw bad(
        fmt::format("outer sync at stage {}: the tied range [{}, {}) reaches past the {} "
                    "parameters",
                    stage_, tied_->offset, tied_->offset + tied_->count, n_));
  }
  // The pseudo-gradient in flight (and with overlap the next one) stay in RAM: the allreduce
  // works on them in the background.
  storage_ = pool_->acquire((options_.overlap ? 2 : 1) * n_ * sizeof(float));
  in_flight_ = std::span<float>(reinterpret_cast<float*>(storage_.data()), n_);
  progress_ = options_.overlap ? std::span<float>(in_flight_.data() + n_, n_) : in_flight_;
  std::fill(in_flight_.begin(), in_flight_.end(), 0.0f);
  map_state();
  std::copy(initial.begin(), initial.end(), global_.begin());
  std::fill(momentum_.begin(), momentum_.end(), 0.0f);
  if (options_.overlap) std::copy(initial.begin(), initial.end(), start_.begin());
  save_state();
  data_bytes_seen_ = data_bytes_now();
}

std::size_t OuterSync::state_arrays() const noexcept {
  return options_.overlap ? 3 : 2;
}

void OuterSync::map_state() {
  state_ = pool_->acquire(state_arrays() * n_ * sizeof(float));
  auto* base = reinterpret_cast<float*>(state_.data());
  global_ = std::span<float>(base, n_);
  momentum_ = std::span<float>(base + n_, n_);
  start_ = options_.overlap ? std::span<float>(base + 2 * n_, n_) : global_;
}

namespace {
constexpr std::array<std::string_view, 3> kStateKeys{"outer-global", "outer-momentum",
                                                     "outer-start"};
}  // namespace

void OuterSync::load_state() {
  if (!store_) return;
  map_state();
  std::vector<std::future<void>> reads;
  for (std::size_t k = 0; k < state_arrays(); ++k) {
    reads.push_back(
        store_->swap_in(kStateKeys[k], std::as_writable_bytes(std::span<float>(
                                           reinterpret_cast<float*>(state_.data()) + k * n_, n_))));
  }
  for (auto& r : reads) r.get();
}

void OuterSync::save_state() {
  if (!store_) return;
  std::vector<std::future<void>> writes;
  for (std::size_t k = 0; k < state_arrays(); ++k) {
    writes.push_back(store_->swap_out(
        kStateKeys[k], std::as_bytes(std::span<const float>(
                           reinterpret_cast<const float*>(state_.data()) + k * n_, n_))));
  }
  for (auto& w : writes) w.get();
  state_.reset();  // RAM holds the state only during the outer step
  global_ = momentum_ = start_ = {};
}

std::vector<float> OuterSync::read_state(std::size_t k) const {
  std::vector<float> out(n_);
  if (store_) {
    store_->swap_in(kStateKeys[k], std::as_writable_bytes(std::span<float>(out))).get();
  } else {
    const std::span<const float> from = k == 0 ? global_ : momentum_;
    std::copy(from.begin(), from.end(), out.begin());
  }
  return out;
}

OuterSync::~OuterSync() {
  if (!work_) return;
  try {
    work_->wait();  // its buffer is ours: it must not be written after we give it back
  } catch (...) {   // NOLINT(bugprone-empty-catch): the error was the caller's to see, not ours
  }
}

std::uint64_t OuterSync::data_bytes_now() const {
  return comms_.data != nullptr ? comms_.data->stats().allreduce_bytes : 0;
}

void OuterSync::post_average() {
  const bool average = comms_.data != nullptr && comms_.data->size() > 1;
  if (!average) return;
  float* buf = in_flight_.data();
  if (codec_ == "none") {
    work_ = comms_.data->iallreduce(buf, buf, in_flight_.size(), DType::F32, ReduceOp::Avg);
  } else {
    comm::Compression c;
    c.codec = codec_;
    c.key = fmt::format("outer/stage{}", stage_);  // error feedback across rounds
    work_ = comms_.data->iallreduce_compressed(buf, buf, in_flight_.size(), ReduceOp::Avg, c);
  }
}

void OuterSync::finish_average(OuterStepStats& stats) {
  pending_ = false;
  if (work_) {
    const comm::Work w = *work_;
    work_.reset();
    w.wait();
    if (comms_.tied != nullptr && tied_) {
      // Each stage's data-parallel group averaged (and, lossy, encoded) its own copy of the tied
      // weights' pseudo-gradient at its own offset: average the two results back into one.
      const std::uint64_t before = comms_.tied->stats().allreduce_bytes;
      float* t = in_flight_.data() + tied_->offset;
      comms_.tied->allreduce(t, t, tied_->count, DType::F32, ReduceOp::Avg);
      stats.tied_bytes += comms_.tied->stats().allreduce_bytes - before;
    }
  }
  // torch.optim.SGD(nesterov=True, dampening=0) on the gradient delta, elementwise in fp32.
  const auto mu = static_cast<float>(options_.momentum);
  const auto lr = static_cast<float>(options_.lr);
  for (std::size_t i = 0; i < global_.size(); ++i) {
    const float d = in_flight_[i];
    momentum_[i] = mu * momentum_[i] + d;
    global_[i] -= lr * (d + mu * momentum_[i]);
  }
  ++applied_;
  stats.applied = true;
}

OuterStepStats OuterSync::end_step(std::int64_t step, std::span<float> params, bool last) {
  if (params.size() != n_) {
    throw bad(fmt::format("outer sync at stage {}: {} parameters given for {}", stage_,
                          params.size(), n_));
  }
  OuterStepStats stats;
  const bool round_end = (step + 1) % options_.outer_steps == 0 || last;
  if (round_end) {
    stats.round_ended = true;
    stats.round = round_++;
    load_state();
    // This round's pseudo-gradient: where it started minus where the inner steps took it (with
    // overlap, beside the previous round's while that is still in flight).
    const std::span<float> p = pending_ ? progress_ : in_flight_;
    for (std::size_t i = 0; i < params.size(); ++i) p[i] = start_[i] - params[i];
    if (!options_.overlap) {
      pending_ = true;
      post_average();
      finish_average(stats);
      std::copy(global_.begin(), global_.end(), params.begin());
    } else {
      if (pending_) {
        finish_average(stats);  // the previous round's average, one round late
        // The new global weights plus this replica's own progress of the round just ended.
        for (std::size_t i = 0; i < params.size(); ++i) params[i] = global_[i] - p[i];
        std::copy(p.begin(), p.end(), in_flight_.begin());
      }
      pending_ = true;
      post_average();
      if (last) {  // nothing left to overlap with: every replica ends on the same global weights
        finish_average(stats);
        std::copy(global_.begin(), global_.end(), params.begin());
      }
      std::copy(params.begin(), params.end(), start_.begin());
    }
    save_state();
  }
  stats.applied_rounds = applied_;
  const std::uint64_t now = data_bytes_now();
  stats.data_bytes = now - data_bytes_seen_;
  data_bytes_seen_ = now;
  return stats;
}

}  // namespace strait::sched
