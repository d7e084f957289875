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
// Lifetime: the constructor binds and listens, so a port in use is reported to the caller, not to
// a thread. The destructor stops the thread and closes every socket, parked requests included:
// their clients see Error(PeerLost).
// Thread-safety: construct and destroy from one thread; port() is safe from any thread.
// Errors: the constructor throws Io (cannot listen) or InvalidArgument (host does not resolve).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace strait::comm {

class TcpStoreServer {
 public:
  // host: the address to listen on, "" for every interface. port 0 lets the kernel pick one.
  TcpStoreServer(const std::string& host, std::uint16_t port);
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  ~TcpStoreServer();

  // The port the server listens on.
  [[nodiscard]] std::uint16_t port() const noexcept;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::comm
