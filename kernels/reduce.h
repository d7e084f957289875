// Elementwise reductions used by the collectives' inner loops (CPU).
//
// reduce(dtype, op, inout, in, count): inout[i] = inout[i] (op) in[i] for i < count. Buffers may be
// unaligned; they must not partially overlap (inout == in is allowed). f16/bf16 are widened to f32
// for the arithmetic and rounded to nearest even on the way back, as NCCL does.
// Avg is not an elementwise op: collectives reduce with Sum and then call scale(1/world_size).
// Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for Avg (use Sum + scale) and for scale() of integer dtypes.
#pragma once

#include <cstddef>
#include <string_view>

#include "kernels/dtype.h"

namespace strait::kernels {

enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg };

std::string_view reduce_op_name(ReduceOp op) noexcept;

void reduce(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);

// inout[i] *= factor, computed in the element type's precision (f32 for f16/bf16).
void scale(DType dtype, void* inout, std::size_t count, double factor);

}  // namespace strait::kernels
