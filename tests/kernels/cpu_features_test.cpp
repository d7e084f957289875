#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace strait::kernels {
namespace {

TEST(CpuFeatures, DetectedLevelMatchesTheCompilersOwnCpuidChecks) {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const SimdLevel expected =
      avx512 ? SimdLevel::Avx512 : (avx2 ? SimdLevel::Avx2 : SimdLevel::Scalar);
  EXPECT_EQ(cpu_simd_level(), expected) << simd_level_name(cpu_simd_level());
#else
  EXPECT_EQ(cpu_simd_level(), SimdLevel::Scalar);
#endif
}

TEST(CpuFeatures, ForcingALevelAboveTheCpusIsRefusedWithWhatItHas) {
  set_simd_level_for_testing(SimdLevel::Scalar);
  EXPECT_EQ(simd_level(), SimdLevel::Scalar);
  if (cpu_simd_level() == SimdLevel::Avx512) GTEST_SKIP() << "this CPU supports every level";
  try {
    set_simd_level_for_testing(SimdLevel::Avx512);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("supports at most"), std::string::npos) << e.what();
  }
}

TEST(CpuFeatures, LevelNames) {
  EXPECT_EQ(simd_level_name(SimdLevel::Scalar), "scalar");
  EXPECT_EQ(simd_level_name(SimdLevel::Avx2), "avx2");
  EXPECT_EQ(simd_level_name(SimdLevel::Avx512), "avx512");
}

}  // namespace
}  // namespace strait::kernels
