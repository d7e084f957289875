// The TcpStore wire protocol (version 2), shared by the client (tcp_store.cpp) and the server
// (tcp_store_server.cpp). Internal to comm/bootstrap; public so that tests can speak it.
//
// A message is a frame: a u32 body length (big-endian, kMinBodyBytes..kMaxBodyBytes), then the
// body: u8 type | u64 request id | fields. Fields are big-endian integers and byte strings (u32
// length, then the bytes). The client opens with Hello; every later request is answered by exactly
// one reply carrying its id, in any order (a parked get is answered when its key appears).
//
//   client -> server                        server -> client
//   Hello   u32 magic, u16 version,         HelloOk u8 auth (0 or 1); when 1: 32-byte server
//           32-byte client nonce                    nonce, 32-byte server proof
//   Auth    32-byte client proof            AuthOk  (only when the server asked for it)
//   Set     key, value                      Ok
//   Get     key                             Value   value
//   Add     key, i64 delta                  Int     i64  | Error u8 ErrorCode, message
//   Wait    u32 n, n keys                   Ok
//   Cancel  (id: the parked request's)      Cancelled u32 n, n missing keys, for that id; nothing
//                                           when the request was already answered
//                                           Fatal   message; the server then closes the socket
//
// With a shared secret the server answers Hello with auth=1 and serves nothing before a valid Auth
// (comm/bootstrap/store_auth.h has the proofs); without one, auth=0 and requests may follow Hello
// at once. Until a client is authenticated its frames may be at most kMaxPreAuthBodyBytes.
// Lengths from the network are never trusted: frame, key, value and key-count bounds are checked
// before anything is allocated, and a malformed frame or an unknown type ends the connection.
// parse_request / parse_reply are the only parsers of network bytes; encode() is their exact
// inverse (a frame that parses re-encodes to the same bytes), which the fuzz target
// (tests/fuzz/store_wire_fuzz.cpp) checks on arbitrary input.
// Thread-safety: every type here is a plain value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace strait::comm::wire {

inline constexpr std::uint32_t kMagic = 0x53545254U;  // "STRT"
inline constexpr std::uint16_t kVersion = 2;
inline constexpr std::size_t kMaxKeyBytes = 4096;
inline constexpr std::size_t kMaxValueBytes = std::size_t{64} << 20U;
inline constexpr std::size_t kMaxWaitKeys = 4096;
inline constexpr std::size_t kMaxMessageBytes = std::size_t{64} << 10U;  // Error and Fatal texts
inline constexpr std::size_t kHeaderBytes = 4;
inline constexpr std::size_t kMinBodyBytes = 9;  // type + request id
inline constexpr std::size_t kMaxBodyBytes = kMaxValueBytes + kMaxKeyBytes + 64;
inline constexpr std::size_t kAuthBytes = 32;  // nonces and proofs
// The largest frame a server reads from a client that has not authenticated (Hello, Auth).
inline constexpr std::size_t kMaxPreAuthBodyBytes = 128;
static_assert(kMaxWaitKeys * (kMaxKeyBytes + 4) + 64 <= kMaxBodyBytes);

enum class Type : std::uint8_t {
  Hello = 0x01,
  Set = 0x02,
  Get = 0x03,
  Add = 0x04,
  Wait = 0x05,
  Cancel = 0x06,
  Auth = 0x07,
  HelloOk = 0x81,
  Ok = 0x82,
  Value = 0x83,
  Int = 0x84,
  Cancelled = 0x85,
  Error = 0x86,
  Fatal = 0x87,
  AuthOk = 0x88,
};

// A frame that breaks the protocol (bad length, truncated field, trailing bytes, unknown type).
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds one frame.
class Writer {
 public:
  Writer(Type type, std::uint64_t id);
  Writer& u8(std::uint8_t v);
  Writer& u16(std::uint16_t v);
  Writer& u32(std::uint32_t v);
  Writer& u64(std::uint64_t v);
  Writer& i64(std::int64_t v);
  Writer& bytes(std::span<const std::uint8_t> v);
  // The bytes without a length (fixed-size fields).
  Writer& raw(std::span<const std::uint8_t> v);
  Writer& str(std::string_view v);
  // u32 count, then each key.
  Writer& keys(const std::vector<std::string>& v);
  // The frame, header included; the Writer is spent afterwards.
  [[nodiscard]] std::vector<std::uint8_t> finish();

 private:
  std::vector<std::uint8_t> buf_;
};

// Body length from a frame header; ProtocolError when outside [kMinBodyBytes, kMaxBodyBytes].
std::size_t body_length(std::span<const std::uint8_t, kHeaderBytes> header);

// Parses one frame body (header excluded). Every accessor throws ProtocolError when the body has
// fewer bytes left than it needs; nothing is read past the body.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> body);
  [[nodiscard]] Type type() const noexcept { return type_; }
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

  std::uint8_t u8();
  std::uint16_t u16();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int64_t i64();
  // A byte string of at most max_len bytes (a view into the body).
  std::span<const std::uint8_t> bytes(std::size_t max_len);
  // Exactly n bytes (a view into the body).
  std::span<const std::uint8_t> fixed(std::size_t n) { return take(n); }
  // A non-empty key of at most kMaxKeyBytes.
  std::string key();
  // A u32 count in [min_count, kMaxWaitKeys], then that many keys.
  std::vector<std::string> keys(std::uint32_t min_count);
  // ProtocolError when bytes are left over.
  void expect_end() const;

 private:
  std::span<const std::uint8_t> take(std::size_t n);

  std::span<const std::uint8_t> rest_;
  Type type_;
  std::uint64_t id_;
};

// A client's request, as the server sees it. Which fields are meaningful depends on `type`.
struct Request {
  Type type = Type::Hello;
  std::uint64_t id = 0;
  std::uint32_t magic = 0;                       // Hello
  std::uint16_t version = 0;                     // Hello
  std::array<std::uint8_t, kAuthBytes> nonce{};  // Hello: the client's nonce
  std::array<std::uint8_t, kAuthBytes> proof{};  // Auth: the client's proof
  std::string key{};                             // Set, Get, Add: non-empty, <= kMaxKeyBytes
  std::span<const std::uint8_t> value{};  // Set: <= kMaxValueBytes (a view into the parsed body)
  std::int64_t delta = 0;                 // Add
  std::vector<std::string> keys{};        // Wait: 1..kMaxWaitKeys keys, as sent
};

// The server's answer to one request (or Fatal, id 0, before it closes the connection).
struct Reply {
  Type type = Type::Ok;
  std::uint64_t id = 0;
  bool auth = false;                             // HelloOk: the server asks for Auth
  std::array<std::uint8_t, kAuthBytes> nonce{};  // HelloOk with auth: the server's nonce
  std::array<std::uint8_t, kAuthBytes> proof{};  // HelloOk with auth: the server's proof
  std::vector<std::uint8_t> value{};             // Value
  std::int64_t number = 0;                       // Int
  std::vector<std::string> keys{};               // Cancelled: the keys still missing
  ErrorCode code = ErrorCode::Internal;          // Error
  std::string message{};                         // Error, Fatal: <= kMaxMessageBytes
};

// Parse one frame body (header excluded). ProtocolError on anything but a well-formed request
// (or reply) of a known type with nothing left over.
Request parse_request(std::span<const std::uint8_t> body);
Reply parse_reply(std::span<const std::uint8_t> body);

// The frame (header included) of a request or reply.
std::vector<std::uint8_t> encode(const Request& request);
std::vector<std::uint8_t> encode(const Reply& reply);

}  // namespace strait::comm::wire
