// The blockwise absmax quantizers behind int8_codec.h and int4_codec.h (kernels/quantize.h does the
// work): per block of `block` elements one fp32 scale = absmax / L, and each element as the integer
// round(x / scale) in -L..L (L = 127 or 7).
#pragma once

#include <cstdint>

#include "comm/compress/codec.h"

namespace strait::comm {

struct AbsmaxOptions {
  std::size_t block = 256;  // elements per scale (int4: even)
  bool stochastic = false;  // stochastic rounding instead of nearest
  std::uint64_t seed = 0;   // stochastic rounding's stream
};

class AbsmaxCodec : public Codec {
 public:
  [[nodiscard]] std::string spec() const override;
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override;
  [[nodiscard]] std::size_t granularity() const noexcept override { return options_.block; }
  [[nodiscard]] const AbsmaxOptions& options() const noexcept { return options_; }

 protected:
  AbsmaxCodec(int bits, const AbsmaxOptions& options);

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;

  kernels::AbsmaxFormat format_;
  AbsmaxOptions options_;
  std::uint64_t calls_ = 0;  // the n-th encode draws from stream (seed, n)
};

}  // namespace strait::comm
