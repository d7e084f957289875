// GELU with GPT-2's tanh approximation (Hendrycks & Gimpel 2016, sec. 2; "gelu_new" in HF):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Shapes: inp, out, dout, dinp are [N] (any tensor, flattened).
// forward may run in place (out == inp). backward accumulates: dinp += gelu'(inp) * dout; dinp
// must not alias inp or dout.
// F is float or double. double evaluates the formula with libm's tanh (the reference); float as
// x * sigmoid(2u), the same value, with a polynomial exp in SSE2 lanes and a scalar tail of the
// same operations (within 1e-6 relative of double; the same bits for an element wherever it sits
// and on every x86-64 CPU).
// Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for N < 0.
#pragma once

#include <cstddef>

namespace strait::kernels {

template <class F>
void gelu_forward(F* out, const F* inp, std::ptrdiff_t N);

template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, std::ptrdiff_t N);

}  // namespace strait::kernels
