#include "comm/bootstrap/tcp_store_wire.h"

#include <fmt/format.h>

namespace strait::comm::wire {
namespace {

std::uint64_t load_be(std::span<const std::uint8_t> b) {
  std::uint64_t v = 0;
  for (const std::uint8_t byte : b) v = (v << 8U) | byte;
  return v;
}

}  // namespace

Writer::Writer(Type type, std::uint64_t id) {
  buf_.reserve(64);
  u32(0);  // length, patched by finish()
  u8(static_cast<std::uint8_t>(type));
  u64(id);
}

Writer& Writer::u8(std::uint8_t v) {
  buf_.push_back(v);
  return *this;
}

Writer& Writer::u16(std::uint16_t v) {
  for (int shift = 8; shift >= 0; shift -= 8) buf_.push_back(static_cast<std::uint8_t>(v >> shift));
  return *this;
}

Writer& Writer::u32(std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    buf_.push_back(static_cast<std::uint8_t>(v >> shift));
  }
  return *this;
}

Writer& Writer::u64(std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    buf_.push_back(static_cast<std::uint8_t>(v >> shift));
  }
  return *this;
}

Writer& Writer::i64(std::int64_t v) {
  return u64(static_cast<std::uint64_t>(v));
}

Writer& Writer::bytes(std::span<const std::uint8_t> v) {
  u32(static_cast<std::uint32_t>(v.size()));
  buf_.insert(buf_.end(), v.begin(), v.end());
  return *this;
}

Writer& Writer::str(std::string_view v) {
  u32(static_cast<std::uint32_t>(v.size()));
  buf_.insert(buf_.end(), v.begin(), v.end());
  return *this;
}

std::vector<std::uint8_t> Writer::finish() {
  const std::size_t body = buf_.size() - kHeaderBytes;
  for (std::size_t i = 0; i < kHeaderBytes; ++i) {
    buf_[i] = static_cast<std::uint8_t>(body >> (8 * (kHeaderBytes - 1 - i)));
  }
  return std::move(buf_);
}

std::size_t body_length(std::span<const std::uint8_t, kHeaderBytes> header) {
  const std::size_t len = load_be(header);
  if (len < kMinBodyBytes || len > kMaxBodyBytes) {
    throw ProtocolError(
        fmt::format("frame length {} outside [{}, {}]", len, kMinBodyBytes, kMaxBodyBytes));
  }
  return len;
}

Reader::Reader(std::span<const std::uint8_t> body) : rest_(body), type_(), id_() {
  if (body.size() < kMinBodyBytes) {
    throw ProtocolError(fmt::format("frame of {} bytes is shorter than a header", body.size()));
  }
  type_ = static_cast<Type>(u8());
  id_ = u64();
}

std::span<const std::uint8_t> Reader::take(std::size_t n) {
  if (n > rest_.size()) {
    throw ProtocolError(
        fmt::format("truncated frame: a field needs {} bytes, {} left", n, rest_.size()));
  }
  const auto out = rest_.first(n);
  rest_ = rest_.subspan(n);
  return out;
}

std::uint8_t Reader::u8() {
  return take(1)[0];
}
std::uint16_t Reader::u16() {
  return static_cast<std::uint16_t>(load_be(take(2)));
}
std::uint32_t Reader::u32() {
  return static_cast<std::uint32_t>(load_be(take(4)));
}
std::uint64_t Reader::u64() {
  return load_be(take(8));
}
std::int64_t Reader::i64() {
  return static_cast<std::int64_t>(u64());
}

std::span<const std::uint8_t> Reader::bytes(std::size_t max_len) {
  const std::size_t len = u32();
  if (len > max_len) {
    throw ProtocolError(
        fmt::format("byte string of {} bytes exceeds the limit of {}", len, max_len));
  }
  return take(len);
}

std::string Reader::key() {
  const auto k = bytes(kMaxKeyBytes);
  if (k.empty()) throw ProtocolError("empty key");
  return {k.begin(), k.end()};
}

void Reader::expect_end() const {
  if (!rest_.empty()) {
    throw ProtocolError(fmt::format("{} unexpected bytes at the end of a frame", rest_.size()));
  }
}

}  // namespace strait::comm::wire
