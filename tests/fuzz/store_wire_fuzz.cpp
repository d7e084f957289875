// libFuzzer target for the TcpStore wire parsers (comm/bootstrap/tcp_store_wire.h): the bytes a
// store server reads from any client and a client reads from the server.
//
// Input: a byte stream cut into frames the way the server cuts it (u32 length, then the body).
// Every frame is parsed both as a request and as a reply. Properties checked, besides what ASan
// and UBSan catch: a parser either returns or throws ProtocolError (nothing else escapes), and a
// frame that parses re-encodes to exactly its own bytes (the parser accepts nothing that the
// encoder would not produce, so no two byte strings mean the same message).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "comm/bootstrap/tcp_store_wire.h"

namespace wire = strait::comm::wire;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "store_wire_fuzz: %s\n", what);
  std::abort();
}

template <class Parse>
void check_round_trip(std::span<const std::uint8_t> frame, Parse parse) {
  const auto body = frame.subspan(wire::kHeaderBytes);
  try {
    const auto message = parse(body);
    const std::vector<std::uint8_t> again = wire::encode(message);
    if (again.size() != frame.size() || !std::equal(again.begin(), again.end(), frame.begin())) {
      fail("a frame that parses does not re-encode to the same bytes");
    }
  } catch (const wire::ProtocolError&) {
    // Rejected: the server drops such a client, the client reports a malformed reply.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> in(data, size);
  while (in.size() >= wire::kHeaderBytes) {
    std::size_t len = 0;
    try {
      len = wire::body_length(in.first<wire::kHeaderBytes>());
    } catch (const wire::ProtocolError&) {
      return 0;
    }
    if (in.size() - wire::kHeaderBytes < len) return 0;  // the server waits for the rest
    const auto frame = in.first(wire::kHeaderBytes + len);
    check_round_trip(frame, [](auto body) { return wire::parse_request(body); });
    check_round_trip(frame, [](auto body) { return wire::parse_reply(body); });
    in = in.subspan(frame.size());
  }
  return 0;
}
