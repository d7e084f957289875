// Placement: which world rank runs each (replica, stage) slot of a `strait train` job. The one
// place that maps world ranks to pipeline slots and back; the trainer's groups (pipeline
// neighbours, data-parallel groups per stage, the tied-embedding pair), the checkpoints, the
// report and the planner's prices all go through it.
// A placement is a list of stages x replicas world ranks: entry i is the rank that runs the i-th
// slot in replica-major order (slot i = replica i / stages, stage i % stages), so the identity
// (the default, also written as an empty list) is rank = replica * stages + stage. Placing the
// slowest ranks on the stage with the fewest layers, or a pipeline's stages inside one site so that
// only the gradient average crosses the slow link, is Holmes's placement for unlike clusters.
// Thread-safety: pure functions. Errors: InvalidArgument from check_placement (naming what is
// wrong and the fix) and from the lookups when a rank or slot is outside the world.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace strait::train {

struct Slot {
  int replica = 0, stage = 0;
};

// The world rank of (replica, stage); `placement` empty: the identity.
int placement_rank(std::span<const int> placement, int stages, int replica, int stage);
// The slot that world rank `rank` runs (the inverse of placement_rank).
Slot placement_slot(std::span<const int> placement, int stages, int rank);
// Whether `placement` is empty or the identity.
bool identity_placement(std::span<const int> placement);
// `placement`, or the identity when empty, as world_size ranks.
std::vector<int> placement_or_identity(std::span<const int> placement, int world_size);
// Throws InvalidArgument naming `option` (e.g. "--placement") unless `placement` is empty or a
// permutation of 0 .. world_size - 1 (stages x replicas entries).
void check_placement(std::span<const int> placement, int stages, int replicas,
                     const std::string& option);

}  // namespace strait::train
