// `int8`: blockwise absmax int8 quantization, 1 + 4/block bytes per element (block=256:
// 1.0156 B, 3.94x smaller than fp32). As in Dettmers et al. 2022 ("8-bit Optimizers via Block-wise
// Quantization") with a linear code; stochastic rounding as in Gupta et al. 2015 ("Deep Learning
// with Limited Numerical Precision").
// Arguments: block (default 256, > 0), stochastic (0|1, default 0), seed (u64, default 0).
// Error bound, per element of a block with absmax A (scale s = A / 127): nearest rounding
// |x - decode(x)| <= s / 2 (plus fp32 rounding of q * s); stochastic |x - decode(x)| < s and
// E[decode(x)] = x. A block with A < 2^-100 (all zeros included) decodes to exact zeros.
// Stochastic rounding: the n-th encode() of a codec draws from stream (seed, n), so it is
// deterministic per seed and sequence of calls, and the same on every CPU and SIMD path.
#pragma once

#include "comm/compress/absmax_codec.h"

namespace strait::comm {

class Int8Codec final : public AbsmaxCodec {
 public:
  explicit Int8Codec(const AbsmaxOptions& options = {}) : AbsmaxCodec(8, options) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "int8"; }
};

}  // namespace strait::comm
