/// \file
/// The reduction operators of every reducing collective and kernel (kernels/reduce.h reduces with
/// them). A header of its own so that the SIMD paths (kernels/reduce_simd.h) name the operator
/// without depending on the dispatcher above them.
#pragma once

#include <cstdint>

namespace strait::kernels {

/// Reduction operator. Avg is Sum followed by scale(1 / world size), floats only.
enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg };

}  // namespace strait::kernels
