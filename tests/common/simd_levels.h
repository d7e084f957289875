// Running a test body once per SIMD level this CPU supports (kernels/cpu_features.h), restoring the
// level the process had afterwards.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace strait::test {

// The levels this CPU runs, in order; the ones it lacks are printed as skipped.
inline std::vector<kernels::SimdLevel> supported_simd_levels() {
  std::vector<kernels::SimdLevel> out;
  for (auto l :
       {kernels::SimdLevel::Scalar, kernels::SimdLevel::Avx2, kernels::SimdLevel::Avx512}) {
    if (l <= kernels::cpu_simd_level()) {
      out.push_back(l);
    } else {
      std::printf("skipped simd level %s: this CPU lacks it\n",
                  std::string(kernels::simd_level_name(l)).c_str());
    }
  }
  return out;
}

class SimdLevelGuard {
 public:
  SimdLevelGuard() : saved_(kernels::simd_level()) {}
  ~SimdLevelGuard() { kernels::set_simd_level_for_testing(saved_); }
  SimdLevelGuard(const SimdLevelGuard&) = delete;
  SimdLevelGuard& operator=(const SimdLevelGuard&) = delete;

 private:
  kernels::SimdLevel saved_;
};

// Forces `level` for one scope, then restores the level in force before.
class ScopedSimdLevel {
 public:
  explicit ScopedSimdLevel(kernels::SimdLevel level) { kernels::set_simd_level_for_testing(level); }

 private:
  SimdLevelGuard guard_;  // constructed first: saves the level before it is forced
};

// Calls f(level) with the kernels forced to each supported level in turn.
template <class F>
void for_each_simd_level(F&& f) {
  const SimdLevelGuard guard;
  for (const auto level : supported_simd_levels()) {
    kernels::set_simd_level_for_testing(level);
    SCOPED_TRACE(testing::Message() << "simd level " << kernels::simd_level_name(level));
    f(level);
  }
}

}  // namespace strait::test
