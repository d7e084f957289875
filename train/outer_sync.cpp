#include "train/outer_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <future>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/compress/codec.h"
#include "comm/compress/codec_factory.h"
#include "core/error.h"

namespace strait::train {

using kernels::DType;
using kernels::ReduceOp;

namespace {

// An --outer-codec: its canonical spec (reported, compared on resume), the codec spec of the
// collective, and for SparseLoCo the error feedback's decay.
struct OuterCodec {
  std::string spec;
  std::string wire;
  bool sparse = false;
  double beta = 0;
};

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

constexpr double kSparseLocoBeta = 0.95;  // SparseLoCo's error-feedback decay (arXiv 2508.15706)

// The codecs of the outer average: the elementwise ones (DiLoCo used fp32, OpenDiLoCo fp16 / bf16,
// INTELLECT-1 int8) and SparseLoCo's, in canonical form; "none" for uncompressed.
OuterCodec outer_codec(const std::string& spec) {
  const std::string_view name = std::string_view(spec).substr(0, spec.find(':'));
  constexpr std::array<std::string_view, 5> kAllowed{"none", "bf16", "int8", "int4", "sparseloco"};
  if (std::find(kAllowed.begin(), kAllowed.end(), name) == kAllowed.end()) {
    throw bad(
        fmt::format("--outer-codec {:?} is not one of none, bf16, int8, int4, sparseloco "
                    "(arguments after a colon, e.g. int8:block=128, sparseloco:density=0.01)",
                    spec));
  }
  OuterCodec c;
  if (name == "none") {
    if (name.size() != spec.size()) throw bad("--outer-codec none takes no arguments");
    c.spec = c.wire = "none";
    return c;
  }
  if (name != "sparseloco") {
    c.spec = c.wire = comm::canonical_codec_spec(spec);
    return c;
  }
  // beta is OuterSync's (the accumulator's decay), the rest the codec's.
  c.sparse = true;
  c.beta = kSparseLocoBeta;
  std::string rest;
  std::string_view args = name.size() < spec.size() ? std::string_view(spec).substr(name.size() + 1)
                                                    : std::string_view();
  while (!args.empty()) {
    const std::string_view pair = args.substr(0, args.find(','));
    args.remove_prefix(std::min(args.size(), pair.size() + 1));
    if (pair.substr(0, pair.find('=')) == "beta") {
      const std::string value(pair.substr(std::min(pair.size(), pair.find('=') + 1)));
      char* end = nullptr;
      c.beta = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(c.beta >= 0 && c.beta <= 1)) {
        throw bad(
            fmt::format("--outer-codec {:?}: beta {:?} must be a number in [0, 1] (the "
                        "error feedback's decay; the paper uses 0.95)",
                        spec, value));
      }
    } else {
      rest += fmt::format("{}{}", rest.empty() ? "" : ",", pair);
    }
  }
  c.wire = comm::canonical_codec_spec(rest.empty() ? "sparseloco" : "sparseloco:" + rest);
  c.spec = fmt::format("{},beta={}", c.wire, c.beta);
  return c;
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
  if (o.fragments < 1 || o.fragments > o.outer_steps) {
    throw bad(fmt::format(
        "--outer-fragments {} must be between 1 and --outer-steps {} (fragment k syncs k * H / F "
        "steps after fragment 0)",
        o.fragments, o.outer_steps));
  }
  if (o.delay < 0 || o.delay > o.outer_steps) {
    throw bad(fmt::format(
        "--outer-delay {} must be between 1 and --outer-steps {} (the inner steps an overlapped "
        "average may take to arrive; 0: a whole round)",
        o.delay, o.outer_steps));
  }
  if (outer_codec(o.codec).sparse && o.momentum != 0) {
    throw bad(fmt::format(
        "--outer-momentum {} with --outer-codec sparseloco: SparseLoCo replaces the outer momentum "
        "by its decayed error feedback (sparseloco:beta=..., default {}); pass --outer-momentum 0",
        o.momentum, kSparseLocoBeta));
  }
}

class OuterSync::Fragment {
 public:
  Fragment(sched::PipelineComms comms, int stage, std::string name, int offset,
           std::span<const float> initial, std::optional<GradientLayout::Range> tied,
           const OuterOptions& options, OuterCodec codec, std::shared_ptr<offload::PinnedPool> pool,
           std::shared_ptr<offload::SwapStore> store);
  Fragment(const Fragment&) = delete;
  Fragment& operator=(const Fragment&) = delete;
  Fragment(Fragment&&) = delete;
  Fragment& operator=(Fragment&&) = delete;
  ~Fragment();

