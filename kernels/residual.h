// Residual connection: out = a + b elementwise (the transformer's residual stream).
//
// Shapes: a, b, out, dout, da, db are [N] (any tensor, flattened).
// forward may run in place (out == a or out == b). backward accumulates: da += dout, db += dout;
// da and db must be distinct from each other (the same buffer would receive dout twice, which is
// only right if the caller means it).
// F is float or double. Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for N < 0.
#pragma once

#include <cstddef>

namespace strait::kernels {

template <class F>
void residual_forward(F* out, const F* a, const F* b, std::ptrdiff_t N);

template <class F>
void residual_backward(F* da, F* db, const F* dout, std::ptrdiff_t N);

}  // namespace strait::kernels
