// `onebit`: 1-bit sign with a per-block scale, 1/8 + 4/block bytes per element (block=256:
// 0.1406 B, 28x smaller than fp32). Each element decodes to sign(x) * mean|x| of its block (-0.0
// counts as negative): Seide et al. 2014 ("1-Bit Stochastic Gradient Descent and its Application to
// Data-Parallel Distributed Training of Speech DNNs"), as 1-bit Adam compresses the momentum (Tang
// et al. 2021). Biased: use it with error feedback, which those papers rely on.
// Arguments: block (default 256, a multiple of 8).
// Error bound: none per element beyond |x - decode(x)| <= |x| + mean|x|; decode(x) is exactly
// +-scale, and the block's scale is its mean |x| (fp32 sum in a fixed order, so within ~block *
// 2^-24 relative of the exact mean).
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

class OneBitCodec final : public Codec {
 public:
  explicit OneBitCodec(std::size_t block = 256);
  [[nodiscard]] std::string_view name() const noexcept override { return "onebit"; }
  [[nodiscard]] std::string spec() const override;
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override;
  [[nodiscard]] bool needs_error_feedback() const noexcept override { return true; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return block_; }
  [[nodiscard]] std::size_t block() const noexcept { return block_; }

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;

  std::size_t block_;
};

}  // namespace strait::comm
