#include "train/train_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/corpus.h"
#include "model/transformer.h"
#include "scheduler/schedule.h"

namespace strait::train {
// The reference model and the scheduler are this application's vocabulary.
using namespace strait::sched;  // NOLINT(google-build-using-namespace)

namespace {

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

// Bytes of the sample as printable text: bytes that are not printable ASCII or common whitespace
// are shown as \xNN so a terminal is never confused by a half-learned byte model.
std::string printable(const std::vector<std::int32_t>& tokens) {
  std::string out;
  for (const std::int32_t t : tokens) {
    const auto c = static_cast<unsigned char>(t);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// Add-one (Laplace) smoothing for the n-gram baselines: every byte keeps a non-zero probability, so
// held-out bytes unseen in training (or pairs, for the bigram) cost a finite loss.
constexpr double kBaselineSmoothing = 1.0;

// The held-out loss next to what byte frequencies alone achieve, in nats and bits per byte: the
// n-gram models' cross-entropy on the same held-out bytes, then the training split's own entropies
// (what those models score on the text they were counted on).
void print_held_out(double eval_loss, const ByteBaselines& b) {
  const auto row = [](std::string_view name, double nats) {
    fmt::print("  {:<44} {:>9.4f} {:>9.4f}\n", name, nats, bits_per_byte(nats));
  };
  fmt::print("{:<46} {:>9} {:>9}\n", fmt::format("held-out loss, {} bytes", b.positions),
             "nats/byte", "bits/byte");
  row("model", eval_loss);
  row("bigram baseline (add-one, training counts)", b.bigram_held_out);
  row("unigram baseline (add-one, training counts)", b.unigram_held_out);
  row("training split H(X_t | X_t-1) (plug-in)", b.bigram_entropy);
  row("training split H(X) (plug-in)", b.unigram_entropy);
  if (b.bigram_held_out > 0) {
    fmt::print("model vs bigram baseline: {:.1f}% {} loss\n",
               100.0 * std::abs(eval_loss / b.bigram_held_out - 1.0),
               eval_loss <= b.bigram_held_out ? "lower" : "higher");
  }
}

}  // namespace

std::string plural(std::int64_t n, std::string_view one, std::string_view many) {
  if (n == 1) return fmt::format("1 {}", one);
  return many.empty() ? fmt::format("{} {}s", n, one) : fmt::format("{} {}", n, many);
}

std::string human_bytes(double b) {
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024.0));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

ActivationTotals activation_totals(const std::vector<double>& summed, int stages) {
  const auto per_stage = [&](std::size_t k) {  // whole numbers, summed exactly in doubles
    const auto n = static_cast<std::size_t>(stages);
    std::vector<std::int64_t> v(n);
    for (std::size_t s = 0; s < n; ++s) v[s] = std::llround(summed[k * n + s]);
    return v;
  };
  ActivationTotals a{per_stage(0), per_stage(1), per_stage(2)};
  for (std::size_t s = 0; s < a.slots.size(); ++s) {
    a.bytes += static_cast<double>(a.slots[s] * a.slot_bytes[s]);
    a.bytes_without += static_cast<double>(a.slots_without[s] * a.slot_bytes[s]);
  }
  return a;
}

void Reporter::open(int rank) {
  rank_ = rank;
  if (rank_ == 0 && !cfg_.metrics.empty()) {
    metrics_.open(cfg_.metrics, std::ios::trunc);
    if (!metrics_) throw bad(fmt::format("cannot write --metrics {}", cfg_.metrics.string()));
  }
}

void Reporter::set_rank(int rank) {
  rank_ = rank;
  if (rank_ == 0 && !cfg_.metrics.empty() && !metrics_.is_open()) {
    metrics_.open(cfg_.metrics, std::ios::app);  // rank 0 of the old world was lost
  }
}

void Reporter::emit(const nlohmann::json& record) {
  if (metrics_.is_open()) metrics_ << record.dump() << '\n' << std::flush;
}

double Reporter::tokens_per_step() const {
  const std::int64_t seqs = static_cast<std::int64_t>(cfg_.microbatches) * cfg_.microbatch_size;
  return static_cast<double>(seqs * cfg_.replicas * cfg_.ctx);
}

double Reporter::tokens_per_s(const RunTotals& totals) const {
  return totals.train_s > 0 ? tokens_per_step() * cfg_.steps / totals.train_s : 0.0;
}

void Reporter::start(const RankState& state, const ActivationTotals& activations) const {
  if (rank_ != 0) return;
  const GptConfig g = cfg_.gpt();
  const auto& corpus = state.dataset->corpus();
  fmt::print(
      "strait train: {} = {} x {}, {} schedule{}, {} of {} x {} bytes per replica per step\n",
      plural(cfg_.world_size(), "rank"), plural(cfg_.stages, "stage"),
      plural(cfg_.replicas, "replica"), schedule_kind_name(cfg_.schedule),
      state.model->chunks() > 1
          ? fmt::format(" ({} model chunks per rank: {} pipeline stages)", state.model->chunks(),
                        cfg_.stages * state.model->chunks())
          : std::string(),
      plural(cfg_.microbatches, "microbatch", "microbatches"),
      plural(cfg_.microbatch_size, "sequence"), cfg_.ctx);
  fmt::print(
      "model: GPT-2, {} layers{}, dim {}, {} heads, context {}, {:.2f} M parameters; AdamW "
      "lr {} (warm-up {} steps), weight decay {}\n",
      g.layers,
      cfg_.stage_layers.empty() ? std::string()
                                : fmt::format(" (per stage {})", fmt::join(cfg_.stage_layers, ",")),
      g.dim, g.heads, g.ctx, static_cast<double>(g.num_params()) / 1e6, cfg_.lr, cfg_.warmup_steps,
      cfg_.weight_decay);
  if (!identity_placement(cfg_.placement)) {
    fmt::print("placement (--placement {}): rank 0 runs replica {}'s stage {}\n",
               fmt::join(cfg_.placement, ","), state.replica, state.stage);
  }
  fmt::print("data: {} ({} train / {} held-out)\n", cfg_.data.string(),
             human_bytes(static_cast<double>(corpus.train().size())),
             human_bytes(static_cast<double>(corpus.eval().size())));
  fmt::print("optimizer moments (--offload-optimizer {}): rank 0's {}; update on {}\n",
             offload::to_string(cfg_.offload_optimizer), state.moments->describe(),
             plural(state.moments->threads(), "thread"));
  if (cfg_.offload_activations != ActivationOffload::None) {
    fmt::print(
        "activations: offloaded to {} (prefetch {}): {} per replica in activation slots "
        "{} per stage, instead of {} in {}\n",
        to_string(cfg_.offload_activations), cfg_.offload_prefetch, human_bytes(activations.bytes),
        fmt::join(activations.slots, "/"), human_bytes(activations.bytes_without),
        fmt::join(activations.slots_without, "/"));
  } else {
    fmt::print("activations: {} per replica in activation slots {} per stage\n",
               human_bytes(activations.bytes), fmt::join(activations.slots, "/"));
  }
  if (state.outer) {
    fmt::print(
        "DiLoCo: {} inner steps per round, no gradient average between replicas inside a "
        "round; pseudo-gradients averaged with codec {}{}, outer Nesterov lr {} momentum {}{}\n",
        cfg_.outer_steps, state.outer->codec_spec(),
        state.outer->codec_spec() == "none" ? "" : " (error feedback per stage)", cfg_.outer_lr,
        cfg_.outer_momentum,
        !cfg_.outer_overlap ? std::string()
        : cfg_.outer_delay == 0
            ? fmt::format("; overlapped{}: each round's average applied one round late",
                          cfg_.outer_eager ? " (eager)" : "")
            : fmt::format("; overlapped{}: each round's average applied {} inner step{} later",
                          cfg_.outer_eager ? " (eager)" : "", cfg_.outer_delay,
                          cfg_.outer_delay == 1 ? "" : "s"));
    if (cfg_.outer_fragments > 1) {
      fmt::print(
          "fragments: {} parameter groups per stage, fragment k syncing {} steps after "
          "fragment 0\n",
          cfg_.outer_fragments, fmt::format("k x {}", cfg_.outer_steps / cfg_.outer_fragments));
    }
    fmt::print("outer state (--outer-state {}): {}\n", offload::to_string(cfg_.outer_state),
               state.outer->on_store()
                   ? fmt::format("a file per rank in {}, in RAM during the outer step only",
                                 cfg_.offload_dir.string())
                   : std::string("pinned host RAM"));
  }
  if (!cfg_.codec.empty()) {
    fmt::print("{} average: {} after {} uncompressed, with error feedback per stage{}\n",
               to_string(cfg_.compress), cfg_.codec_spec(), plural(cfg_.codec_warmup_steps, "step"),
               cfg_.freeze_variance_after() > 0 ? "; AdamW's variance frozen from then on" : "");
  }
}

void Reporter::step(const StepFigures& f, const offload::AdamWStepStats& optimizer) {
  if (rank_ != 0) return;
  if ((f.step + 1) % cfg_.log_every == 0 || f.step == 0 || f.step + 1 == cfg_.steps) {
    fmt::print(
        "step {:4d}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:7.0f} tok/s | "
        "allreduce {} | {:.0f} ms\n",
        f.step + 1, cfg_.steps, f.loss, f.lr, f.grad_norm, tokens_per_step() / f.seconds,
        human_bytes(f.allreduce_bytes), f.seconds * 1e3);
    std::fflush(stdout);
  }
  nlohmann::json record = {
      {"type", "step"},
      {"step", f.step + 1},
      {"loss", f.loss},
      {"lr", f.lr},
      {"grad_norm", f.grad_norm},
      {"tokens_per_s", tokens_per_step() / f.seconds},
      {"allreduce_bytes", static_cast<std::uint64_t>(f.allreduce_bytes)},
      {"offload_wait_s", f.offload_wait_s},  // mean over ranks
      {"seconds", f.seconds},
      // Rank 0's optimizer step: all of it, the update, and the wait for its I/O (nvme).
      {"optimizer_seconds", optimizer.total_s},
      {"optimizer_compute_seconds", optimizer.compute_s},
      {"optimizer_io_wait_seconds", optimizer.io_wait_s},
      {"optimizer_io_bytes", optimizer.bytes_read + optimizer.bytes_written},
      {"outer_bytes", static_cast<std::uint64_t>(f.outer_bytes)},  // between replicas
      {"outer_seconds", f.outer_s}};                               // mean over ranks
  // Elastic: how many replicas computed the step (the loss is their mean); a rank whose world
  // is broken counts only its own until the round's end.
  if (cfg_.elastic) record["replicas_in_step"] = f.replicas_in_step;
  emit(record);
}

void Reporter::round(const OuterStepStats& outer, int first_step, int last_step,
                     const std::string& who, int replicas_in, double round_bytes) {
  if (rank_ != 0) return;
  fmt::print(
      "round {} (steps {}-{}): {}; outer average{} {} since the "
      "last round, {} applied\n",
      outer.round + 1, first_step + 1, last_step + 1, who,
      cfg_.outer_fragments > 1
          ? fmt::format(" of {} of {} fragments", outer.fragments_synced, cfg_.outer_fragments)
          : std::string(),
      human_bytes(round_bytes), plural(outer.applied_rounds, "outer update"));
  std::fflush(stdout);
  emit({{"type", "round"},
        {"round", outer.round + 1},
        {"first_step", first_step + 1},
        {"last_step", last_step + 1},
        {"replicas_in", replicas_in},
        {"fragments_synced", outer.fragments_synced},
        {"outer_bytes", static_cast<std::uint64_t>(round_bytes)},
        {"applied_rounds", outer.applied_rounds}});
}

void Reporter::eval(int steps_done, double eval_loss) {
  if (rank_ != 0) return;
  fmt::print("eval at step {}: loss {:.4f} nats/byte ({:.4f} bits/byte)\n", steps_done, eval_loss,
             bits_per_byte(eval_loss));
  std::fflush(stdout);
  emit({{"type", "eval"}, {"step", steps_done}, {"eval_loss", eval_loss}});
}

ByteBaselines Reporter::held_out(const RankState& state, const RunTotals& totals,
                                 double eval_loss) {
  // Rank 0 (stage 0) holds the corpus: the baselines come from its counts, scored on the same
  // held-out positions as the model.
  ByteBaselines baselines;
  if (rank_ != 0) return baselines;
  baselines = held_out_baselines(*state.dataset, kBaselineSmoothing);
  fmt::print("done: {} in {:.1f} s ({:.0f} tok/s)\n", plural(cfg_.steps, "step"), totals.train_s,
             tokens_per_s(totals));
  if (cfg_.outer_steps > 0) {
    fmt::print(
        "DiLoCo: {} between replicas in the outer steps; {:.1f} s waiting for them (mean over "
        "ranks), compute utilisation {:.1f}%\n",
        human_bytes(totals.outer_bytes), totals.outer_wait_s,
        totals.train_s > 0 ? 100.0 * (1.0 - totals.outer_wait_s / totals.train_s) : 100.0);
  }
  print_held_out(eval_loss, baselines);
  std::fflush(stdout);
  emit({{"type", "eval"}, {"step", cfg_.steps}, {"eval_loss", eval_loss}});
  return baselines;
}

void Reporter::finish(const RankState& state, const RunTotals& totals, double eval_loss,
                      const ByteBaselines& baselines, const ActivationTotals& activations,
                      const std::vector<std::int32_t>& sample) {
  if (rank_ != 0) return;
  if (cfg_.sample_bytes > 0) {  // --sample-bytes 0 asks for none
    fmt::print("sample ({}; {} bytes after {:?}):\n{}\n", cfg_.sampling().describe(),
               cfg_.sample_bytes, cfg_.prompt, printable(sample));
  }
  fmt::print("total time {:.1f} s\n", totals.total_s);
  std::fflush(stdout);
  emit({{"type", "summary"},
        {"eval_loss", eval_loss},
        {"eval_bits_per_byte", bits_per_byte(eval_loss)},
        {"eval_positions", baselines.positions},
        // nats per byte; *_held_out: add-alpha cross-entropy on the eval positions.
        {"baselines",
         {{"smoothing_alpha", baselines.alpha},
          {"unigram_entropy", baselines.unigram_entropy},
          {"bigram_entropy", baselines.bigram_entropy},
          {"unigram_held_out", baselines.unigram_held_out},
          {"bigram_held_out", baselines.bigram_held_out}}},
        {"sampling", cfg_.sampling().describe()},
        {"seconds", totals.total_s},
        {"totals.train_seconds", totals.train_s},
        {"tokens_per_s", tokens_per_s(totals)},
        {"codec", cfg_.codec_spec()},
        {"codec_warmup_steps", cfg_.codec_warmup_steps},
        {"freeze_variance_after", cfg_.freeze_variance_after()},
        {"compress", to_string(cfg_.compress)},
        {"outer_steps", cfg_.outer_steps},
        {"outer_lr", cfg_.outer_lr},
        {"outer_momentum", cfg_.outer_momentum},
        {"outer_codec", state.outer ? state.outer->codec_spec() : std::string()},
        {"outer_overlap", cfg_.outer_overlap},
        {"outer_delay", cfg_.outer_delay},
        {"outer_eager", cfg_.outer_eager},
        {"outer_fragments", cfg_.outer_fragments},
        {"outer_state", offload::to_string(cfg_.outer_state)},
        {"outer_bytes", static_cast<std::uint64_t>(totals.outer_bytes)},
        // Time in inner steps / training time (the outer step's wait, mean over ranks, is not).
        {"compute_utilisation",
         totals.train_s > 0 ? 1.0 - totals.outer_wait_s / totals.train_s : 1.0},
        {"offload_optimizer", offload::to_string(cfg_.offload_optimizer)},
        {"offload_activations", to_string(cfg_.offload_activations)},
        {"offload_prefetch", cfg_.offload_prefetch},
        {"activation_slots", activations.slots},
        {"activation_slots_without_offload", activations.slots_without},
        {"activation_bytes", activations.bytes},
        {"activation_bytes_without_offload", activations.bytes_without},
        {"sample", printable(sample)}});
}

}  // namespace strait::train
