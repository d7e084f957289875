// The tables `strait tune` prints (rank 0): the link matrices and sites, and per size the best
// algorithm, the best codec within the budget and the faster codec the budget refused.
// Thread-safety: pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "comm/links.h"
#include "tools/tune/decide.h"

namespace strait::tools::tune {

std::string format_links(const comm::Links& links, const std::vector<std::vector<int>>& sites,
                         double site_factor);

// Times in microseconds; busbw in GB/s (10^9 bytes) with nccl-tests' allreduce factor 2(n-1)/n.
std::string format_decision(const Measurements& m, const Decision& d, std::string_view max_codec);

}  // namespace strait::tools::tune
