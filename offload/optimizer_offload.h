/// \file
/// Optimizer-state offload: the choice between keeping a rank's AdamW moments in pinned host RAM
/// (HostAdamWState) and on NVMe (AdamWStateFile), as `strait train --offload-optimizer cpu|nvme`
/// exposes it (ZeRO-Offload, Ren et al., USENIX ATC 2021; ZeRO-Infinity, Rajbhandari et al.,
/// SC 2021). Both give bit-identical results (offload/adamw_state.h), so the choice trades memory
/// (8 bytes per parameter of RAM for cpu, a pinned chunk buffer per in-flight chunk for nvme)
/// against step time (nvme streams 8 bytes per parameter each way per step).
/// Thread-safety: the functions are pure; the states follow AdamWState.
/// Errors: InvalidArgument for an unknown location name (listing the valid ones); the states'
/// constructors' errors (for nvme: a missing or unwritable directory, a full disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/export.h"
#include "offload/adamw_state.h"
#include "offload/adamw_state_file.h"

namespace strait::offload {

/// Where make_adamw_state keeps the AdamW moments (`strait train --offload-optimizer`).
enum class OptimizerOffload : std::uint8_t {
  Cpu,   ///< moments in locked host memory
  Nvme,  ///< moments in a file under AdamWStateFileOptions::dir
};

/// "cpu" / "nvme".
STRAIT_API std::string_view to_string(OptimizerOffload where) noexcept;
/// Parses "cpu" or "nvme"; anything else is InvalidArgument naming the value and the choices.
STRAIT_API OptimizerOffload parse_optimizer_offload(std::string_view name);

/// What make_adamw_state builds.
struct OptimizerOffloadOptions {
  /// RAM or file.
  OptimizerOffload where = OptimizerOffload::Cpu;
  /// Threads of the update, the calling thread included; 0: std::thread::hardware_concurrency().
  /// Replaces file.threads.
  unsigned threads = 0;
  AdamWStateFileOptions file;  ///< for Nvme only (directory, tag, chunking, I/O engine)
};

/// The AdamW state of `count` parameters where options.where says.
STRAIT_API std::unique_ptr<AdamWState> make_adamw_state(std::size_t count,
                                                        const OptimizerOffloadOptions& options);

}  // namespace strait::offload
