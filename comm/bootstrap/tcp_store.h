/// \file
/// TcpStore: the Store that ranks share over TCP, as torch.distributed's TCPStore. Rank 0 runs the
/// server (TcpStoreServer) on a background thread at MASTER_ADDR:MASTER_PORT; every rank, rank 0
/// included, is a client.
///
/// A client keeps one connection and multiplexes it: requests carry ids and a reader thread hands
/// each reply to the thread that asked, so a get() parked on the server does not block set() from
/// another thread. get()/wait() are parked server-side until the keys exist; the client enforces
/// the timeout, then cancels the parked request (a key set just before the deadline still counts).
/// Clients connect with retries until connect_timeout, since rank 0 may start after them.
///
/// Authentication: with a shared secret (secret_file, else STRAIT_SECRET_FILE; comm/security/
/// secret.h), the server serves only clients that prove they hold it, and a client trusts only a
/// server that proves it too (comm/bootstrap/store_auth.h), before any key is read or written. A
/// rank whose secret differs from rank 0's fails at once with Mismatch ("authentication failed:
/// this rank's secret differs from rank 0's (STRAIT_SECRET_FILE=...)"), as does a rank without one
/// when rank 0 has one and the reverse. Without a secret anyone who reaches the port may use the
/// store; the server then warns once when it listens on a non-loopback address. The store's
/// traffic after the handshake is not encrypted: keep bulk secrets out of it.
///
/// Limits: keys are 1..4096 bytes (any bytes), values at most 64 MiB, wait() at most 4096 keys.
/// Thread-safety: every method may be called from several threads at once; destroy the store only
/// once no call is in flight. Destroying the server's owner ends the job's store: other clients
/// get Error(PeerLost) on their next call (or the one in flight).
/// Errors: Timeout naming the keys still missing and the store's address; PeerLost when the store
/// cannot be reached (after connect_timeout) or the connection breaks; InvalidArgument for an
/// empty or oversized key or value and for add() on a key that is not a counter; Mismatch when the
/// server rejects the client (e.g. another strait version); Io/InvalidArgument from the server's
/// constructor when it cannot listen.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"
#include "core/export.h"

namespace strait::comm {

class TcpStoreServer;

/// Where a TcpStore's server is, whether this process runs it, deadlines and the shared secret.
struct TcpStoreOptions {
  std::string host = "127.0.0.1";  ///< MASTER_ADDR: where the server is (or will be)
  std::uint16_t port = 0;          ///< MASTER_PORT; 0 only with is_server (the kernel picks one)
  bool is_server = false;          ///< run the server in this process (rank 0)
  /// How long a client retries to reach the server before giving up.
  std::chrono::milliseconds connect_timeout = std::chrono::minutes(5);
  /// Deadline for the server to answer set() and add().
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// The shared secret's file (mode 0600): unset reads STRAIT_SECRET_FILE; "" means no secret.
  std::optional<std::string> secret_file{};
};

/// The Store over TCP that a job's ranks share (see the file comment). Thread-safe.
class STRAIT_API TcpStore final : public Store {
 public:
  /// With is_server, listens first: on MASTER_ADDR itself when it is a loopback address, else on
  /// every interface (as torchrun), since a hostname can resolve to a different address on rank 0
  /// than on the others (Debian maps its own hostname to 127.0.1.1).
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;

  /// The text form, set(key, std::string).
  using Store::set;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  /// The server's address (the port is the kernel's choice when 0 was asked for).
  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  /// The server's port (the kernel's choice when 0 was asked for).
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }

 private:
  class Client;

  std::string host_;
  std::uint16_t port_ = 0;
  std::unique_ptr<TcpStoreServer> server_;  ///< declared before client_: outlives it
  std::unique_ptr<Client> client_;
};

}  // namespace strait::comm
