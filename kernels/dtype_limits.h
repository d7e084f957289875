// The rounding limits of the floating dtypes (kernels/dtype.h), for the tolerances of checks that
// compare a result with a reference: unit roundoff and the smallest subnormal. Thread-safety: pure.
#pragma once

#include "kernels/dtype.h"

namespace strait::kernels {

// Unit roundoff of a floating dtype: half the gap between 1 and the next value (2^-24 for f32),
// the largest relative error of one rounding to it; 0 for integer dtypes.
constexpr double unit_roundoff(DType t) noexcept {
  constexpr double kRoundoff[] = {0x1p-24, 0x1p-53, 0x1p-11, 0x1p-8};  // F32, F64, F16, BF16
  return dtype_is_float(t) ? kRoundoff[static_cast<int>(t)] : 0.0;
}

// The smallest positive (subnormal) value of a floating dtype; 0 for integer dtypes.
constexpr double smallest_subnormal(DType t) noexcept {
  constexpr double kSmallest[] = {0x1p-149, 0x1p-1074, 0x1p-24, 0x1p-133};  // F32, F64, F16, BF16
  return dtype_is_float(t) ? kSmallest[static_cast<int>(t)] : 0.0;
}

}  // namespace strait::kernels