  OuterStepStats end_step(std::int64_t step, std::span<float> params, bool last);
  [[nodiscard]] std::vector<float> read_state(std::size_t k) const;
  [[nodiscard]] std::int64_t applied() const noexcept { return applied_; }
  // Rounds ended after `steps_done` steps (one more if the run ended there mid-round).
  [[nodiscard]] std::int64_t rounds_after(std::int64_t steps_done, bool ended) const noexcept;
  // Waits for the average in flight (if any); the state then stays as it is until the next round.
  void settle();
  [[nodiscard]] bool pending() const noexcept { return pending_; }
  // The steps an overlapped average takes to arrive (OuterOptions::delay, 0: H).
  [[nodiscard]] std::int64_t delay() const noexcept {
    return options_.delay > 0 ? options_.delay : options_.outer_steps;
  }
  // Exports into / imports from [first, first + n) of full-size arrays (OuterSync::State).
  void export_into(OuterSync::State& out, std::size_t first);
  void import_from(const OuterSync::State& in, std::size_t first, std::int64_t steps_done,
                   bool ended);
  void clear_error_feedback();

 private:
  // Posts the average of in_flight_ (non-blocking). SparseLoCo: first folds it into the error
  // feedback, e = beta * e + p, sends e's encoding and keeps e - decode(encoding) as the new e.
  void post_average();
  // Eager overlap: params = the outer step from (global_, momentum_), both left as they are, with
  // the estimate of the average of p still in flight.
  void eager_step(std::span<const float> p, std::span<float> params);
  // Overlap: applies the pending average and replaces the estimate start_ by it in params.
  void arrive(OuterStepStats& stats, std::span<float> params);
  // Waits for it and averages the tied copies (no-op when nothing is in flight).
  void complete_average(OuterStepStats& stats);
  // complete_average, then applies the outer step to global_ and momentum_.
  void finish_average(OuterStepStats& stats);
  // The outer state: 2 arrays (global, momentum), 3 with overlap (and the round's start).
  [[nodiscard]] std::size_t state_arrays() const noexcept;
  [[nodiscard]] std::string state_key(std::size_t k) const;
  void map_state();   // RAM for it, from the pool
  void load_state();  // from the store into RAM (no-op without a store)
  void save_state();  // from RAM to the store, and the RAM back to the pool (idem)

