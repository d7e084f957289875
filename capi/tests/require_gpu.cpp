// STRAIT_REQUIRE_GPU for capi_test.c, read through the parameter registry (core/params.h), the one
// place that reads STRAIT_ variables.
#include <optional>
#include <string>

#include "core/params.h"

extern "C" int strait_test_gpu_required(void) {
  const std::optional<std::string> v = strait::params::text("STRAIT_REQUIRE_GPU");
  return v && *v == "1" ? 1 : 0;
}
