// none, bf16 and fp16: elementwise casts.
#include <algorithm>
#include <cstring>

#include "comm/compress/bf16_codec.h"
#include "comm/compress/fp16_codec.h"
#include "comm/compress/none_codec.h"

namespace strait::comm {

std::optional<std::size_t> NoneCodec::do_encode(std::span<const float> in,
                                                std::span<std::byte> out) {
  if (!in.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
  return std::nullopt;
}

void NoneCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                          kernels::Accumulate acc) const {
  if (acc == kernels::Accumulate::No) {
    if (!out.empty()) std::memcpy(out.data(), in.data(), out.size_bytes());
    return;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    float v = 0.0F;
    std::memcpy(&v, in.data() + 4 * i, 4);
    out[i] += v;
  }
}

std::optional<std::size_t> Bf16Codec::do_encode(std::span<const float> in,
                                                std::span<std::byte> out) {
  return kernels::encode_bf16(in, out);
}

void Bf16Codec::do_decode(std::span<const std::byte> in, std::span<float> out,
                          kernels::Accumulate acc) const {
  kernels::decode_bf16(in, out, acc);
}

std::optional<std::size_t> Fp16Codec::do_encode(std::span<const float> in,
                                                std::span<std::byte> out) {
  return kernels::encode_f16(in, out);
}

void Fp16Codec::do_decode(std::span<const std::byte> in, std::span<float> out,
                          kernels::Accumulate acc) const {
  kernels::decode_f16(in, out, acc);
}

}  // namespace strait::comm
