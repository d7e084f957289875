// Fully connected layer, nn.Linear layout: out[N, OC] = inp[N, C] . weight[OC, C]^T + bias[OC].
//
// Shapes (row-major): inp/dinp [N, C] (N = B * T rows), weight/dweight [OC, C], bias/dbias [OC],
// out/dout [N, OC]. bias may be null (no bias, e.g. the tied unembedding logits = x . wte^T).
// backward accumulates (+=): dinp += dout . weight, dweight += dout^T . inp, dbias += sum_n dout.
// Any of dinp, dweight, dbias may be null to skip that gradient. Outputs must not alias inputs.
// Computed with OpenBLAS GEMMs (kernels/gemm.h) in F's precision; F is float or double.
// Thread-safety: reentrant; OpenBLAS may use its own threads.
// Errors: InvalidArgument for negative sizes.
#pragma once

namespace strait::kernels {

template <class F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC);

template <class F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC);

}  // namespace strait::kernels
