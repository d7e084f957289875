// Step 2 of `strait tune`: the time of every candidate (candidates.h) at every size.
//
// Algorithm candidates run the plain allreduce on a communicator of their own, created over
// `store` (under the prefix "tune/<label>") with a selection table that forces the candidate, so
// that nothing but the algorithm differs; codec candidates run allreduce_compressed on `comm`
// (with an error-feedback key for the codecs that need one, as training would).
// Each (candidate, size) point: one warm-up call, whose slowest-rank time decides the number of
// timed calls (at most `iters`, and about `seconds_per_point` of calls, at least one); a barrier;
// the calls timed one by one; the point's time is the slowest rank's median. A candidate whose
// warm-up is `prune_factor` times slower than the best point so far at that size is not timed
// further (its warm-up time stands: it cannot win). The inputs are f32, pseudo-random in [-1, 1].
// Every decision uses values allreduced with max, so all ranks run the same calls.
// Collective over comm; every rank passes the same arguments. Errors: the Communicator's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/communicator.h"
#include "tools/tune/decide.h"

namespace strait::tools::tune {

struct MeasureOptions {
  std::vector<std::uint64_t> sizes{};  // bytes, ascending, multiples of 4 (f32 elements)
  int iters = 10;
  double seconds_per_point = 0.5;
  double prune_factor = 8;
};

// progress(line) is called on every rank after each candidate (rank 0 prints it).
Measurements measure_allreduce(comm::Communicator& comm, comm::Store& store,
                               std::span<const Candidate> candidates, const MeasureOptions& options,
                               const std::function<void(const std::string&)>& progress);

}  // namespace strait::tools::tune
