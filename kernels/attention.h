// Causal multi-head self-attention (Vaswani et al. 2017, "Attention Is All You Need"; GPT-2's
// masked self-attention), computed with one GEMM per (sequence, head) instead of llm.c's loops.
//
// Shapes (row-major): qkv/dqkv [B, T, 3C] holding q, k, v concatenated along channels, each split
// into NH heads of hs = C / NH channels (head h of q is channels [h*hs, (h+1)*hs)); out/dout
// [B, T, C] with the heads concatenated the same way; preatt/att [B, NH, T, T].
// forward:  s[i, j] = q_i . k_j / sqrt(hs) for j <= i (causal mask: j > i is excluded),
//           att[i, :] = softmax(s[i, :]) (att[i, j > i] = 0), out_i = sum_j att[i, j] v_j.
//           att is what backward needs. preatt, if not null, receives the scaled scores s with
//           -infinity where the mask applies (for inspection; backward does not read it).
// backward: accumulates (+=) into dqkv the gradient of sum(dout * out); scratch must hold T * T
//           elements (its contents on return are unspecified). dqkv must not alias qkv or dout.
// F is float or double. Thread-safety: reentrant; OpenBLAS may use its own threads.
// Errors: InvalidArgument for negative sizes, NH <= 0 or C not divisible by NH.
#pragma once

namespace strait::kernels {

template <class F>
void attention_forward(F* out, F* preatt, F* att, const F* qkv, int B, int T, int C, int NH);

template <class F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B,
                        int T, int C, int NH);

}  // namespace strait::kernels
