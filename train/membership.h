// Membership: who is in a `strait train` job (train/trainer.h) and how it changes, apart from the
// training algorithm (as torchft's membership manager is): connecting this process to the job's
// world (a launched rank from the torchrun-style environment, or with --join a joiner through the
// job's store), and with --elastic (ElasticConfig in train/train_config.h) replicas leaving and
// joining at DiLoCo's round boundaries: a world operation that loses a peer marks the world
// broken; at the round's end the survivors re-form (comm/reform.h), agree with a Min vote whether
// every one took the round's outer step (redoing it among themselves when not), admit processes
// waiting to join and send them a survivor's state. Heartbeats (comm/heartbeat.h) find lost peers.
// Ids: each rank's id is replica * stages + stage at the start (its first rank), joiners numbered
// on in whole replicas (stages consecutive ids, admitted together), so id / stages is its replica
// and id % stages its stage.
// An internal header of strait_train. Thread-safety: one thread. Errors: InvalidArgument for a
// bad environment or test hook; Aborted for a replica dropped whole or a job that keeps losing
// replicas; Unavailable below --min-replicas; comm errors other than a lost peer propagate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/bootstrap/store.h"
#include "core/error.h"
#include "train/outer_sync.h"
#include "train/rank_state.h"
#include "train/train_report.h"

namespace strait::train {

class Membership {
 public:
  Membership(RankState& state, Reporter& report) : s_(state), cfg_(state.cfg), report_(report) {}

  // Connects this process to the job's world (state.world) and reads the test hooks; returns
  // the processes on this machine (LOCAL_WORLD_SIZE; 1 for a joiner). InvalidArgument when
  // WORLD_SIZE is not stages x replicas, or --elastic runs without an agent store.
  int connect();
  // Runs a world operation; on a lost peer (PeerLost, Timeout, Aborted) marks the world broken
  // and returns false. Does nothing and returns false once it is broken.
  bool world_ok(const std::function<void()>& op);
  // A step's computation: with --elastic and stages, a lost rank of this replica breaks the step
  // itself (the replica is then dropped at the round's end, and its ranks wait for it without
  // computing). Returns whether this rank's part of the step ran to the end.
  bool compute(const std::function<void()>& step);
  // At a round's end (--elastic): the outer step, and when the world lost ranks or processes
  // wait to join, the re-formation.
  OuterStepStats round_end(int step, bool last);
  // A joiner: receives a survivor's state; returns the step to go on from.
  int receive_state();
  // Test hooks. STRAIT_TRAIN_AWAIT_JOINER=STEP: the round boundary at step STEP waits (up to
  // half the timeout) until a process waits to join. STRAIT_TRAIN_FAULT=ID:STEP:PHASE: replica ID
  // dies by SIGKILL at step STEP (1-based) in PHASE: inner (before the step's computation),
  // allreduce (in the middle of the round's pseudo-gradient average), outer (after the outer step).
  void maybe_fault(std::string_view phase, int step);
  // Who averaged the round just ended, for its line: "replicas 0-1 in (2 of 2)".
  [[nodiscard]] std::string round_members(int replicas_in) const;
  // --elastic: this rank says which weights it ends with.
  void report_end() const;

 private:
  void read_test_hooks();
  void mark_broken(const Error& e);
  // Re-forms the world (admitting joiners or not) and rebuilds the groups and the executor over
  // it; the outer sync is left for the caller to rebuild. Returns the lost replicas' ids.
  std::vector<int> adopt_reformed(bool admit);
  // The outer sync rebuilt over the current groups with `state`.
  void rebuild_outer(const OuterSync::State& state, std::int64_t steps_done, bool ended);
  // In the re-formed world, each stage's first rank (a survivor) sends its state to the ranks of
  // its stage (the joiners keep it). Returns the bytes sent, all stages together (on every rank).
  std::int64_t send_state(std::int64_t steps_done);
  // Below --min-replicas: a checkpoint (with --save), then an error.
  [[noreturn]] void stop_below_min(std::int64_t steps_done);
  // round_end's re-formation after a broken world; false when it broke again (try once more).
  bool settle_lost(int step, bool last, bool& done, const OuterSync::State& before,
                   const std::vector<float>& at_end, OuterStepStats& stats);
  // Processes waiting to join, as rank 0 sees them (0 elsewhere), in whole replicas.
  std::int64_t joiners_waiting(int step);
  // round_end's admission of waiting joiners; false when the world broke meanwhile.
  bool admit_joiners(int step, bool last);
  [[nodiscard]] std::string ids_text() const;
  // The replicas (ascending, once each) of ranks with these ids.
  [[nodiscard]] std::vector<int> replicas_of(const std::vector<int>& ids) const;

  RankState& s_;
  const TrainConfig& cfg_;
  Reporter& report_;
  std::shared_ptr<comm::Store> join_store_;  // a joiner's client of the job's store
  bool broken_ = false;                      // a world operation failed since the last round end
  bool pipeline_broken_ = false;  // and it was this replica's own pipeline: no more steps
  std::string broken_why_;
  std::vector<int> ids_;  // each rank's id (see above)
  int next_id_ = 0;       // the next joiner's id
  struct Fault {
    int id = -1;
    int step = 0;
    std::string phase;
  };
  std::optional<Fault> fault_;
  int await_joiner_ = -1;  // test hook STRAIT_TRAIN_AWAIT_JOINER=STEP (see round_end)
};

}  // namespace strait::train
