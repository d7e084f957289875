#include "comm/bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace strait::comm::net {
namespace {

struct AddrinfoDeleter {
  void operator()(addrinfo* ai) const noexcept { freeaddrinfo(ai); }
};
using AddrinfoPtr = std::unique_ptr<addrinfo, AddrinfoDeleter>;

// getaddrinfo for a TCP port; returns nullptr and sets error on failure.
AddrinfoPtr resolve(const char* node, std::uint16_t port, int flags, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(node, service.c_str(), &hints, &result);
  if (rc != 0) {
    error = rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
    return nullptr;
  }
  return AddrinfoPtr(result);
}

std::vector<const addrinfo*> as_list(const addrinfo* head) {
  std::vector<const addrinfo*> list;
  for (const addrinfo* ai = head; ai != nullptr; ai = ai->ai_next) list.push_back(ai);
  return list;
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    return (ntohl(in.sin_addr.s_addr) >> 24U) == 127U;
  }
  if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    if (IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) && in6.sin6_addr.s6_addr[12] == 127U;
  }
  return false;
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  sockaddr* sa = reinterpret_cast<sockaddr*>(&ss);
  if (getsockname(fd, sa, &len) != 0) {
    throw Error(ErrorCode::Io, fmt::format("getsockname failed: {}", std::strerror(errno)));
  }
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000'000));
}

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b, socklen_t len) {
  return std::memcmp(&a, &b, len) == 0;
}

// A retried connect to a local port nobody listens on can pick that very port as its ephemeral
// port and "connect" to itself (TCP simultaneous open).
bool connected_to_self(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_len = sizeof local;
  socklen_t peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return local_len == peer_len && same_address(local, peer, local_len);
}

std::string listen_hint(int err, const std::string& host, std::uint16_t port) {
  switch (err) {
    case EADDRINUSE:
      return fmt::format("another process is using port {}: pick another MASTER_PORT or stop it",
                         port);
    case EADDRNOTAVAIL:
      return fmt::format("{} is not an address of this machine: check MASTER_ADDR", host);
    case EACCES: return "ports below 1024 need privileges: pick a port above 1024";
    default: return "check MASTER_ADDR and MASTER_PORT";
  }
}

}  // namespace

std::string endpoint(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool is_loopback_host(const std::string& host) {
  std::string error;
  const AddrinfoPtr res = resolve(host.c_str(), 0, 0, error);
  if (!res) return false;
  const auto list = as_list(res.get());
  return std::all_of(list.begin(), list.end(),
                     [](const addrinfo* ai) { return is_loopback(ai->ai_addr); });
}

Listener listen_tcp(const std::string& host, std::uint16_t port, int backlog) {
  std::string error;
  const bool wildcard = host.empty();
  const AddrinfoPtr res = resolve(wildcard ? nullptr : host.c_str(), port, AI_PASSIVE, error);
  if (!res) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("cannot resolve '{}' to listen on: {}: check MASTER_ADDR (or --master-addr)",
                    host, error));
  }
  auto list = as_list(res.get());
  if (wildcard) {
    // The IPv6 wildcard in dual-stack mode also accepts IPv4 clients; try it first.
    std::stable_partition(list.begin(), list.end(),
                          [](const addrinfo* ai) { return ai->ai_family == AF_INET6; });
  }
  int last_errno = 0;
  for (const addrinfo* ai : list) {
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      last_errno = errno;
      continue;
    }
    const int one = 1;
    const int zero = 0;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (wildcard && ai->ai_family == AF_INET6) {
      setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), backlog) != 0) {
      last_errno = errno;
      continue;
    }
    const std::uint16_t bound = bound_port(fd.get());
    return Listener{std::move(fd), bound};
  }
  const std::string where = endpoint(wildcard ? "*" : host, port);
  throw Error(ErrorCode::Io,
              fmt::format("cannot listen on {}: {}: {}", where, std::strerror(last_errno),
                          listen_hint(last_errno, host, port)));
}

std::uint16_t pick_free_port(const std::string& host) {
  const Listener listener = listen_tcp(host, 0, 1);
  return listener.port;
}

Fd try_connect(const std::string& host, std::uint16_t port, Clock::time_point deadline,
               std::string& why) {
  std::string error;
  const AddrinfoPtr res = resolve(host.c_str(), port, 0, error);
  if (!res) {
    why = fmt::format("cannot resolve '{}': {}", host, error);
    return {};
  }
  why = "no address";
  for (const addrinfo* ai : as_list(res.get())) {
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      why = std::strerror(errno);
      continue;
    }
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = std::strerror(errno);
        continue;
      }
      pollfd pfd{fd.get(), POLLOUT, 0};
      int rc = 0;
      do {
        rc = poll(&pfd, 1, remaining_ms(deadline));
      } while (rc < 0 && errno == EINTR);
      if (rc <= 0) {
        why = rc == 0 ? "connection attempt timed out" : std::strerror(errno);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
    }
    if (connected_to_self(fd.get())) {
      why = std::strerror(ECONNREFUSED);
      continue;
    }
    const int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  return {};
}

}  // namespace strait::comm::net
