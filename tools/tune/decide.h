// The tuner's decision, a pure function: measured times in, selection rules out. Kept apart from
// the measuring so that it can be tested on synthetic tables and rerun on a saved one.
//
// Per measured size: the fastest algorithm (plain allreduce), and the fastest codec within the
// accuracy budget, where "none" is that fastest algorithm. Times within `tolerance` of the fastest
// (t <= fastest * (1 + tolerance)) are ties, so that run-to-run noise does not pick a lossier codec
// or flip between equivalent algorithms: ties go to the less lossy codec, then to the earlier
// candidate (registration order; "none" first). Every rank given the same table decides the
// same. The fastest codec above the budget that beats the choice beyond the tolerance is reported.
// Rules: adjacent sizes with the same algorithm and codec merge into one byte range; the border
// between two measured sizes a < b lies near their geometric mean (rounded down to 2 significant
// binary digits: 4K|16K -> 8K, 4K|8K -> 5K); the first range starts at 0 and the last ends at inf,
// so every size is covered; each rule is for this world size only (ranks = world_size).
// Errors: InvalidArgument for a table whose shape is wrong (sizes not ascending, a row of the
// wrong length) or a size at which no algorithm was measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/algorithms/selection.h"
#include "tools/tune/candidates.h"

namespace strait::tools::tune {

struct Measurements {
  int world_size = 0;
  std::vector<std::uint64_t> sizes{};  // bytes of the whole vector, strictly ascending
  std::vector<Candidate> candidates{};
  // time_us[c][s]: candidate c at sizes[s], microseconds (the slowest rank's); NaN or infinity:
  // not measured (never chosen).
  std::vector<std::vector<double>> time_us{};
};

struct SizeChoice {
  std::uint64_t bytes = 0;
  std::size_t algorithm = 0;  // index into candidates
  double algorithm_us = 0;
  std::optional<std::size_t> codec{};        // nullopt: "none" (the plain allreduce above)
  double codec_us = 0;                       // the choice's time (algorithm_us for "none")
  std::optional<std::size_t> over_budget{};  // a faster codec the budget refused, the fastest
};

struct Decision {
  std::vector<SizeChoice> sizes{};
  // "allreduce" rules, ascending, contiguous over [0, inf), each with an algorithm and a codec
  // ("none" or a codec spec).
  std::vector<comm::SelectionRule> rules{};
};

// max_level: the budget (budget.h), codecs of a higher level are never chosen. tolerance >= 0.
Decision decide(const Measurements& m, int max_level, double tolerance = 0.05);

// Where the range of size a ends and that of size b begins (a < b): a < result <= b.
std::uint64_t range_border(std::uint64_t a, std::uint64_t b);

}  // namespace strait::tools::tune
