// `fp16`: each fp32 rounded to IEEE binary16 (nearest even), 2 bytes per element. Finite values
// clamp to +-65504 rather than overflowing to Inf; magnitudes below 2^-14 keep fewer bits
// (subnormals), below 2^-25 become zero, so scale gradients up first (loss scaling, Micikevicius et
// al. 2018, "Mixed Precision Training").
// Error bound: |x - decode(x)| <= 2^-11 |x| for 2^-14 <= |x| <= 65504; <= 2^-25 below.
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

class Fp16Codec final : public Codec {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "fp16"; }
  [[nodiscard]] std::string spec() const override { return "fp16"; }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override { return 2 * count; }

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;
};

}  // namespace strait::comm
