// TCP helpers shared by the bootstrap store and the launcher: listening, connecting with a
// deadline, picking a free port. IPv4 and IPv6 through getaddrinfo; every socket is CLOEXEC.
//
// Thread-safety: free functions, safe to call from any thread.
// Errors: InvalidArgument when a host does not resolve (listen_tcp, pick_free_port); Io when a
// socket cannot be created, bound or listened on. try_connect reports failures in its result.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/fd.h"

namespace strait::comm::net {

using Clock = std::chrono::steady_clock;

// "host:port", or "[host]:port" when host is an IPv6 literal: for messages.
std::string endpoint(const std::string& host, std::uint16_t port);

// True when host resolves and every address it resolves to is loopback (127.0.0.0/8, ::1).
bool is_loopback_host(const std::string& host);

struct Listener {
  Fd fd;                   // non-blocking listening socket
  std::uint16_t port = 0;  // the bound port (the kernel's choice when 0 was asked for)
};

// Listens on host:port. host "" means every interface (IPv6 dual-stack where the kernel allows,
// else IPv4). port 0 lets the kernel pick. SO_REUSEADDR so that a restarted job can rebind a port
// whose previous connections are still in TIME_WAIT.
Listener listen_tcp(const std::string& host, std::uint16_t port, int backlog);

// A port that is free on host at the time of the call (binds port 0 and reads it back). Another
// process could take it before the caller binds it; use it right away, for one server.
std::uint16_t pick_free_port(const std::string& host);

// One attempt to connect to host:port, giving up at deadline. Returns a blocking socket with
// TCP_NODELAY, or an invalid Fd with the reason in why (refused, unreachable, unresolvable,
// timed out): the caller decides whether to retry. A socket that connected to itself (possible
// when retrying a local port in the ephemeral range while nobody listens) counts as refused.
Fd try_connect(const std::string& host, std::uint16_t port, Clock::time_point deadline,
               std::string& why);

}  // namespace strait::comm::net
