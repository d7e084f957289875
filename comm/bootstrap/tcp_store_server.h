// TcpStoreServer: the key-value server behind TcpStore, run on a background thread of rank 0.
//
// One epoll loop serves every client (non-blocking sockets, per-connection buffers). get() and
// wait() on missing keys are parked on the server and answered when a set() or add() creates the
// keys: clients never poll. add() is atomic because one thread applies every request in order.
// Counters are stored as decimal text (as torch.distributed's TCPStore does), so get() on a
// counter returns e.g. "42". A client that sends a malformed frame or an unknown command gets a
// Fatal message and is disconnected; other clients are unaffected. A client that stops reading
// its replies is not read from until its queue drains, which bounds the server's memory.
//
// Hostile clients (the store listens where anyone may connect): with a shared secret every
// connection must authenticate (comm/bootstrap/store_auth.h) before any key is read or written; a
// client that fails is disconnected, counted and logged with its address. Before authentication a
// client may send frames of at most wire::kMaxPreAuthBodyBytes and must finish within
// handshake_timeout; at most max_pending connections may be unauthenticated at once (the oldest is
// dropped for a new one, so a flood of idle connections cannot keep the ranks out), at most
// max_connections may be open (more are closed at once), and each may park at most
// max_parked_per_connection get/wait requests. Memory is therefore bounded by those limits and
// the job's own keys and values. Without a secret every client is served once it has said Hello,
// so each connection may make the server buffer up to one maximal frame (64 MiB): where untrusted
// clients can reach the port, use a secret.
//
// Lifetime: the constructor binds and listens, so a port in use is reported to the caller, not to
// a thread. The destructor stops the thread and closes every socket, parked requests included:
// their clients see Error(PeerLost).
// Thread-safety: construct and destroy from one thread; port() is safe from any thread.
// Errors: the constructor throws Io (cannot listen) or InvalidArgument (host does not resolve).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/security/secret.h"

namespace strait::comm {

struct TcpStoreServerOptions {
  std::optional<SharedSecret> secret;  // none: no authentication (every client is served)
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  std::size_t max_connections = 8192;
  std::size_t max_pending = 512;  // connections not yet authenticated
  std::size_t max_parked_per_connection = std::size_t{1} << 16U;
};

// What the server has seen since it started; counters only grow (open excepted).
struct TcpStoreServerStats {
  std::uint64_t accepted = 0;
  std::uint64_t authenticated = 0;  // connections that completed the handshake
  std::uint64_t auth_failures = 0;  // wrong proof, wrong first message, or gone while proving
  std::uint64_t protocol_errors = 0;
  std::uint64_t idle_dropped = 0;   // unauthenticated past handshake_timeout
  std::uint64_t flood_dropped = 0;  // over max_pending or max_connections
  std::uint64_t open = 0;           // connections open now
};

class TcpStoreServer {
 public:
  // host: the address to listen on, "" for every interface. port 0 lets the kernel pick one.
  TcpStoreServer(const std::string& host, std::uint16_t port, TcpStoreServerOptions options = {});
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  ~TcpStoreServer();

  // The port the server listens on.
  [[nodiscard]] std::uint16_t port() const noexcept;
  // A snapshot of the counters; safe from any thread.
  [[nodiscard]] TcpStoreServerStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::comm
