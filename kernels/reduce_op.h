/// \file
/// The reduction operators of every reducing collective and kernel (kernels/reduce.h reduces with
/// them). A header of its own so that the SIMD paths (kernels/reduce_simd.h) name the operator
/// without depending on the dispatcher above them.
#pragma once

#include <cstdint>

namespace strait::kernels {

/// Reduction operator. Avg is Sum followed by scale(1 / world size), floats only. Band, Bor and
/// Bxor (bitwise and, or, xor) are for integer dtypes only (kernels::reduce and the collectives
/// refuse them for floating point with InvalidArgument).
enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg, Band, Bor, Bxor };

/// Whether op is one of the bitwise ops (integer dtypes only).
constexpr bool reduce_op_is_bitwise(ReduceOp op) noexcept {
  return op == ReduceOp::Band || op == ReduceOp::Bor || op == ReduceOp::Bxor;
}

}  // namespace strait::kernels
