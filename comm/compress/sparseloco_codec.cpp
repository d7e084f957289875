#include "comm/compress/sparseloco_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace strait::comm {

namespace {

// Least-significant-bit-first bit stream over a byte span (the span starts zeroed for writes).
class BitWriter {
 public:
  explicit BitWriter(std::span<std::byte> out) : out_(out) {}
  void put(std::uint32_t value, int bits) {
    for (int b = 0; b < bits; ++b, ++pos_) {
      if (((value >> b) & 1U) != 0) out_[pos_ / 8] |= std::byte{1} << (pos_ % 8);
    }
  }

 private:
  std::span<std::byte> out_;
  std::size_t pos_ = 0;
};

class BitReader {
 public:
  explicit BitReader(std::span<const std::byte> in) : in_(in) {}
  std::uint32_t get(int bits) {
    std::uint32_t v = 0;
    for (int b = 0; b < bits; ++b, ++pos_) {
      if ((in_[pos_ / 8] & (std::byte{1} << (pos_ % 8))) != std::byte{0}) v |= 1U << b;
    }
    return v;
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace

SparseLocoCodec::SparseLocoCodec(SparseLocoOptions options) : options_(options) {
  const auto fail = [](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, "sparseloco codec: " + why);
  };
  if (!(options_.density > 0.0 && options_.density <= 1.0)) {
    fail(
        fmt::format("density {} must be in (0, 1] (the paper uses 0.01 - 0.03)", options_.density));
  }
  if (options_.chunk < 2 || options_.chunk > (std::size_t{1} << 24)) {
    fail(fmt::format("chunk {} must be in [2, 16777216] (the paper uses 4096)", options_.chunk));
  }
  if (options_.bits < 2 || options_.bits > 8) {
    fail(fmt::format("bits {} must be in [2, 8] (a sign bit and at least one magnitude bit)",
                     options_.bits));
  }
}

std::string SparseLocoCodec::spec() const {
  return fmt::format("sparseloco:density={},chunk={},bits={}", options_.density, options_.chunk,
                     options_.bits);
}

std::size_t SparseLocoCodec::kept(std::size_t length) const noexcept {
  const auto k =
      static_cast<std::size_t>(std::ceil(options_.density * static_cast<double>(length)));
  return std::min(length, k);
}

int SparseLocoCodec::index_bits() const noexcept {
  return std::max(1, static_cast<int>(std::bit_width(options_.chunk - 1)));
}

std::size_t SparseLocoCodec::chunk_bytes(std::size_t length) const noexcept {
  const std::size_t entry = static_cast<std::size_t>(index_bits() + options_.bits);
  return sizeof(float) + (kept(length) * entry + 7) / 8;
}

std::size_t SparseLocoCodec::encoded_bytes(std::size_t count) const {
  const std::size_t full = count / options_.chunk;
  const std::size_t tail = count % options_.chunk;
  return full * chunk_bytes(options_.chunk) + (tail > 0 ? chunk_bytes(tail) : 0);
}

std::optional<std::size_t> SparseLocoCodec::do_encode(std::span<const float> in,
                                                      std::span<std::byte> out) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!std::isfinite(in[i])) return i;
  }
  std::fill(out.begin(), out.end(), std::byte{0});
  const int levels = 1 << (options_.bits - 1);
  const int ib = index_bits();
  std::size_t at = 0;
  for (std::size_t first = 0; first < in.size(); first += options_.chunk) {
    const std::size_t len = std::min(options_.chunk, in.size() - first);
    const std::span<const float> x = in.subspan(first, len);
    const std::size_t k = kept(len);
    order_.resize(len);
    for (std::size_t i = 0; i < len; ++i) order_[i] = static_cast<std::uint32_t>(i);
    // A strict total order (magnitude down, then index up): the same selection on every CPU.
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
      const float fa = std::fabs(x[a]);
      const float fb = std::fabs(x[b]);
      return fa > fb || (fa == fb && a < b);
    };
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     order_.end(), before);
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
    double sum = 0;
    for (std::size_t j = 0; j < k; ++j) sum += std::fabs(x[order_[j]]);
    const auto scale = static_cast<float>(sum / static_cast<double>(k));
    const std::size_t bytes = chunk_bytes(len);
    std::memcpy(out.data() + at, &scale, sizeof(float));
    BitWriter w(out.subspan(at + sizeof(float), bytes - sizeof(float)));
    for (std::size_t j = 0; j < k; ++j) {
      const float v = x[order_[j]];
      int level = 0;
      if (scale > 0) {
        const float q = std::floor(std::fabs(v) / scale * static_cast<float>(levels) / 2.0f);
        level = static_cast<int>(std::min(q, static_cast<float>(levels - 1)));
      }
      const std::uint32_t code = static_cast<std::uint32_t>(level) |
                                 (std::signbit(v) ? static_cast<std::uint32_t>(levels) : 0U);
      w.put(order_[j], ib);
      w.put(code, options_.bits);
    }
    at += bytes;
  }
  return std::nullopt;
}

void SparseLocoCodec::do_decode(std::span<const std::byte> in, std::span<float> out,
                                kernels::Accumulate acc) const {
  if (acc == kernels::Accumulate::No) std::fill(out.begin(), out.end(), 0.0f);
  const int levels = 1 << (options_.bits - 1);
  const int ib = index_bits();
  std::size_t at = 0;
  for (std::size_t first = 0; first < out.size(); first += options_.chunk) {
    const std::size_t len = std::min(options_.chunk, out.size() - first);
    const std::size_t bytes = chunk_bytes(len);
    float scale = 0;
    std::memcpy(&scale, in.data() + at, sizeof(float));
    BitReader r(in.subspan(at + sizeof(float), bytes - sizeof(float)));
    for (std::size_t j = 0, k = kept(len); j < k; ++j) {
      const std::uint32_t index = r.get(ib);
      const std::uint32_t code = r.get(options_.bits);
      if (index >= len) {
        throw Error(ErrorCode::Mismatch,
                    fmt::format("sparseloco codec: index {} past a chunk of {} elements: the "
                                "message is corrupt or was written with other arguments",
                                index, len));
      }
      const auto level = static_cast<float>(code & static_cast<std::uint32_t>(levels - 1));
      const float mag = scale * (2.0f * level + 1.0f) / static_cast<float>(levels);
      out[first + index] += (code & static_cast<std::uint32_t>(levels)) != 0 ? -mag : mag;
    }
    at += bytes;
  }
}

}  // namespace strait::comm
