#include "tools/tune/candidates.h"

#include "tools/tune/budget.h"

namespace strait::tools::tune {

std::vector<Candidate> allreduce_candidates(std::span<const std::uint64_t> segments) {
  std::vector<Candidate> out;
  for (const auto& info : comm::registered_algorithms()) {
    if (info.collective != "allreduce") continue;
    if (!info.segmented) {
      const comm::Selection s{&info, {}};
      out.push_back(Candidate{.label = s.describe(), .algorithm = s});
      continue;
    }
    for (const auto seg : segments) {
      const comm::Selection s{&info, comm::AlgorithmParams{.segment_bytes = seg}};
      out.push_back(Candidate{.label = s.describe(), .algorithm = s});
    }
  }
  for (const auto& name : codecs_by_accuracy()) {
    if (name == "none") continue;
    out.push_back(Candidate{.label = name, .codec = name, .level = codec_level(name)});
  }
  return out;
}

}  // namespace strait::tools::tune
