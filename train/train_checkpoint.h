// What `strait train --save DIR [--save-every N]` writes and `--resume DIR` reads, in the format of
// model/checkpoint.h (documented in docs/checkpoints.md).
//
// Saved: every parameter of the model once (the last stage's copy of the tied wte is not written:
// it is bit-identical to the first stage's), AdamW's exp_avg and exp_avg_sq for each (wherever
// they live: pinned RAM or NVMe, read through AdamWState::read_moments), and as meta the step
// count, the model's shape, the seed that fixes both the initial weights and the data sampler,
// the sampler's position (the next step: ByteDataset draws step s's sequences from a counter-based
// stream of (seed, s, sequence), so the step is its whole state), the sample seed, the optimizer's
// hyperparameters and the split that saved it. Nothing else in a run is random or stateful
// (no dropout; gradient clipping and the learning-rate schedule are functions of the step), so a
// resumed run continues bit-identically to one that never stopped. Codecs keep error-feedback
// state that is not saved, so --codec is refused with --save and --resume.
//
// DiLoCo (--outer-steps; train/outer_sync.h): the replicas hold different weights and inner
// moments between rounds, so every rank writes its own shard (shard index = world rank): replica
// 0's weights and moments under the plain names (so that the checkpoint still reads as a model),
// replica r > 0's as "replica.<r>.<name>" and "replica.<r>.optimizer.exp_avg(_sq).<name>"; the
// outer state as "outer.global.<name>", "outer.momentum.<name>" (identical on every replica,
// written by replica 0), with --outer-overlap also each replica's round start
// "[replica.<r>.]outer.start.<name>" and the averaged pseudo-gradient still to be applied
// "outer.pending.<name>"; meta "outer" holds DiLoCo's settings and whether the saving step closed
// every round (the run's last step). The round counters follow from the step. Resuming needs the
// same --stages, --replicas, --outer-steps, --outer-overlap, --outer-delay and --outer-fragments
// (each named when it differs); a lossy --outer-codec keeps error-feedback residuals in the
// communicator, which are not saved, so it is refused with --save and --resume.
//
// Collective: save_checkpoint is called by every rank of the job at the same step; the ranks of
// replica 0 each write their shard (shard r: every chunk rank r holds; replicas hold identical
// weights), rank 0 publishes. Tensors are found by name, so the shards' split does not matter to
// a reader.
// Thread-safety: none; the trainer's thread calls these between steps.
// Errors: InvalidArgument for a checkpoint whose model shape or seed differs from the run's
// (naming each field and the value to pass); the format's errors (checkpoint.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/checkpoint.h"
#include "model/rank_model.h"
#include "offload/adamw_state.h"
#include "train/outer_sync.h"
#include "train/train_config.h"

namespace strait::train {

// The meta a checkpoint of `config` at `step` (completed optimizer steps) carries.
nlohmann::json train_checkpoint_meta(const TrainConfig& config, std::int64_t step);

// Writes the checkpoint of step `step` under config.save (collective over `world`).
// `outer`: DiLoCo's outer sync (null without --outer-steps); its in-flight average is completed
// first (OuterSync::export_state).
void save_checkpoint(comm::Communicator& world, const TrainConfig& config, int stage, int replica,
                     const sched::RankModel& model, offload::AdamWState& moments, std::int64_t step,
                     OuterSync* outer = nullptr);

struct Resumed {
  std::int64_t step = 0;           // optimizer steps the checkpoint had completed
  std::vector<std::string> notes;  // settings that differ from the checkpoint's, for the log
};

// Checks the checkpoint at config.resume against the run and loads this stage's parameters and
// moments (all its chunks'). Settings that change the training from there on but not the model
// (learning rate, its schedule, AdamW's betas, weight decay, clipping, the global batch) may
// differ: each is listed in `notes`, as the resumed run is then not the one that saved. With
// `outer` (DiLoCo), loads replica `replica`'s weights and moments and the outer state.
Resumed load_checkpoint(const TrainConfig& config, sched::RankModel& model,
                        offload::AdamWState& moments, OuterSync* outer = nullptr, int replica = 0);

// --- Elastic DiLoCo (--elastic): the state a replica that joins receives ---
// One replica's whole state after `step` completed steps, as one checkpoint container
// (sched::pack_checkpoint; CHECKPOINT.md): its weights and AdamW moments under the plain names,
// outer.global.<name> and outer.momentum.<name>, and meta as a checkpoint's with "outer" and
// `extra` (the elastic membership) added. No overlap (elastic refuses it), so nothing is in
// flight. The caller sends the bytes over the communicator.
std::vector<std::byte> pack_replica_state(const TrainConfig& config, const sched::RankModel& model,
                                          offload::AdamWState& moments, OuterSync& outer,
                                          std::int64_t step, const nlohmann::json& extra);
// Loads what pack_replica_state packed into this process's model, moments and outer sync, after
// checking that its model and seed are this run's (InvalidArgument naming each field otherwise).
// Returns the meta (its "step" is where training goes on).
nlohmann::json unpack_replica_state(std::span<const std::byte> bytes, const TrainConfig& config,
                                    sched::RankModel& model, offload::AdamWState& moments,
                                    OuterSync& outer);

}  // namespace strait::train
