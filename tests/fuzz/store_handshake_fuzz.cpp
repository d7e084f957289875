// libFuzzer target for the store's authenticated handshake (comm/bootstrap/store_auth.h) as a real
// TcpStoreServer with a shared secret runs it, over loopback.
//
// Input: byte 0 chooses whether a valid Hello goes first (bit 0) and whether the client then
// waits for the challenge (bit 1); the rest is sent as is, then the client half-closes and reads
// until the server closes. Properties checked, besides what ASan and UBSan catch in the server:
//  - the server never answers a request (Value, Ok, Int, Cancelled) or sends AuthOk, since the
//    fuzzer cannot produce an HMAC under the secret;
//  - every connection ends (the server closes it) rather than hang;
//  - a valid Hello on a fresh connection is still answered with a challenge afterwards.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/store_auth.h"
#include "comm/bootstrap/tcp_store_server.h"
#include "comm/bootstrap/tcp_store_wire.h"

namespace comm = strait::comm;
namespace wire = strait::comm::wire;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "store_handshake_fuzz: %s\n", what);
  std::abort();
}

comm::TcpStoreServer& server() {
  static const std::unique_ptr<comm::TcpStoreServer> s = [] {
    spdlog::set_level(spdlog::level::off);  // every input is a rejected client
    const std::string secret = "store-handshake-fuzz-secret";
    comm::TcpStoreServerOptions o;
    o.secret = comm::SharedSecret::from_bytes(
        {reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size()}, "fuzz");
    o.handshake_timeout = std::chrono::seconds(2);
    return std::make_unique<comm::TcpStoreServer>("127.0.0.1", 0, std::move(o));
  }();
  return *s;
}

strait::Fd connect_to_server() {
  std::string why;
  strait::Fd fd = comm::net::try_connect("127.0.0.1", server().port(),
                                         Clock::now() + std::chrono::seconds(5), why);
  if (!fd) fail("cannot connect to the store server");
  return fd;
}

// Receives what arrives before `deadline`: the byte count, 0 once the server has closed (or reset)
// the connection, -1 at the deadline. libFuzzer's -timeout alarm (SIGALRM) interrupts blocking
// calls, and a socket call is not restarted after a signal: EINTR is retried, never taken for a
// silent server (which read as one under CI load).
ssize_t recv_before(const strait::Fd& fd, std::span<std::uint8_t> out, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return -1;
    pollfd pfd{fd.get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;  // EINTR, or the deadline
    const ssize_t n = recv(fd.get(), out.data(), out.size(), MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == ECONNRESET) return 0;
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) fail("recv failed");
  }
}

void send_all(const strait::Fd& fd, std::span<const std::uint8_t> bytes) {
  // The server may drop us mid-way: a failed send is fine.
  [[maybe_unused]] const ssize_t n = ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

// Reads frames until the server closes; returns their types. Fails when nothing ends in 5 s.
std::vector<wire::Type> read_until_closed(const strait::Fd& fd) {
  std::vector<std::uint8_t> buf;
  std::array<std::uint8_t, 4096> chunk{};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (true) {
    const ssize_t n = recv_before(fd, chunk, deadline);
    if (n == 0) break;
    if (n < 0) fail("the server neither answered nor closed within 5 s");
    buf.insert(buf.end(), chunk.begin(), chunk.begin() + n);
  }
  std::vector<wire::Type> types;
  std::span<const std::uint8_t> rest(buf);
  while (rest.size() >= wire::kHeaderBytes) {
    const std::size_t len = wire::body_length(rest.first<wire::kHeaderBytes>());
    if (rest.size() - wire::kHeaderBytes < len) break;
    types.push_back(wire::parse_reply(rest.subspan(wire::kHeaderBytes, len)).type);
    rest = rest.subspan(wire::kHeaderBytes + len);
  }
  return types;
}

std::vector<std::uint8_t> hello() {
  return wire::encode(wire::Request{.type = wire::Type::Hello,
                                    .magic = wire::kMagic,
                                    .version = wire::kVersion,
                                    .nonce = comm::store_auth::fresh_nonce()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const strait::Fd fd = connect_to_server();
  if ((data[0] & 1U) != 0) send_all(fd, hello());
  if ((data[0] & 3U) == 3U) {
    pollfd pfd{fd.get(), POLLIN, 0};
    poll(&pfd, 1, 1000);
  }
  send_all(fd, {data + 1, size - 1});
  ::shutdown(fd.get(), SHUT_WR);
  for (const wire::Type t : read_until_closed(fd)) {
    if (t != wire::Type::HelloOk && t != wire::Type::Fatal) {
      fail(
          "the server answered something other than the challenge or Fatal before "
          "authentication");
    }
  }
  // Still serving.
  const strait::Fd probe = connect_to_server();
  send_all(probe, hello());
  std::array<std::uint8_t, wire::kHeaderBytes> header{};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (std::size_t got = 0; got < header.size();) {
    const ssize_t n = recv_before(probe, std::span(header).subspan(got), deadline);
    if (n <= 0) fail("the server stopped answering Hello");
    got += static_cast<std::size_t>(n);
  }
  return 0;
}
