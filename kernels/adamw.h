/// \file
/// CPU AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
/// Regularization", ICLR 2019), with bias correction as in torch.optim.AdamW (amsgrad off,
/// maximize off). For one step t >= 1 and every element i:
///   p -= lr * wd * p
///   m = b1 * m + (1 - b1) * g
///   v = b2 * v + (1 - b2) * g^2
///   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
/// evaluated as torch does: denom = sqrt(v) / sqrt(1 - b2^t) + eps, p += -(lr / (1 - b1^t)) * m /
/// denom. Shapes and dtypes: params (fp32 master weights), grads, m and v are flat fp32 ranges of
/// the same length; m and v start at zero before step 1. params_bf16, when not empty, has that
/// length too and receives the updated weights rounded to bfloat16 (the raw 16 bits, round to
/// nearest even, exactly kernels::f32_to_bf16), for a low-precision copy of the model.
/// Hyperparameters are doubles (like PyTorch's Python floats): the step's scalars are formed in
/// double and rounded to fp32 once, the per-element arithmetic is fp32.
///
/// One fused pass reads p, g, m, v and writes p, m, v (28 bytes per parameter, + 2 for bf16), with
/// explicit AVX-512 and AVX2 paths and a portable one, chosen by simd_level() (kernels/
/// cpu_features.h; STRAIT_SIMD can lower it). All paths give bit-identical results: each element is
/// computed independently with the same IEEE operations in the same order (no fused multiply-add;
/// SIMD division and square root are correctly rounded like the scalar ones). Hence splitting a
/// range into pieces (offload streams it in chunks), the SIMD level and the thread count never
/// change a bit of the result. The results differ from torch's in the last bits only where torch
/// fuses a multiply-add; tests/kernels/adamw_test.cpp checks both against a double reference.
/// Ranges must not overlap one another.
///
/// Errors: InvalidArgument for length mismatches, step < 1, or hyperparameters outside the ranges
/// torch.optim.AdamW accepts (lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0), naming the
/// argument and its value; nothing is modified then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/export.h"

namespace strait::kernels {

class TilePool;

/// AdamW's hyperparameters, with torch.optim.AdamW's defaults.
struct AdamWHyper {
  /// Learning rate, >= 0.
  double lr = 1e-3;
  /// Decay of the first moment m, in [0, 1).
  double beta1 = 0.9;
  /// Decay of the second moment v, in [0, 1).
  double beta2 = 0.999;
  /// Added to sqrt(v) (after bias correction) in the denominator, >= 0.
  double eps = 1e-8;
  /// Decoupled weight decay per step, as a fraction of lr (p -= lr * wd * p), >= 0.
  double weight_decay = 1e-2;
  /// > 0: from step freeze_variance_after + 1 on, v stops updating (v = 1 * v + 0 * g^2, bit for
  /// bit the stored v while g is finite) and its bias correction stays at 1 - b2^freeze. This is
  /// 1-bit Adam's compression stage (Tang et al., "1-bit Adam", ICML 2021, section 3): with the
  /// preconditioner fixed, the update is linear in the gradient, so the error-feedback sum of
  /// compressed gradients reaches the weights in full instead of being damped by a v that the
  /// compressed bursts inflate. 0: never (plain AdamW).
  std::int64_t freeze_variance_after = 0;
};

/// Throws InvalidArgument naming the first hyperparameter out of range.
STRAIT_API void validate(const AdamWHyper& hyper);

/// One AdamW step on the calling thread, in place on params, m and v (and params_bf16 if given).
/// Thread-safety: pure function over caller-owned memory; disjoint ranges may run in parallel.
STRAIT_API void adamw_step(std::span<float> params, std::span<const float> grads,
                           std::span<float> m, std::span<float> v, const AdamWHyper& hyper,
                           std::int64_t step, std::span<std::uint16_t> params_bf16 = {});

/// The same step spread over a persistent pool of threads: the range is cut into tiles of
/// kTileParams parameters (a multiple of every vector width, so each tile starts at the range's own
/// vector alignment), handed out dynamically; ranges of one tile or less run on the calling thread
/// alone. Results are bit-identical to adamw_step() whatever the thread count.
/// Thread-safety: step() may be called from several threads; calls on one object take turns.
/// A moved-from object may only be destroyed or assigned to.
class STRAIT_API ParallelAdamW {
 public:
  /// 64 KiB of each fp32 array per tile: p, g, m and v of a tile (256 KiB) stay within one core's
  /// L2 while it is updated, and a tile (~10-50 us of work) makes the counter's cost noise.
  static constexpr std::size_t kTileParams = std::size_t{16} * 1024;

  /// threads counts the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ParallelAdamW(unsigned threads = 0);
  ParallelAdamW(const ParallelAdamW&) = delete;
  ParallelAdamW& operator=(const ParallelAdamW&) = delete;
  /// Takes `other`'s thread pool; `other` may then only be destroyed or assigned to.
  ParallelAdamW(ParallelAdamW&&) noexcept;
  /// Stops this pool's threads, then takes `other`'s.
  ParallelAdamW& operator=(ParallelAdamW&&) noexcept;
  ~ParallelAdamW();

  /// Threads an update runs on, the calling thread included.
  [[nodiscard]] unsigned threads() const noexcept;

  /// One AdamW step (as adamw_step(), same shapes and errors), tiles spread over the threads.
  void step(std::span<float> params, std::span<const float> grads, std::span<float> m,
            std::span<float> v, const AdamWHyper& hyper, std::int64_t step,
            std::span<std::uint16_t> params_bf16 = {});

 private:
  std::unique_ptr<TilePool> pool_;
};

}  // namespace strait::kernels
