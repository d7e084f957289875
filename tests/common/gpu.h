// GPU tests: skip with the reason when no CUDA device is usable, or fail instead when the
// environment says a GPU must be there (bench/gpu_check.sh sets STRAIT_REQUIRE_GPU=1, so a broken
// driver on the GPU machine is a failure, not a silent skip).
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>

#include "core/params.h"
#include "kernels/device_reduce.h"

namespace strait::test {

inline bool gpu_required() {
  const std::optional<std::string> v = params::text("STRAIT_REQUIRE_GPU");
  return v && *v != "0";
}

}  // namespace strait::test

// Use at the top of a TEST body: returns from it (skipped or failed) when there is no device.
#define STRAIT_SKIP_WITHOUT_CUDA_DEVICE()                                                    \
  do {                                                                                       \
    std::string strait_no_device_why;                                                        \
    if (!::strait::kernels::cuda_device_available(&strait_no_device_why)) {                  \
      if (::strait::test::gpu_required()) {                                                  \
        FAIL() << "no CUDA device, and STRAIT_REQUIRE_GPU is set: " << strait_no_device_why; \
      }                                                                                      \
      GTEST_SKIP() << "no CUDA device: " << strait_no_device_why;                            \
    }                                                                                        \
  } while (false)
