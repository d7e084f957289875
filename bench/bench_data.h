// strait-bench's data: deterministic inputs per (rank, index), the expected result computed
// independently in double, and the comparison with a tolerance fit for the dtype.
//
// Inputs are exactly representable in the dtype (generated in double, then rounded to it), so
// the expected value of a reduction is the exact combination of what each rank really sent. The
// tolerance then only has to cover the rounding of the collective's own partial results:
// |got - exact| <= (terms + 1) * u * sum|x| for sum (and avg, divided by the rank count),
// (terms + 1) * u * |product| for prod, where u is the dtype's unit roundoff (2^-24 for f32,
// 2^-53 for f64, 2^-11 for f16, 2^-8 for bf16: f16 and bf16 are rounded back after every step).
// Integers, min, max and data movement must match exactly; integers wrap as two's complement.
#pragma once

#include <cstddef>
#include <functional>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::bench {

// Element i of a buffer of `dtype`, as double (f16/bf16 widened exactly).
double load(kernels::DType dtype, const void* buf, std::size_t i);
// Stores v rounded to `dtype` (nearest even; integers must be in range).
void store(kernels::DType dtype, void* buf, std::size_t i, double v);

// The value `rank` contributes at `index`, already representable in `dtype`. Reductions with
// prod get values near 1 so that products of many ranks stay in range; integers stay small.
double input_value(kernels::DType dtype, kernels::ReduceOp op, int rank, std::size_t index);

// Fills buf[0, count) with input_value(dtype, op, rank, first + i).
void fill_inputs(kernels::DType dtype, kernels::ReduceOp op, int rank, std::size_t first, void* buf,
                 std::size_t count);

// What an element should hold, and how much rounding its computation may carry.
struct Expected {
  double value = 0;
  double magnitude = 0;  // sum|x| for sum and avg, |product| for prod; 0 when exact
  int terms = 1;         // values combined
};

// The exact op over `ranks` values value_of(0 .. ranks-1) (wrapped for integer dtypes).
Expected reduce_expected(kernels::DType dtype, kernels::ReduceOp op, int ranks,
                         const std::function<double(int)>& value_of);
// A value copied, not computed: it must match exactly.
inline Expected copied(double v) {
  return Expected{.value = v, .magnitude = 0, .terms = 1};
}

// Whether `got` is within the dtype's tolerance of `want` (NaN never is).
bool matches(kernels::DType dtype, kernels::ReduceOp op, const Expected& want, double got);

}  // namespace strait::bench