  sched::PipelineComms comms_;
  int stage_;
  std::string name_;  // "" or "/part<i>": error feedback and store keys
  int offset_;        // rounds end when step + 1 + offset_ is a multiple of H
  std::optional<GradientLayout::Range> tied_;
  OuterOptions options_;
  OuterCodec codec_;
  std::unique_ptr<comm::Codec> sparse_;  // SparseLoCo's codec, for the error feedback
  std::vector<std::byte> encoded_;       // and its scratch
  std::vector<float> decoded_;
  std::shared_ptr<offload::PinnedPool> pool_;
  std::shared_ptr<offload::SwapStore> store_;
  std::size_t n_;
  offload::PinnedPool::Lease storage_;  // in_flight_: always in RAM
  offload::PinnedPool::Lease state_;    // global_, momentum_ (and start_)
  std::span<float> global_, momentum_, start_, in_flight_;
  // Eager overlap: this replica's last pseudo-gradient and the last average applied.
  std::vector<float> own_prev_, last_average_;
  bool pending_ = false;         // in_flight_ holds a pseudo-gradient not yet applied
  std::int64_t arrive_at_ = -1;  // with one pending: the step at whose end it is applied
  std::optional<comm::Work> work_;
  std::int64_t round_ = 0;
  std::int64_t applied_ = 0;
};

OuterSync::Fragment::Fragment(sched::PipelineComms comms, int stage, std::string name, int offset,
                              std::span<const float> initial,
                              std::optional<GradientLayout::Range> tied,
                              const OuterOptions& options, OuterCodec codec,
                              std::shared_ptr<offload::PinnedPool> pool,
                              std::shared_ptr<offload::SwapStore> store)
    : comms_(comms),
      stage_(stage),
      name_(std::move(name)),
      offset_(offset),
      tied_(tied),
      options_(options),
      codec_(std::move(codec)),
      pool_(pool ? std::move(pool) : std::make_shared<offload::PinnedPool>()),
      store_(std::move(store)),
      n_(initial.size()) {
  if (codec_.sparse) {
    sparse_ = comm::make_codec_from_spec(codec_.wire);
    encoded_.resize(sparse_->encoded_bytes(n_));
    decoded_.resize(n_);
  }
  // The pseudo-gradient in flight stays in RAM: the allreduce works on it in the background.
  storage_ = pool_->acquire(n_ * sizeof(float));
  if (options_.overlap && options_.eager) {
    own_prev_.assign(n_, 0.0f);
    last_average_.assign(n_, 0.0f);
  }
  in_flight_ = std::span<float>(reinterpret_cast<float*>(storage_.data()), n_);
  std::fill(in_flight_.begin(), in_flight_.end(), 0.0f);
  map_state();
  std::copy(initial.begin(), initial.end(), global_.begin());
  std::fill(momentum_.begin(), momentum_.end(), 0.0f);
  if (options_.overlap) std::copy(initial.begin(), initial.end(), start_.begin());
  save_state();
}

std::size_t OuterSync::Fragment::state_arrays() const noexcept {
  return options_.overlap ? 3 : 2;
}

void OuterSync::Fragment::map_state() {
  state_ = pool_->acquire(state_arrays() * n_ * sizeof(float));
  auto* base = reinterpret_cast<float*>(state_.data());
  global_ = std::span<float>(base, n_);
  momentum_ = std::span<float>(base + n_, n_);
  start_ = options_.overlap ? std::span<float>(base + 2 * n_, n_) : global_;
}

std::string OuterSync::Fragment::state_key(std::size_t k) const {
  constexpr std::array<std::string_view, 3> kState{"global", "momentum", "start"};
  return fmt::format("outer{}-{}", name_, kState[k]);
}

void OuterSync::Fragment::load_state() {
  if (!store_) return;
  map_state();
  std::vector<std::future<void>> reads;
  for (std::size_t k = 0; k < state_arrays(); ++k) {
    reads.push_back(
        store_->swap_in(state_key(k), std::as_writable_bytes(std::span<float>(
                                          reinterpret_cast<float*>(state_.data()) + k * n_, n_))));
  }
  for (auto& r : reads) r.get();
}

void OuterSync::Fragment::save_state() {
  if (!store_) return;
  std::vector<std::future<void>> writes;
  for (std::size_t k = 0; k < state_arrays(); ++k) {
    writes.push_back(store_->swap_out(
        state_key(k), std::as_bytes(std::span<const float>(
                          reinterpret_cast<const float*>(state_.data()) + k * n_, n_))));
  }
  for (auto& w : writes) w.get();
  state_.reset();  // RAM holds the state only during the outer step
  global_ = momentum_ = start_ = {};
}

std::vector<float> OuterSync::Fragment::read_state(std::size_t k) const {
  std::vector<float> out(n_);
  if (store_) {
    store_->swap_in(state_key(k), std::as_writable_bytes(std::span<float>(out))).get();
  } else {
    const std::span<const float> from = k == 0 ? global_ : momentum_;
    std::copy(from.begin(), from.end(), out.begin());
  }
  return out;
}

OuterSync::Fragment::~Fragment() {
  if (!work_) return;
  try {
    work_->wait();  // its buffer is ours: it must not be written after we give it back
  } catch (...) {   // NOLINT(bugprone-empty-catch): the error was the caller's to see, not ours
  }
}

void OuterSync::Fragment::post_average() {
  const bool average = comms_.data != nullptr && comms_.data->size() > 1;
  if (codec_.sparse) {
    const auto beta = static_cast<float>(codec_.beta);
    for (std::size_t i = 0; i < n_; ++i) in_flight_[i] += beta * momentum_[i];
    // The collective encodes in_flight_ again to the same bytes (the codec is deterministic).
    sparse_->encode(in_flight_, encoded_);
    sparse_->decode(encoded_, decoded_);
    for (std::size_t i = 0; i < n_; ++i) momentum_[i] = in_flight_[i] - decoded_[i];
    if (!average) std::copy(decoded_.begin(), decoded_.end(), in_flight_.begin());
  }
  if (!average) return;
  float* buf = in_flight_.data();
  if (codec_.wire == "none") {
    work_ = comms_.data->iallreduce(buf, buf, in_flight_.size(), DType::F32, ReduceOp::Avg);
  } else {
    comm::Compression c;
    c.codec = codec_.wire;
    // Error feedback across rounds; SparseLoCo keeps its own (decayed) in momentum_.
    if (!codec_.sparse) c.key = fmt::format("outer/stage{}{}", stage_, name_);
    work_ = comms_.data->iallreduce_compressed(buf, buf, in_flight_.size(), ReduceOp::Avg, c);
  }
}

void OuterSync::Fragment::eager_step(std::span<const float> p, std::span<float> params) {
  const auto mu = codec_.sparse ? 0.0f : static_cast<float>(options_.momentum);
  const auto lr = static_cast<float>(options_.lr);
  const float replicas = comms_.data != nullptr ? static_cast<float>(comms_.data->size()) : 1.0f;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float estimate = last_average_[i] + (p[i] - own_prev_[i]) / replicas;
    own_prev_[i] = p[i];
    const float m = mu * momentum_[i] + estimate;
    params[i] = global_[i] - lr * (estimate + mu * m);
  }
}

