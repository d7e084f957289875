#include "kernels/cpu_features.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>

#include "core/error.h"
#include "core/params.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strait::kernels {
namespace {

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang before 16 has no "f16c" for __builtin_cpu_supports,
// and the fuzz targets build this file with clang. Usable whenever AVX2 is (same YMM state).
bool has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

SimdLevel detect() noexcept {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return SimdLevel::Avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
    return SimdLevel::Avx2;
  }
#endif
  return SimdLevel::Scalar;
}

void check_supported(SimdLevel want, std::string_view source) {
  if (static_cast<int>(want) <= static_cast<int>(cpu_simd_level())) return;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{} asks for {} kernels, but this CPU supports at most {}: use one of "
                          "scalar{}{}",
                          source, simd_level_name(want), simd_level_name(cpu_simd_level()),
                          cpu_simd_level() >= SimdLevel::Avx2 ? ", avx2" : "",
                          cpu_simd_level() >= SimdLevel::Avx512 ? ", avx512" : ""));
}

SimdLevel from_environment() {
  const std::optional<std::string> s = params::get_enum("STRAIT_SIMD");
  if (!s) return cpu_simd_level();
  std::optional<SimdLevel> want;
  for (auto l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (*s == simd_level_name(l)) want = l;
  }
  check_supported(*want, fmt::format("STRAIT_SIMD={}", *s));
  return *want;
}

std::optional<SimdLevel>& forced() {
  static std::optional<SimdLevel> level;
  return level;
}

}  // namespace

std::string_view simd_level_name(SimdLevel level) noexcept {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "?";
}

SimdLevel cpu_simd_level() noexcept {
  static const SimdLevel level = detect();
  return level;
}

SimdLevel simd_level() {
  if (forced()) return *forced();
  static const SimdLevel level = from_environment();
  return level;
}

void set_simd_level_for_testing(SimdLevel level) {
  check_supported(level, "set_simd_level_for_testing");
  forced() = level;
}

}  // namespace strait::kernels
