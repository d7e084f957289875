// `none`: fp32 passed through unchanged (4 bytes per element). The one summable codec: its wire is
// plain fp32, so a collective may reduce encoded buffers directly. Values are not checked for
// NaN/Inf, as an uncompressed collective does not check them.
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

class NoneCodec final : public Codec {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "none"; }
  [[nodiscard]] std::string spec() const override { return "none"; }
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override { return 4 * count; }
  [[nodiscard]] bool summable() const noexcept override { return true; }

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;
};

}  // namespace strait::comm