void OuterSync::Fragment::arrive(OuterStepStats& stats, std::span<float> params) {
  finish_average(stats);
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i] += global_[i] - start_[i];  // the steps since, on the average's step
    start_[i] = global_[i];
  }
  if (!last_average_.empty())
    std::copy(in_flight_.begin(), in_flight_.end(), last_average_.begin());
  arrive_at_ = -1;
}

void OuterSync::Fragment::clear_error_feedback() {
  if (!codec_.sparse) return;
  load_state();
  std::fill(momentum_.begin(), momentum_.end(), 0.0f);
  save_state();
}

void OuterSync::Fragment::complete_average(OuterStepStats& stats) {
  if (!work_) return;
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

void OuterSync::Fragment::settle() {
  OuterStepStats ignored;
  complete_average(ignored);
}

std::int64_t OuterSync::Fragment::rounds_after(std::int64_t steps_done, bool ended) const noexcept {
  const std::int64_t h = options_.outer_steps;
  const std::int64_t full = (steps_done + offset_) / h;  // steps s < steps_done with a round end
  return full + (ended && steps_done > 0 && (steps_done + offset_) % h != 0 ? 1 : 0);
}

void OuterSync::Fragment::export_into(OuterSync::State& out, std::size_t first) {
  settle();
  load_state();
  const auto put = [&](std::vector<float>& to, std::span<const float> from) {
    std::copy(from.begin(), from.end(), to.begin() + static_cast<std::ptrdiff_t>(first));
  };
  put(out.global, global_);
  put(out.momentum, momentum_);
  if (options_.overlap) put(out.start, start_);
  if (pending_) put(out.pending, in_flight_);
  if (!own_prev_.empty()) {
    put(out.own, own_prev_);
    put(out.last_average, last_average_);
  }
  save_state();
}

void OuterSync::Fragment::import_from(const OuterSync::State& in, std::size_t first,
                                      std::int64_t steps_done, bool ended) {
  settle();
  round_ = rounds_after(steps_done, ended);
  // Without overlap every ended round was applied at once; with it, the last one waits `delay`
  // steps after its round's last unless the run ended there.
  const std::int64_t h = options_.outer_steps;
  const std::int64_t full = (steps_done + offset_) / h;
  const std::int64_t last_end = full * h - 1 - offset_;  // the last full round's last step
  arrive_at_ = last_end + delay();
  pending_ = options_.overlap && full > 0 && !ended && arrive_at_ > steps_done - 1;
  if (!pending_) arrive_at_ = -1;
  applied_ = pending_ ? round_ - 1 : round_;
  if (pending_ && in.pending.empty()) {
    throw bad(fmt::format(
        "outer state after step {}: round {} of {}'s average is pending (--outer-overlap) but "
        "the state has none; pass the state saved at that step",
        steps_done, round_, name_.empty() ? std::string("the stage") : name_));
  }
  load_state();
  const auto get = [&](std::span<float> to, const std::vector<float>& from) {
    std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(first), to.size(), to.begin());
  };
  get(global_, in.global);
  get(momentum_, in.momentum);
  if (options_.overlap) get(start_, in.start);
  if (!own_prev_.empty()) {
    const auto get_or_zero = [&](std::span<float> to, const std::vector<float>& from) {
      if (from.empty()) {
        std::fill(to.begin(), to.end(), 0.0f);
      } else {
        get(to, from);
      }
    };
    get_or_zero(own_prev_, in.own);
    get_or_zero(last_average_, in.last_average);
  }
  if (pending_) {
    get(in_flight_, in.pending);
  } else {
    std::fill(in_flight_.begin(), in_flight_.end(), 0.0f);
  }
  save_state();
}

