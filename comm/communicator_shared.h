// What the communicators of one process share: the store, the progress engine (which owns the
// transport) and the selection table (Communicator::Shared). Sub-communicators keep it alive.
// Private to comm/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/store.h"
#include "comm/heartbeat.h"
#include "comm/progress_engine.h"

namespace strait::comm {

struct CommunicatorShared {
  std::shared_ptr<Store> store;
  std::shared_ptr<ProgressEngine> engine;
  std::shared_ptr<const AlgorithmTable> algorithms;
  // Elastic membership (comm/reform.h): the store the world was created over (the one reform()
  // agrees through; `store` is a view of it under "strait/gen/<g>" from generation 1 on), the
  // world's generation, and each world rank's rank in the previous generation (-1: a joiner).
  std::shared_ptr<Store> root_store;
  std::uint64_t generation = 0;
  std::vector<int> former_ranks;
  std::chrono::milliseconds heartbeat_interval{0};  // 0: none
  // CommOptions::heartbeat's monitor, or null. Last: stops before the engine it aborts goes.
  std::unique_ptr<HeartbeatMonitor> heartbeat;
};

}  // namespace strait::comm
