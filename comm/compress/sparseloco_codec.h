// `sparseloco`: SparseLoCo's message (Sarfi, Thérien, Lidin, Belilovsky, "Communication Efficient
// LLM Pre-training with SparseLoCo", arXiv 2508.15706): the vector is cut into chunks of `chunk`
// elements (the last one shorter); each chunk keeps its k = ceil(density * length) elements of
// largest magnitude (ties: the lower index) and sends them as a 2-bit (`bits`) code with one fp32
// scale per chunk, the indices packed in ceil(log2(chunk)) bits each.
// Layout of one chunk of length L (k = min(L, ceil(density * L))), chunks in order:
//   f32 scale s (the mean |x| of the kept elements), then k entries of (index: ib bits, code:
//   bits bits), least significant bit first, indices ascending, padded to a whole byte:
//   bytes(L) = 4 + ceil(k * (ib + bits) / 8),  ib = max(1, bit_width(chunk - 1)).
// With the defaults (density 0.02, chunk 4096, bits 2): k = 82 of 4096, 4 + 144 = 148 bytes per
// chunk, 0.036 bytes per element (110x smaller than fp32).
// Code: a sign bit (the top one) and a magnitude level j < M = 2^(bits - 1),
//   j = min(M - 1, floor(|x| / s * M / 2)),  decoded |x| = s * (2j + 1) / M
// (bits 2: s / 2 below the mean magnitude, 3s / 2 above), so kept values decode to within
// max(|x| - s(2M - 1)/M, s/M) of themselves; every other element decodes to 0. Biased: use it with
// error feedback (OuterSync keeps SparseLoCo's decayed accumulator; error_feedback.h otherwise).
// Arguments: density (0.02, in (0, 1]), chunk (4096, 2 .. 2^24), bits (2, 2 .. 8).
#pragma once

#include "comm/compress/codec.h"

namespace strait::comm {

struct SparseLocoOptions {
  double density = 0.02;
  std::size_t chunk = 4096;
  int bits = 2;
};

class SparseLocoCodec final : public Codec {
 public:
  // Throws InvalidArgument for an option outside its range.
  explicit SparseLocoCodec(SparseLocoOptions options = {});
  [[nodiscard]] std::string_view name() const noexcept override { return "sparseloco"; }
  // Chunks encode independently, each to a whole number of bytes.
  [[nodiscard]] std::size_t granularity() const noexcept override { return options_.chunk; }
  [[nodiscard]] std::string spec() const override;
  [[nodiscard]] std::size_t encoded_bytes(std::size_t count) const override;
  [[nodiscard]] bool needs_error_feedback() const noexcept override { return true; }
  [[nodiscard]] const SparseLocoOptions& options() const noexcept { return options_; }
  // Elements kept of a chunk of `length`, and the bits of one packed index.
  [[nodiscard]] std::size_t kept(std::size_t length) const noexcept;
  [[nodiscard]] int index_bits() const noexcept;

 private:
  std::optional<std::size_t> do_encode(std::span<const float> in,
                                       std::span<std::byte> out) override;
  void do_decode(std::span<const std::byte> in, std::span<float> out,
                 kernels::Accumulate acc) const override;
  [[nodiscard]] std::size_t chunk_bytes(std::size_t length) const noexcept;

  SparseLocoOptions options_;
  std::vector<std::uint32_t> order_;  // encode's scratch
};

}  // namespace strait::comm