void OuterSync::Fragment::finish_average(OuterStepStats& stats) {
  pending_ = false;
  complete_average(stats);
  if (codec_.sparse) {  // SparseLoCo: plain outer SGD, the error feedback is the momentum
    const auto lr = static_cast<float>(options_.lr);
    for (std::size_t i = 0; i < global_.size(); ++i) global_[i] -= lr * in_flight_[i];
    ++applied_;
    stats.applied = true;
    return;
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

OuterStepStats OuterSync::Fragment::end_step(std::int64_t step, std::span<float> params,
                                             bool last) {
  OuterStepStats stats;
  if (pending_ && (step >= arrive_at_ || last)) {
    load_state();
    arrive(stats, params);
    save_state();
  }
  const bool round_end = (step + 1 + offset_) % options_.outer_steps == 0 || last;
  if (round_end) {
    stats.round_ended = true;
    stats.round = round_++;
    load_state();
    // This round's pseudo-gradient: where it started minus where the inner steps took it.
    for (std::size_t i = 0; i < params.size(); ++i) in_flight_[i] = start_[i] - params[i];
    if (options_.overlap && options_.eager) eager_step(in_flight_, params);
    pending_ = true;
    post_average();
    if (!options_.overlap || last) {  // with overlap, nothing left to overlap with at the last
      finish_average(stats);
      std::copy(global_.begin(), global_.end(), params.begin());
      if (options_.overlap) std::copy(global_.begin(), global_.end(), start_.begin());
    } else {
      // Until the average arrives the replica computes from its estimate of the new weights.
      std::copy(params.begin(), params.end(), start_.begin());
      arrive_at_ = step + delay();
    }
    save_state();
  }
  stats.applied_rounds = applied_;
  return stats;
}

OuterSync::OuterSync(sched::PipelineComms comms, int stage, std::span<const float> initial,
                     std::optional<GradientLayout::Range> tied, OuterOptions options,
                     std::shared_ptr<offload::PinnedPool> pool,
                     std::shared_ptr<offload::SwapStore> store)
    : comms_(comms),
      options_(std::move(options)),
      codec_(outer_codec(options_.codec).spec),
      store_(std::move(store)),
      n_(initial.size()) {
  validate(options_);
  if (tied && tied->offset + tied->count > n_) {
    throw bad(
        fmt::format("outer sync at stage {}: the tied range [{}, {}) reaches past the {} "
                    "parameters",
                    stage, tied->offset, tied->offset + tied->count, n_));
  }
  if (!pool) pool = std::make_shared<offload::PinnedPool>();
  const int f = options_.fragments;
  const int h = options_.outer_steps;
  // The parameters outside the tied range, cut into f near-equal runs in order; a run that
  // straddles the tied range becomes two parts on the same schedule.
  const std::size_t tied_begin = tied ? tied->offset : n_;
  const std::size_t tied_end = tied ? tied->offset + tied->count : n_;
  const std::size_t rest = n_ - (tied_end - tied_begin);
  const auto actual = [&](std::size_t r) {
    return r < tied_begin ? r : r + (tied_end - tied_begin);
  };
  struct Piece {
    std::size_t first, count;
    int fragment;
    bool is_tied;
  };
  std::vector<Piece> pieces;
  for (int k = 0; k < f; ++k) {
    const std::size_t lo = rest * static_cast<std::size_t>(k) / static_cast<std::size_t>(f);
    const std::size_t hi = rest * static_cast<std::size_t>(k + 1) / static_cast<std::size_t>(f);
    if (lo == hi) continue;
    if (lo < tied_begin && hi > tied_begin) {
      pieces.push_back({lo, tied_begin - lo, k, false});
      pieces.push_back({tied_end, hi - tied_begin, k, false});
    } else {
      pieces.push_back({actual(lo), hi - lo, k, false});
    }
  }
  if (tied && tied->count > 0) pieces.push_back({tied_begin, tied->count, 0, true});
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    // Only the tied part talks over the tied group; the others have nothing tied in them.
    sched::PipelineComms c = comms_;
    if (!p.is_tied) c.tied = nullptr;
    std::optional<GradientLayout::Range> t;
    if (p.is_tied) t = GradientLayout::Range{0, p.count};
    const std::string name = pieces.size() == 1 ? std::string() : fmt::format("/part{}", i);
    fragments_.push_back(std::make_unique<Fragment>(c, stage, name, p.fragment * h / f,
                                                    initial.subspan(p.first, p.count), t, options_,
                                                    outer_codec(options_.codec), pool, store_));
    parts_.push_back({p.first, p.count, p.fragment});
  }
  data_bytes_seen_ = data_bytes_now();
}

OuterSync::~OuterSync() = default;

std::uint64_t OuterSync::data_bytes_now() const {
  return comms_.data != nullptr ? comms_.data->stats().allreduce_bytes : 0;
}

OuterStepStats OuterSync::end_step(std::int64_t step, std::span<float> params, bool last) {
  if (params.size() != n_) {
    throw bad(fmt::format("outer sync: {} parameters given for {}", params.size(), n_));
  }
  OuterStepStats stats;
  ended_ = last;
  for (std::size_t i = 0; i < fragments_.size(); ++i) {
    const OuterStepStats s =
        fragments_[i]->end_step(step, params.subspan(parts_[i].first, parts_[i].count), last);
    stats.round_ended |= s.round_ended;
    stats.applied |= s.applied;
    stats.tied_bytes += s.tied_bytes;
  }
  // Parts on one schedule end together; count each fragment (schedule) once.
  std::vector<bool> synced(static_cast<std::size_t>(options_.fragments), false);
  for (std::size_t i = 0; i < fragments_.size(); ++i) {
    const int k = parts_[i].fragment;
    const bool ends =
        (step + 1 + k * options_.outer_steps / options_.fragments) % options_.outer_steps == 0 ||
        last;
    if (ends) synced[static_cast<std::size_t>(k)] = true;
  }
  stats.fragments_synced = static_cast<int>(std::count(synced.begin(), synced.end(), true));
  if (stats.round_ended) stats.round = rounds_++;
  // Parts of one schedule apply together: count each fragment's updates once.
  std::vector<std::int64_t> per(static_cast<std::size_t>(options_.fragments), 0);
  for (std::size_t i = 0; i < fragments_.size(); ++i) {
    auto& a = per[static_cast<std::size_t>(parts_[i].fragment)];
    a = std::max(a, fragments_[i]->applied());
  }
  for (const std::int64_t a : per) stats.applied_rounds += a;
  const std::uint64_t now = data_bytes_now();
  stats.data_bytes = now - data_bytes_seen_;
  data_bytes_seen_ = now;
  return stats;
}

OuterSync::State OuterSync::export_state() {
  State out;
  out.global.assign(n_, 0.0f);
  out.momentum.assign(n_, 0.0f);
  if (options_.overlap) out.start.assign(n_, 0.0f);
  if (options_.overlap && options_.eager) {
    out.own.assign(n_, 0.0f);
    out.last_average.assign(n_, 0.0f);
  }
  const bool any_pending =
      std::any_of(fragments_.begin(), fragments_.end(), [](const auto& f) { return f->pending(); });
  if (any_pending) out.pending.assign(n_, 0.0f);
  for (std::size_t i = 0; i < fragments_.size(); ++i)
    fragments_[i]->export_into(out, parts_[i].first);
  return out;
}

void OuterSync::import_state(const State& state, std::int64_t steps_done, bool ended) {
  const auto check = [&](const std::vector<float>& v, const char* what, bool needed) {
    if ((needed || !v.empty()) && v.size() != n_) {
      throw bad(fmt::format("outer state: {} has {} values for the stage's {} parameters", what,
                            v.size(), n_));
    }
  };
  check(state.global, "global", true);
  check(state.momentum, "momentum", true);
  check(state.start, "start", options_.overlap);
  check(state.pending, "pending", false);
  check(state.own, "own", false);
  check(state.last_average, "last_average", false);
  if (!options_.overlap && !state.pending.empty()) {
    throw bad(
        "outer state: a pending average comes from an --outer-overlap run; pass --outer-overlap "
        "as the run that saved it did");
  }
  for (std::size_t i = 0; i < fragments_.size(); ++i)
    fragments_[i]->import_from(state, parts_[i].first, steps_done, ended);
  // Steps with a round end of some fragment, as end_step counts them.
  const std::int64_t h = options_.outer_steps;
  rounds_ = 0;
  for (std::int64_t s = 0; s < steps_done; ++s) {
    bool any = ended && s + 1 == steps_done;
    for (const Part& p : parts_) {
      any =
          any || (s + 1 + static_cast<std::int64_t>(p.fragment) * h / options_.fragments) % h == 0;
    }
    if (any) ++rounds_;
  }
  ended_ = ended;
  data_bytes_seen_ = data_bytes_now();
}

std::vector<float> OuterSync::gather(std::size_t k) const {
  std::vector<float> out(n_);
  for (std::size_t i = 0; i < fragments_.size(); ++i) {
    const std::vector<float> v = fragments_[i]->read_state(k);
    std::copy(v.begin(), v.end(), out.begin() + static_cast<std::ptrdiff_t>(parts_[i].first));
  }
  return out;
}

bool OuterSync::local_momentum() const {
  return outer_codec(options_.codec).sparse;
}

void OuterSync::clear_error_feedback() {
  for (auto& f : fragments_) f->clear_error_feedback();
}

std::vector<OuterSync::Part> OuterSync::parts() const {
  return parts_;
}

}  // namespace strait::train
