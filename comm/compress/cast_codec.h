// The cast codecs: each fp32 cast elementwise to a narrower (or the same) float type.
//   `none`: fp32 passed through unchanged (4 bytes per element). The one summable codec: its wire
//     is plain fp32, so a collective may reduce encoded buffers directly. Values are not checked
//     for NaN/Inf, as an uncompressed collective does not check them.
//   `bf16`: rounded to bfloat16 (nearest even), 2 bytes per element. Finite values beyond bf16's
//     range clamp to +-3.3895e38 instead of becoming Inf. Error bound: |x - decode(x)| <= 2^-8 |x|
//     (8 significant bits, half an ulp), as in mixed-precision training with bfloat16 (Kalamkar et
//     al. 2019, "A Study of BFLOAT16 for Deep Learning Training").
//   `fp16`: rounded to IEEE binary16 (nearest even), 2 bytes per element. Finite values clamp to
//     +-65504 rather than overflowing to Inf; magnitudes below 2^-14 keep fewer bits (subnormals),
//     below 2^-25 become zero, so scale gradients up first (loss scaling, Micikevicius et al. 2018,
//     "Mixed Precision Training"). Error bound: |x - decode(x)| <= 2^-11 |x| for
//     2^-14 <= |x| <= 65504; <= 2^-25 below.
// Thread-safety: as Codec (codec.h); a cast codec holds no state but its cast.
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

enum class Cast { None, Bf16, Fp16 };

class CastCodec final : public Codec {
 public:
  explicit CastCodec(Cast cast) noexcept : cast_(cast) {}

  // "none", "bf16" or "fp16"; the spec is the name (the casts take no arguments).
  [[nodiscard]] std::string_view name() const noexcept override;
  [[nodiscard]] std::string spec() const override { return std::string(name()); }
  // 4 bytes per element for none, 2 for bf16 and fp16.
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override;
  [[nodiscard]] bool summable() const noexcept override { return cast_ == Cast::None; }

 private:
  Cast cast_;  // picks the row of cast_codecs.cpp's table the calls below go through

  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;
};

}  // namespace strait::comm
