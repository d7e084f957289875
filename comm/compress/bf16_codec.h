// `bf16`: each fp32 rounded to bfloat16 (nearest even), 2 bytes per element. Finite values beyond
// bf16's range clamp to +-3.3895e38 instead of becoming Inf.
// Error bound: |x - decode(x)| <= 2^-8 |x| (8 significant bits, half an ulp), as in mixed-precision
// training with bfloat16 (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training").
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

class Bf16Codec final : public Codec {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "bf16"; }
  [[nodiscard]] std::string spec() const override { return "bf16"; }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override { return 2 * count; }

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;
};

}  // namespace strait::comm
