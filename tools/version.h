// strait's version and build options, for `strait --version` and `strait info`.
#pragma once

#include <string>

namespace strait::tools {

// "strait X.Y.Z (git HASH)", or "strait X.Y.Z" when the build did not know its commit.
std::string version_line();

// The build's options and what this machine supports, one "  name  value" line each: build type,
// compiler, CUDA, NCCL, UCX (built against and loaded), io_uring, hwloc, SIMD levels (compiled,
// supported by this CPU, in use).
std::string build_options();

}  // namespace strait::tools
