#include "comm/bootstrap/tcp_store_wire.h"

#include <fmt/format.h>

#include <algorithm>

namespace strait::comm::wire {
namespace {

std::uint64_t load_be(std::span<const std::uint8_t> b) {
  std::uint64_t v = 0;
  for (const std::uint8_t byte : b) v = (v << 8U) | byte;
  return v;
}

void copy_fixed(Reader& r, std::array<std::uint8_t, kAuthBytes>& out) {
  const auto b = r.fixed(out.size());
  std::copy(b.begin(), b.end(), out.begin());
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

Writer& Writer::raw(std::span<const std::uint8_t> v) {
  buf_.insert(buf_.end(), v.begin(), v.end());
  return *this;
}

Writer& Writer::str(std::string_view v) {
  u32(static_cast<std::uint32_t>(v.size()));
  buf_.insert(buf_.end(), v.begin(), v.end());
  return *this;
}

Writer& Writer::keys(const std::vector<std::string>& v) {
  u32(static_cast<std::uint32_t>(v.size()));
  for (const std::string& k : v) str(k);
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

std::vector<std::string> Reader::keys(std::uint32_t min_count) {
  const std::uint32_t n = u32();
  if (n < min_count || n > kMaxWaitKeys) {
    throw ProtocolError(
        fmt::format("a list of {} keys, outside [{}, {}]", n, min_count, kMaxWaitKeys));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(key());
  return out;
}

void Reader::expect_end() const {
  if (!rest_.empty()) {
    throw ProtocolError(fmt::format("{} unexpected bytes at the end of a frame", rest_.size()));
  }
}

Request parse_request(std::span<const std::uint8_t> body) {
  Reader r(body);
  Request q;
  q.type = r.type();
  q.id = r.id();
  switch (q.type) {
    case Type::Hello:
      q.magic = r.u32();
      q.version = r.u16();
      copy_fixed(r, q.nonce);
      break;
    case Type::Auth: copy_fixed(r, q.proof); break;
    case Type::Set:
      q.key = r.key();
      q.value = r.bytes(kMaxValueBytes);
      break;
    case Type::Get: q.key = r.key(); break;
    case Type::Add:
      q.key = r.key();
      q.delta = r.i64();
      break;
    case Type::Wait: q.keys = r.keys(1); break;
    case Type::Cancel: break;
    default:
      throw ProtocolError(
          fmt::format("unknown command 0x{:02x}: is every rank running the same strait build?",
                      static_cast<unsigned>(q.type)));
  }
  r.expect_end();
  return q;
}

Reply parse_reply(std::span<const std::uint8_t> body) {
  Reader r(body);
  Reply reply;
  reply.type = r.type();
  reply.id = r.id();
  switch (reply.type) {
    case Type::HelloOk: {
      const std::uint8_t auth = r.u8();
      if (auth > 1) throw ProtocolError(fmt::format("HelloOk with auth flag {}", auth));
      reply.auth = auth == 1;
      if (reply.auth) {
        copy_fixed(r, reply.nonce);
        copy_fixed(r, reply.proof);
      }
      break;
    }
    case Type::AuthOk:
    case Type::Ok: break;
    case Type::Value: {
      const auto v = r.bytes(kMaxValueBytes);
      reply.value.assign(v.begin(), v.end());
      break;
    }
    case Type::Int: reply.number = r.i64(); break;
    case Type::Cancelled: reply.keys = r.keys(0); break;
    case Type::Error: {
      const std::uint8_t code = r.u8();
      if (code > static_cast<std::uint8_t>(ErrorCode::Internal)) {
        throw ProtocolError(fmt::format("unknown error code {}", code));
      }
      reply.code = static_cast<ErrorCode>(code);
      const auto m = r.bytes(kMaxMessageBytes);
      reply.message.assign(m.begin(), m.end());
      break;
    }
    case Type::Fatal: {
      const auto m = r.bytes(kMaxMessageBytes);
      reply.message.assign(m.begin(), m.end());
      break;
    }
    default:
      throw ProtocolError(
          fmt::format("unknown reply type 0x{:02x}", static_cast<unsigned>(reply.type)));
  }
  r.expect_end();
  return reply;
}

std::vector<std::uint8_t> encode(const Request& q) {
  Writer w(q.type, q.id);
  switch (q.type) {
    case Type::Hello: w.u32(q.magic).u16(q.version).raw(q.nonce); break;
    case Type::Auth: w.raw(q.proof); break;
    case Type::Set: w.str(q.key).bytes(q.value); break;
    case Type::Get: w.str(q.key); break;
    case Type::Add: w.str(q.key).i64(q.delta); break;
    case Type::Wait: w.keys(q.keys); break;
    default: break;  // Cancel: the id is all
  }
  return w.finish();
}

std::vector<std::uint8_t> encode(const Reply& reply) {
  Writer w(reply.type, reply.id);
  switch (reply.type) {
    case Type::HelloOk:
      w.u8(reply.auth ? 1 : 0);
      if (reply.auth) w.raw(reply.nonce).raw(reply.proof);
      break;
    case Type::Value: w.bytes(reply.value); break;
    case Type::Int: w.i64(reply.number); break;
    case Type::Cancelled: w.keys(reply.keys); break;
    case Type::Error:
      w.u8(static_cast<std::uint8_t>(reply.code))
          .str(std::string_view(reply.message).substr(0, kMaxMessageBytes));
      break;
    case Type::Fatal: w.str(std::string_view(reply.message).substr(0, kMaxMessageBytes)); break;
    default: break;  // Ok, AuthOk
  }
  return w.finish();
}

}  // namespace strait::comm::wire
