#include "comm/compress/topk_codec.h"

#include <fmt/format.h>

#include "kernels/topk.h"

namespace strait::comm {

TopkCodec::TopkCodec(double fraction) : fraction_(fraction) {
  (void)kernels::topk_count(fraction_, 0);  // throws InvalidArgument outside (0, 1]
}

std::string TopkCodec::spec() const {
  return fmt::format("topk:fraction={}", fraction_);
}

std::size_t TopkCodec::encoded_bytes(std::size_t count) const {
  return kernels::kTopkPairBytes * kernels::topk_count(fraction_, count);
}

std::optional<std::size_t> TopkCodec::do_encode(std::span<const float> in,
                                                std::span<std::byte> out) {
  return kernels::topk_encode(in, kernels::topk_count(fraction_, in.size()), out);
}

void TopkCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                          kernels::Accumulate acc) const {
  kernels::topk_decode(in, out, acc);
}

}  // namespace strait::comm
