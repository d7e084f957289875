// Codecs of compressed collectives: a Codec turns a range of fp32 values into bytes for the wire
// and back. Collectives encode what they send, decode (or decode-and-add, for a ring that reduces
// in fp32) what they receive, and the owner of a chunk re-encodes its reduced chunk once so every
// rank decodes the same bytes and ends bit-identical. The kernels (kernels/quantize.h,
// kernels/topk.h) give bit-identical bytes on every SIMD path and CPU.
//
// Codecs (name: wire bytes per element; see each header for the paper and the error bound):
//   none    4                        identity (the only summable one)        cast_codec.h
//   bf16    2                        round to nearest even, clamped          cast_codec.h
//   fp16    2                        round to nearest even, clamped +-65504  cast_codec.h
//   int8    1 + 4/block              blockwise absmax, block=256             int8_codec.h
//   int4    1/2 + 4/block            blockwise absmax, block=64              int4_codec.h
//   topk    8 * fraction             k largest |x|, fraction=0.01, with EF   topk_codec.h
//   onebit  1/8 + 4/block            sign x mean |x| per block, with EF      onebit_codec.h
//   sparseloco ~density*(2+12)/8     chunked top-k, 2-bit codes, EF (OuterSync) sparseloco_codec.h
//   powersgd 4 (n + m) r per n x m    rank-r power iteration, EF, warm start  powersgd.h
//            matrix                   (not a Codec: whole matrices, two allreduces of factors;
//                                      comm/algorithms/powersgd_allreduce.h; make_codec refuses it)
// Error feedback (error_feedback.h) keeps what a lossy encoding dropped and adds it to the next
// gradient of the same tensor; the biased codecs (topk, onebit) need it to converge.
//
// Non-finite input: encode() throws InvalidArgument naming the codec, the first NaN/Inf element's
// index and value (never finite garbage on the wire); `none` passes values through unchecked, as an
// uncompressed collective would.
// Thread-safety: decode() and decode_add() are const and may run concurrently; encode() is not
// (stochastic rounding advances a per-codec stream), so give each thread its own codec.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quantize.h"

namespace strait::comm {

class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  // "int8", "topk", ...
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  // The name and every argument, canonical ("int8:block=256,stochastic=0,seed=0"): two codecs with
  // equal specs write equal bytes, so ranks can compare specs; make_codec_from_spec() reads it.
  [[nodiscard]] virtual std::string spec() const = 0;
  // Exact size of encode()'s output for `count` elements.
  [[nodiscard]] virtual std::size_t encoded_bytes(std::size_t count) const = 0;
  // Whether encoded buffers can be summed as they are, without decoding (only `none`: the others'
  // scales, nibbles, indices and signs do not add).
  [[nodiscard]] virtual bool summable() const noexcept { return false; }
  // Elements per independent unit: a range cut at multiples of it encodes to the same values and
  // the same total bytes as the whole range (the block of a blockwise codec, 1 for the casts), so
  // a pipelined collective may send it in segments. 0: the encoding depends on the whole range
  // (topk's global selection) and must not be cut.
  [[nodiscard]] virtual std::size_t granularity() const noexcept { return 1; }
  // Whether the codec is biased and should run with error feedback (topk, onebit).
  [[nodiscard]] virtual bool needs_error_feedback() const noexcept { return false; }

  // out.size() must be encoded_bytes(in.size()). Throws InvalidArgument for a size mismatch or a
  // NaN/Inf in `in` (out is then unspecified).
  void encode(std::span<const float> in, std::span<std::byte> out);
  // in.size() must be encoded_bytes(out.size()); out is overwritten.
  void decode(std::span<const std::byte> in, std::span<float> out) const;
  // As decode(), but adds the decoded values into inout (fp32, one rounding per element).
  void decode_add(std::span<const std::byte> in, std::span<float> inout) const;

 protected:
  Codec() = default;

 private:
  // Returns the index of the first non-finite input element, if any.
  virtual std::optional<std::size_t> do_encode(std::span<const float> in,
                                               std::span<std::byte> out) = 0;
  virtual void do_decode(std::span<const std::byte> in, std::span<float> out,
                         kernels::Accumulate acc) const = 0;
  void check_bytes(std::string_view what, std::size_t bytes, std::size_t count) const;
};

}  // namespace strait::comm
