// CPU AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
// Regularization", ICLR 2019), with bias correction as in torch.optim.AdamW (amsgrad off,
// maximize off). For one step t >= 1 and every element i:
//   p -= lr * wd * p
//   m = b1 * m + (1 - b1) * g
//   v = b2 * v + (1 - b2) * g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// Shapes and dtypes: params, grads, m and v are flat fp32 ranges of the same length; m and v start
// at zero before step 1. Hyperparameters are doubles (like PyTorch's Python floats): the step's
// scalars are formed in double and rounded to fp32 once, the per-element arithmetic is fp32.
// Every element is computed independently with the same operations, so splitting a range into
// pieces (offload streams it in chunks) gives bit-identical results to one call over the whole.
// Thread-safety: pure function over caller-owned memory; disjoint ranges may run in parallel.
// Errors: InvalidArgument for length mismatches, step < 1, or hyperparameters outside the ranges
// torch.optim.AdamW accepts (lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0).
#pragma once

#include <cstdint>
#include <span>

namespace strait::kernels {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Throws InvalidArgument naming the first hyperparameter out of range.
void validate(const AdamWHyper& hyper);

// One AdamW step, in place on params, m and v.
void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> m,
                std::span<float> v, const AdamWHyper& hyper, std::int64_t step);

}  // namespace strait::kernels
