// What the communicators of one process share: the store, the progress engine (which owns the
// transport) and the selection table. Sub-communicators keep it alive. Private to comm/.
#pragma once

#include <memory>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/store.h"
#include "comm/communicator.h"
#include "comm/progress_engine.h"

namespace strait::comm {

struct Communicator::Shared {
  std::shared_ptr<Store> store;
  std::shared_ptr<ProgressEngine> engine;
  std::shared_ptr<const AlgorithmTable> algorithms;
};

}  // namespace strait::comm
