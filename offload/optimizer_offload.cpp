#include "offload/optimizer_offload.h"

#include <fmt/format.h>

#include "core/error.h"
#include "offload/host_adamw_state.h"

namespace strait::offload {

std::string_view to_string(OptimizerOffload where) noexcept {
  return where == OptimizerOffload::Nvme ? "nvme" : "cpu";
}

OptimizerOffload parse_optimizer_offload(std::string_view name) {
  if (name == "cpu") return OptimizerOffload::Cpu;
  if (name == "nvme") return OptimizerOffload::Nvme;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("--offload-optimizer {} is not a place for the optimizer state: use cpu "
                          "(AdamW moments in pinned host RAM) or nvme (in a file under "
                          "--offload-dir, streamed through io_uring)",
                          name));
}

std::unique_ptr<AdamWState> make_adamw_state(std::size_t count,
                                             const OptimizerOffloadOptions& options) {
  if (options.where == OptimizerOffload::Nvme) {
    AdamWStateFileOptions file = options.file;
    file.threads = options.threads;
    return std::make_unique<AdamWStateFile>(count, file);
  }
  return std::make_unique<HostAdamWState>(count, HostAdamWStateOptions{options.threads});
}

}  // namespace strait::offload
