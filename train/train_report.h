// What a `strait train` job tells its user (train/trainer.h): rank 0's lines (the job and model at
// the start, a line per step and per DiLoCo round, evaluations, the held-out loss table next to
// the byte n-gram baselines, the sample) and the --metrics JSON lines (one per step, round,
// evaluation and elastic event, then a summary). Figures are gathered by the job; this only
// formats and writes them.
// An internal header of strait_train. Thread-safety: one thread. Errors: InvalidArgument when the
// metrics file cannot be opened.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/baselines.h"
#include "offload/adamw_state.h"
#include "train/outer_sync.h"
#include "train/rank_state.h"
#include "train/train_config.h"

namespace strait::train {

// "1 replica", "2 replicas" (many: the plural when it is not one + "s").
std::string plural(std::int64_t n, std::string_view one, std::string_view many = {});
// "512 B", "1.5 KiB", "2.25 MiB".
std::string human_bytes(double bytes);

// One replica's resident activation slots per stage, from RankState::activation_figures summed
// over the world: slots, slots without offload, bytes per slot; and bytes with and without.
struct ActivationTotals {
  std::vector<std::int64_t> slots, slots_without, slot_bytes;
  double bytes = 0, bytes_without = 0;
};
ActivationTotals activation_totals(const std::vector<double>& summed, int stages);

// One step, job-wide (what its aggregation gave rank 0).
struct StepFigures {
  int step = 0;  // 0-based
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  double allreduce_bytes = 0;  // all ranks, DiLoCo's outer step included
  double offload_wait_s = 0;   // mean over ranks
  double outer_bytes = 0;      // between replicas in DiLoCo's outer step
  double outer_s = 0;          // mean over ranks
  int replicas_in_step = 0;    // elastic: replicas that computed the step
};

// What the end of a run reports.
struct RunTotals {
  double train_s = 0;  // steps only
  double total_s = 0;
  double outer_bytes = 0, outer_wait_s = 0;
};

class Reporter {
 public:
  explicit Reporter(const TrainConfig& config) : cfg_(config) {}
  // Prints and writes only on world rank `rank` 0: open at the start (truncates --metrics),
  // set_rank when the world is re-formed (appends, when rank 0 was lost).
  void open(int rank);
  void set_rank(int rank);

  // A metrics record (rank 0 with --metrics).
  void emit(const nlohmann::json& record);
  // The job, the model, the data, the optimizer, activations, DiLoCo, the codec.
  void start(const RankState& state, const ActivationTotals& activations) const;
  void step(const StepFigures& f, const offload::AdamWStepStats& optimizer);
  // A DiLoCo round ended at `last_step` (0-based), which began at first_step; `who`: the
  // replicas in (replicas_in of them); round_bytes: the outer bytes since the last round.
  void round(const OuterStepStats& outer, int first_step, int last_step, const std::string& who,
             int replicas_in, double round_bytes);
  void eval(int steps_done, double eval_loss);
  // done, DiLoCo's totals, the held-out table next to the byte n-gram baselines of rank 0's
  // corpus (and its metrics record); returns those baselines (empty on other ranks).
  sched::ByteBaselines held_out(const RankState& state, const RunTotals& totals, double eval_loss);
  // The sample, the total time and the summary record.
  void finish(const RankState& state, const RunTotals& totals, double eval_loss,
              const sched::ByteBaselines& baselines, const ActivationTotals& activations,
              const std::vector<std::int32_t>& sample);

 private:
  [[nodiscard]] double tokens_per_step() const;
  [[nodiscard]] double tokens_per_s(const RunTotals& totals) const;

  const TrainConfig& cfg_;
  int rank_ = -1;
  std::ofstream metrics_;
};

}  // namespace strait::train
