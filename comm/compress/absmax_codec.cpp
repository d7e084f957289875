#include "comm/compress/absmax_codec.h"

#include <fmt/format.h>

namespace strait::comm {

AbsmaxCodec::AbsmaxCodec(int bits, const AbsmaxOptions& options)
    : format_{bits, options.block}, options_(options) {
  (void)kernels::absmax_encoded_bytes(format_, 0);  // throws InvalidArgument for a bad block
}

std::string AbsmaxCodec::spec() const {
  return fmt::format("{}:block={},stochastic={},seed={}", name(), options_.block,
                     options_.stochastic ? 1 : 0, options_.seed);
}

std::size_t AbsmaxCodec::encoded_bytes(std::size_t count) const {
  return kernels::absmax_encoded_bytes(format_, count);
}

std::optional<std::size_t> AbsmaxCodec::do_encode(std::span<const float> in,
                                                  std::span<std::byte> out) {
  if (!options_.stochastic) return kernels::absmax_encode(format_, in, out);
  // Call n uses splitmix64's n-th state from the seed, so successive encodes of the same values
  // draw fresh noise (a repeated draw would bias the sum over steps).
  const std::uint64_t stream = options_.seed + calls_++ * 0x9e3779b97f4a7c15ULL;
  return kernels::absmax_encode(format_, in, out, kernels::Rounding::Stochastic, stream);
}

void AbsmaxCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                            kernels::Accumulate acc) const {
  kernels::absmax_decode(format_, in, out, acc);
}

}  // namespace strait::comm
