/// \file
/// Elementwise reductions used by the collectives' inner loops (CPU).
///
/// reduce(dtype, op, inout, in, count): inout[i] = inout[i] (op) in[i] for i < count, for every
/// dtype of kernels/dtype.h and op Sum, Prod, Min or Max; Band, Bor, Bxor for integer dtypes.
/// Buffers need no alignment (any byte address); they must not partially overlap (inout == in is
/// allowed). Paths: AVX-512, AVX2 or scalar, picked per call by simd_level()
/// (kernels/cpu_features.h; STRAIT_SIMD lowers it). Every path gives the same bits, save one case
/// noted below.
/// - Floats: IEEE 754 arithmetic in the element type, rounded to nearest even. f16/bf16 are widened
///   to f32 for the arithmetic and rounded back as f32_to_f16 / f32_to_bf16 do (f16 overflows to
///   Inf and keeps subnormals; a NaN becomes sign | 0x7e00 in f16, and in bf16 its top 16 bits
///   with the quiet bit set), as NCCL does. Assumes the default MXCSR (no flush-to-zero or
///   denormals-are-zero).
/// - Min/Max are `std::min`/`std::max`: min(x, y) = y < x ? y : x, max(x, y) = x < y ? y : x,
///   where x is the inout element. So when either side is NaN, or both are zeros of any sign, the
///   result is x, unchanged (a signalling NaN stays signalling in f32/f64).
/// - Sum/Prod with one NaN give that NaN, quieted. When both sides are NaN the result is one of
///   them, quieted, and which one may differ between paths and compilers (IEEE 754 leaves it open;
///   x86 returns the first operand of the instruction, and compilers may swap the operands of an
///   add or a multiply). This is the one case where paths may differ, in NaN payload or sign only.
/// - Integers wrap modulo 2^bits like NCCL (i8: 127 + 1 = -128; prod keeps the low bits).
/// Avg is not an elementwise op: collectives reduce with Sum and then call scale(1/world_size).
/// Thread-safety: pure functions over caller-owned memory.
/// Errors: InvalidArgument for Avg (use Sum + scale), for a bitwise op on a floating-point dtype,
/// for scale() of integer dtypes, and (from
/// simd_level()) for a bad STRAIT_SIMD.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/export.h"
#include "kernels/dtype.h"
#include "kernels/reduce_op.h"

namespace strait::kernels {

/// The op's name ("sum", "prod", "min", "max", "avg", "band", "bor", "bxor").
STRAIT_API std::string_view reduce_op_name(ReduceOp op) noexcept;

/// inout[i] = inout[i] (op) in[i] for i < count (see the file comment for NaNs, rounding,
/// integers). Throws InvalidArgument for Avg. Thread-safe over distinct buffers.
STRAIT_API void reduce(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);

/// inout[i] *= factor for float dtypes, computed in the element type's precision: factor is
/// rounded to f32 for f32/f16/bf16, and f16/bf16 are widened and rounded back as in reduce(). Same
/// paths, buffers and bit-identity as reduce().
STRAIT_API void scale(DType dtype, void* inout, std::size_t count, double factor);

}  // namespace strait::kernels
