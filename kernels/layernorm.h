// Layer normalisation over the last dimension (Ba, Kiros, Hinton 2016; GPT-2 uses it pre-block).
//
// Shapes (row-major): inp/out/dout/dinp [N, C] with N = B * T rows; weight, bias, dweight, dbias
// [C]; mean, rstd [N].
// forward:  mean = avg(x), var = avg((x - mean)^2) (biased, as PyTorch), rstd = 1/sqrt(var + eps),
//           out = (x - mean) * rstd * weight + bias, with eps = 1e-5 (GPT-2's). Saves mean and
//           rstd for backward.
// backward: with n = (x - mean) * rstd and g = weight * dout,
//           dinp += rstd * (g - avg(g) - n * avg(g * n)), dweight += n * dout, dbias += dout.
//           Accumulates (+=) into dinp, dweight and dbias; dinp must not alias dout. dweight
//           and dbias may be null to skip them (each value is computed the same way either way).
// F is float or double. Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for N < 0 or C <= 0.
#pragma once

namespace strait::kernels {

inline constexpr double kLayerNormEps = 1e-5;

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C);

template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C);

}  // namespace strait::kernels
