#include "comm/compress/codec.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strait::comm {

void Codec::check_bytes(std::string_view what, std::size_t bytes, std::size_t count) const {
  const std::size_t want = encoded_bytes(count);
  if (bytes == want) return;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{} codec: {}: {} elements take {} encoded bytes, the buffer has {}",
                          name(), what, count, want, bytes));
}

void Codec::encode(std::span<const float> in, std::span<std::byte> out) {
  check_bytes("encode", out.size(), in.size());
  const auto bad = do_encode(in, out);
  if (!bad) return;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{} codec: element {} is {}: a non-finite gradient cannot be "
                          "compressed; check the loss scale / learning rate",
                          name(), *bad, in[*bad]));
}

void Codec::decode(std::span<const std::byte> in, std::span<float> out) const {
  check_bytes("decode", in.size(), out.size());
  do_decode(in, out, kernels::Accumulate::No);
}

void Codec::decode_add(std::span<const std::byte> in, std::span<float> inout) const {
  check_bytes("decode_add", in.size(), inout.size());
  do_decode(in, inout, kernels::Accumulate::Yes);
}

}  // namespace strait::comm
