// What `strait diagnose` concludes from every rank's flight-recorder dump (tools/diagnose/dump.h):
// for each communicator, the operation the ranks are stuck in ("ranks 0, 1, 3 wait in allreduce
// #57; rank 2 never entered it; its last finished operation is #56"), the ranks that passed it,
// those that wrote no dump, point-to-point operations still waiting, and mismatches (ranks that
// ran different operations under one sequence number); then the ranks to look at first.
// A pure function of the dumps, so that it is tested on hand-written ones.
// Thread-safety: values.
#pragma once

#include <string>
#include <vector>

#include "tools/diagnose/dump.h"

namespace strait::tools::diagnose {

struct Report {
  std::string text;           // what the command prints
  std::vector<int> suspects;  // world ranks to look at first (never entered, no dump), ascending
  bool mismatch = false;      // ranks ran different operations under one sequence number
};

// `dumps`: every file of the directory. Keeps the newest job's dumps (by "job" and time) and the
// newest dump of each rank, and says what it left out.
Report analyse(std::vector<Dump> dumps);

// "rank 2", "ranks 0, 1, 3", "ranks 0-3" (ascending, no duplicates expected).
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace strait::tools::diagnose
