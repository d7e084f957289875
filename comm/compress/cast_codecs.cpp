// none, bf16 and fp16: elementwise casts.
#include <algorithm>
#include <cstring>

#include "comm/compress/cast_codec.h"
#include "kernels/quantize.h"

namespace strait::comm {
namespace {

std::optional<std::size_t> encode_none(std::span<const float> in, std::span<std::byte> out) {
  if (!in.empty()) std::memcpy(out.data(), in.data(), in.size_bytes());
  return std::nullopt;
}

void decode_none(std::span<const std::byte> in, std::span<float> out, kernels::Accumulate acc) {
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

// One row per Cast, in its order: the name, the wire bytes per element and the kernels.
struct CastRow {
  std::string_view name;
  std::size_t bytes;
  std::optional<std::size_t> (*encode)(std::span<const float>, std::span<std::byte>);
  void (*decode)(std::span<const std::byte>, std::span<float>, kernels::Accumulate);
};
constexpr CastRow kCasts[] = {
    {"none", 4, encode_none, decode_none},
    {"bf16", 2, kernels::encode_bf16, kernels::decode_bf16},
    {"fp16", 2, kernels::encode_f16, kernels::decode_f16},
};

const CastRow& row(Cast cast) noexcept {
  return kCasts[static_cast<std::size_t>(cast)];
}

}  // namespace

std::string_view CastCodec::name() const noexcept {
  return row(cast_).name;
}

std::size_t CastCodec::encoded_bytes(std::size_t count) const {
  return row(cast_).bytes * count;
}

std::optional<std::size_t> CastCodec::do_encode(std::span<const float> in,
                                                std::span<std::byte> out) {
  return row(cast_).encode(in, out);
}

void CastCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                          kernels::Accumulate acc) const {
  row(cast_).decode(in, out, acc);
}

}  // namespace strait::comm
