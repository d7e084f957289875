// Internal to kernels/ (and its tests): the explicit SIMD paths behind kernels/reduce.h. Callers
// use reduce() and scale(), which pick a path through simd_level() (kernels/cpu_features.h).
//
// Each SIMD function handles a prefix of the buffer and returns how many leading elements it
// reduced (or scaled); reduce() finishes the rest with the scalar path, so every path gives the
// same bits. AVX-512 always does all `count` elements (masked head to align the stores to inout,
// masked tail). AVX2 aligns its stores with a scalar head and stops at the last whole vector (the
// tail left is under 32 bytes). 0 means "not handled here" (Avg, integer scale). Same buffer rules
// as reduce(): any byte alignment, inout == in allowed.
// Calling a path the CPU lacks is an illegal instruction: check cpu_simd_level() first.
// The SIMD functions are only defined on x86-64; other targets build the scalar path alone.
#pragma once

#include <cstddef>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::kernels::detail {

// The portable loops (kernels/reduce.cpp), for any CPU; the same contract as reduce() / scale()
// without the argument checks (op is not Avg, dtype of scale is a float).
void reduce_scalar(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
void scale_scalar(DType dtype, void* inout, std::size_t count, double factor);

std::size_t reduce_avx2(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
std::size_t reduce_avx512(DType dtype, ReduceOp op, void* inout, const void* in, std::size_t count);
std::size_t scale_avx2(DType dtype, void* inout, std::size_t count, double factor);
std::size_t scale_avx512(DType dtype, void* inout, std::size_t count, double factor);

}  // namespace strait::kernels::detail
