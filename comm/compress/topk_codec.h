// `topk`: top-k sparsification, k = ceil(fraction * count) elements of largest magnitude (ties: the
// lower index) sent as (u32 index, f32 value) pairs: 8 * fraction bytes per element (fraction=0.01:
// 0.08 B, 50x smaller than fp32). As in Aji & Heafield 2017 ("Sparse Communication for Distributed
// Gradient Descent") and Lin et al. 2018 (Deep Gradient Compression); biased, so use it with error
// feedback (Stich et al. 2018, "Sparsified SGD with Memory").
// Arguments: fraction (default 0.01, in (0, 1]).
// Error bound: kept elements decode exactly; every other element decodes to 0, so
// |x - decode(x)| <= the k-th largest |x|. Counts must stay below 2^32 (u32 indices).
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

class TopkCodec final : public Codec {
 public:
  explicit TopkCodec(double fraction = 0.01);
  [[nodiscard]] std::string_view name() const noexcept override { return "topk"; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return 0; }
  [[nodiscard]] std::string spec() const override;
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override;
  [[nodiscard]] bool needs_error_feedback() const noexcept override { return true; }
  [[nodiscard]] double fraction() const noexcept { return fraction_; }

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;

  double fraction_;
};

}  // namespace strait::comm
