#include "comm/compress/onebit_codec.h"

#include <fmt/format.h>

namespace strait::comm {

OneBitCodec::OneBitCodec(std::size_t block) : block_(block) {
  (void)kernels::sign_encoded_bytes(block_, 0);  // throws InvalidArgument for a bad block
}

std::string OneBitCodec::spec() const {
  return fmt::format("onebit:block={}", block_);
}

std::size_t OneBitCodec::encoded_bytes(std::size_t count) const {
  return kernels::sign_encoded_bytes(block_, count);
}

std::optional<std::size_t> OneBitCodec::do_encode(std::span<const float> in,
                                                  std::span<std::byte> out) {
  return kernels::sign_encode(block_, in, out);
}

void OneBitCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                            kernels::Accumulate acc) const {
  kernels::sign_decode(block_, in, out, acc);
}

}  // namespace strait::comm
