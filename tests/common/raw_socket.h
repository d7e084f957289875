// A raw TCP connection to a store server, for speaking (or breaking) its protocol by hand in tests.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/bootstrap/socket.h"

namespace strait::test {

// Connects to 127.0.0.1:port within 5 s (a test failure otherwise). Reads time out after 10 s, so
// a server that stops answering fails the test instead of hanging it.
inline Fd raw_connect(std::uint16_t port) {
  std::string why;
  Fd fd = comm::net::try_connect("127.0.0.1", port,
                                 std::chrono::steady_clock::now() + std::chrono::seconds(5), why);
  EXPECT_TRUE(fd.valid()) << why;
  timeval tv{};
  tv.tv_sec = 10;
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline void send_bytes(const Fd& fd, const std::vector<std::uint8_t>& bytes) {
  ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads until the server closes the connection (or 10 s pass); returns what arrived. `closed`:
// whether it closed (an orderly close or a reset: either way the server dropped us).
inline std::vector<std::uint8_t> read_until_closed(const Fd& fd, bool& closed) {
  std::vector<std::uint8_t> got;
  closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd.get(), POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    std::array<std::uint8_t, 4096> buf{};
    const ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.insert(got.end(), buf.begin(), buf.begin() + n);
  }
  return got;
}

}  // namespace strait::test
