// The file `strait tune` writes: STRAIT_TUNE_FILE's JSON (comm/algorithms/selection.h) with the
// tuner's rules, plus what it measured and derived. Members:
//   "rules":  [{"collective": "allreduce", "ranks": "2", "bytes": "0-8K",
//               "algorithm": "recursive_doubling", "codec": "none"},
//              {"collective": "allreduce", "ranks": "2", "bytes": "8K-inf",
//               "algorithm": "ring", "seg": "1M", "codec": "int8"}]
//             contiguous byte ranges from 0 to inf for the measured world size; "algorithm"/"seg"
//             is what plain allreduce runs, "codec" what allreduce_compressed with codec "auto"
//             runs (the fastest within --max-codec; "none": uncompressed).
//   "sites":  [[0, 1], [2, 3]]  ranks grouped by link bandwidth (comm/sites.h); the format of
//             STRAIT_TOPOLOGY_FILE, so the file can serve as that too.
//   "links":  {"latency_us": [[...]], "bandwidth_MBps": [[...]]}  per pair (comm/links.h), 0 on the
//             diagonal; MB = 10^6 bytes.
//   "tuner":  {"world_size", "max_codec", "site_factor", "tolerance", "sizes_bytes": [...],
//              "time_us": {"<candidate>": [per size, slowest rank's median]}}
// Thread-safety: pure. Errors: write_config throws Io naming the path when it cannot write it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/links.h"
#include "tools/tune/decide.h"

namespace strait::tools::tune {

struct TuneResult {
  Measurements measurements{};
  Decision decision{};
  comm::Links links{};
  std::vector<std::vector<int>> sites{};
  std::string max_codec{};
  double site_factor = 0;
  double tolerance = 0;
};

nlohmann::json config_json(const TuneResult& result);

// Writes the JSON to path.tmp, then renames it over path, so a reader never sees half a file.
void write_config(const std::filesystem::path& path, const nlohmann::json& config);

}  // namespace strait::tools::tune
