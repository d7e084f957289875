#include "tools/version.h"

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "tools/build_options.h"
#include "tools/git_commit.h"

namespace strait::tools {

std::string version_line() {
  const std::string commit = STRAIT_GIT_COMMIT;
  return commit.empty() ? fmt::format("strait {}", STRAIT_BUILD_VERSION)
                        : fmt::format("strait {} (git {})", STRAIT_BUILD_VERSION, commit);
}

std::string build_options() {
  using kernels::SimdLevel;
  std::string in_use;
  try {
    in_use = kernels::simd_level_name(kernels::simd_level());
  } catch (const Error& e) {  // a bad STRAIT_SIMD: say so here rather than fail `strait info`
    in_use = fmt::format("none ({})", e.what());
  }
  std::string supported;
  for (auto l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (l > kernels::cpu_simd_level()) break;
    supported += fmt::format("{}{}", supported.empty() ? "" : ", ", kernels::simd_level_name(l));
  }
  const auto line = [](std::string_view name, std::string_view value) {
    return fmt::format("  {:<10} {}\n", name, value);
  };
  return line("build", STRAIT_BUILD_TYPE) + line("compiler", STRAIT_BUILD_COMPILER) +
         line("CUDA", STRAIT_BUILD_CUDA) + line("NCCL", STRAIT_BUILD_NCCL) +
         line("UCX", fmt::format("{} (loaded: {})", STRAIT_BUILD_UCX, ucp_get_version_string())) +
         line("io_uring", fmt::format("liburing {}", STRAIT_BUILD_URING)) +
         line("hwloc", STRAIT_BUILD_HWLOC) +
         line("SIMD", fmt::format("compiled: scalar, avx2, avx512; this CPU: {}; in use: {}",
                                  supported, in_use));
}

}  // namespace strait::tools
