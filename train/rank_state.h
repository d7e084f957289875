// RankState: the pieces one process of a `strait train` job holds (train/trainer.h), and how they
// are built over a world: its groups (the pipeline of its replica, the data-parallel group of its
// stage, the tied-embedding pair), its model chunks, the executor with its gradient sync
// (train/data_parallel_sync.h), the AdamW state, DiLoCo's outer sync, the data; and what the
// trained pieces do beyond a step (held-out loss, generation, the trace).
// An internal header of strait_train: the job (trainer.cpp), its membership (membership.h) and its
// reports (train_report.h) share it. Thread-safety: one thread. Errors: those of what it builds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "model/data.h"
#include "model/rank_model.h"
#include "offload/adamw_state.h"
#include "scheduler/executor.h"
#include "train/outer_sync.h"
#include "train/train_config.h"

namespace strait::train {

struct RankState {
  explicit RankState(const TrainConfig& config) : cfg(config) {}

  // The groups over `world` (rank, stage, replica, replicas from it).
  void build_groups();
  // The executor and its gradient sync over the current groups (after moments exist: momentum
  // compression reads the optimizer's m).
  void build_training();
  // DiLoCo's outer sync over the current groups, starting from the model's weights.
  void build_outer();
  // Everything after build_groups on a fresh world: GEMM threads, the data, the model, the AdamW
  // state, the executor, DiLoCo. local_world_size: processes on this machine (for the threads).
  void build(int local_world_size);
  // Replica 0's activation memory per stage (zeros elsewhere, summed over the world by the job):
  // [slots..., slots without offload..., bytes per slot...], stages values each.
  [[nodiscard]] std::vector<double> activation_figures() const;

  // The held-out loss, nats per byte (collective: every rank of the world).
  double evaluate();
  // The prompt and the sampled bytes after it (collective over each replica's pipeline).
  std::vector<std::int32_t> generate();
  // Every rank's trace records to rank 0, which writes cfg.trace (collective).
  void write_trace();

  const TrainConfig& cfg;
  std::unique_ptr<comm::Communicator> world, pipe, data, tied;
  int rank = 0, stage = 0, replica = 0;
  int replicas = 1;  // replicas in the current world
  std::optional<sched::ByteDataset> dataset;
  std::unique_ptr<sched::RankModel> model;  // this rank's model chunks
  std::unique_ptr<offload::AdamWState> moments;
  std::unique_ptr<sched::PipelineExecutor> executor;
  std::unique_ptr<OuterSync> outer;  // DiLoCo (--outer-steps); destroyed before its comms
  std::vector<offload::DecayGroup> groups;
  unsigned threads = 1;         // GEMM and AdamW threads of this rank
  double rss_before_model = 0;  // resident bytes before the model and its state were built
};

}  // namespace strait::train
