// Test helpers: the SIMD levels this CPU runs (the ones it lacks printed as skipped) and a scope
// that forces one level and restores the previous one. Shared by the reduction tests.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace strait::kernels::testing {

inline std::vector<SimdLevel> cpu_levels() {
  std::vector<SimdLevel> out = {SimdLevel::Scalar};
  for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (cpu_simd_level() >= level) {
      out.push_back(level);
    } else {
      std::printf("skipped level %s: this CPU lacks it\n",
                  std::string(simd_level_name(level)).c_str());
    }
  }
  return out;
}

// Forces a level for one scope and restores the one in force before.
class LevelScope {
 public:
  explicit LevelScope(SimdLevel level) : previous_(simd_level()) {
    set_simd_level_for_testing(level);
  }
  ~LevelScope() { set_simd_level_for_testing(previous_); }
  LevelScope(const LevelScope&) = delete;
  LevelScope& operator=(const LevelScope&) = delete;

 private:
  SimdLevel previous_;
};

}  // namespace strait::kernels::testing
