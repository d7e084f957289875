// Which SIMD paths this CPU runs, chosen once per process, for kernels with explicit AVX-512 /
// AVX2 paths and a scalar fallback (reductions, codecs, AdamW).
//
// simd_level(): the widest level the CPU supports (x86-64: AVX-512 needs F, BW, VL and DQ; AVX2
// needs AVX2, FMA and F16C), lowered by the environment variable STRAIT_SIMD=scalar|avx2|avx512
// (tests use it to run every path on one machine). Asking for a level the CPU lacks is an
// InvalidArgument naming what the CPU has, never an illegal-instruction crash.
// Thread-safety: detected on first use (thread-safe static); set_simd_level_for_testing() is not
// thread-safe and is meant for single-threaded tests only.
#pragma once

#include <cstdint>
#include <string_view>

namespace strait::kernels {

enum class SimdLevel : std::uint8_t { Scalar, Avx2, Avx512 };

std::string_view simd_level_name(SimdLevel level) noexcept;
// The widest level this CPU supports, ignoring STRAIT_SIMD.
SimdLevel cpu_simd_level() noexcept;
// The level kernels use: cpu_simd_level() lowered by STRAIT_SIMD. Throws InvalidArgument for an
// unknown STRAIT_SIMD value or one above cpu_simd_level().
SimdLevel simd_level();
// Forces the level kernels use (a test running every path); throws InvalidArgument above
// cpu_simd_level().
void set_simd_level_for_testing(SimdLevel level);

}  // namespace strait::kernels
