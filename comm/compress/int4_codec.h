// `int4`: blockwise absmax 4-bit quantization (-7..7, two per byte), 1/2 + 4/block bytes per
// element (block=64: 0.5625 B, 7.1x smaller than fp32). As in Dettmers & Zettlemoyer 2023 ("The
// case for 4-bit precision") with a linear code, rounding as in int8_codec.h.
// Arguments: block (default 64, even and > 0), stochastic (0|1, default 0), seed (u64, default 0).
// Error bound, per element of a block with absmax A (scale s = A / 7): nearest rounding
// |x - decode(x)| <= s / 2 (plus fp32 rounding); stochastic |x - decode(x)| < s, unbiased.
// A block with A < 2^-100 decodes to exact zeros. Coarse: use it with error feedback.
#pragma once

#include "comm/compress/absmax_codec.h"

namespace strait::comm {

class Int4Codec final : public AbsmaxCodec {
 public:
  explicit Int4Codec(const AbsmaxOptions& options = {.block = 64}) : AbsmaxCodec(4, options) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "int4"; }
};

}  // namespace strait::comm
