#include "comm/bootstrap/tcp_store.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/store_auth.h"
#include "comm/bootstrap/tcp_store_server.h"
#include "comm/bootstrap/tcp_store_wire.h"
#include "core/error.h"
#include "core/fd.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::Reply;
using wire::Request;
using wire::Type;

// How long a client waits for the server to acknowledge the cancellation of a timed-out request.
constexpr auto kCancelGrace = std::chrono::seconds(5);
// The handshake gets at least this long, even when the connect deadline is closer.
constexpr auto kMinHandshake = std::chrono::seconds(5);
constexpr auto kMaxRetryBackoff = milliseconds(1000);

std::string seconds(milliseconds ms) {
  return fmt::format("{:g}s", static_cast<double>(ms.count()) / 1000.0);
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += fmt::format("{}{:?}", i == 0 ? "" : ", ", keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

void check_key(const std::string& key) {
  if (key.empty()) throw Error(ErrorCode::InvalidArgument, "empty store key: keys need a byte");
  if (key.size() > wire::kMaxKeyBytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("store key of {} bytes exceeds the limit of {}: use a shorter key",
                            key.size(), wire::kMaxKeyBytes));
  }
}

void check_timeout(milliseconds timeout, std::string_view op) {
  if (timeout.count() < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} with a negative timeout ({} ms)", op, timeout.count()));
  }
}

// Blocking read of exactly buf.size() bytes; false on EOF or error (errno tells which, 0 for EOF).
bool recv_exact(int fd, std::span<std::uint8_t> buf) {
  std::size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = recv(fd, buf.data() + got, buf.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      errno = 0;
      return false;
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

// Like recv_exact, but gives up at deadline (returns false with errno ETIMEDOUT).
bool recv_exact_until(int fd, std::span<std::uint8_t> buf, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < buf.size()) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int rc = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1'000'000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return false;
    if (rc == 0) continue;
    const ssize_t n = recv(fd, buf.data() + got, buf.size() - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      errno = 0;
      return false;
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return false;
    }
  }
  return true;
}

std::string io_reason(int err) {
  return err == 0 ? "connection closed" : std::strerror(err);
}

}  // namespace

// One multiplexed connection to the server; see tcp_store.h.
class TcpStore::Client {
 public:
  Client(const std::string& host, std::uint16_t port, milliseconds connect_timeout,
         milliseconds timeout, std::optional<SharedSecret> secret)
      : where_(net::endpoint(host, port)), timeout_(timeout), secret_(std::move(secret)) {
    connect(host, port, connect_timeout);
    reader_ = std::thread([this] { read_loop(); });
  }

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  ~Client() {
    // Wakes the reader thread (its recv returns 0); the server sees an orderly close.
    ::shutdown(fd_.get(), SHUT_RDWR);
    reader_.join();
  }

  void set(const std::string& key, const Bytes& value) {
    check_key(key);
    if (value.size() > wire::kMaxValueBytes) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("value of {} bytes for key {:?} exceeds the store's limit of {} "
                              "bytes: the store is for rendezvous metadata, send bulk data "
                              "through a communicator",
                              value.size(), key, wire::kMaxValueBytes));
    }
    const std::string op = fmt::format("set({:?})", key);
    const Reply reply = request_with_deadline(op, [&](std::uint64_t id) {
      return wire::encode(Request{.type = Type::Set, .id = id, .key = key, .value = value});
    });
    expect(reply, Type::Ok, op);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) {
    check_key(key);
    const std::string op = fmt::format("add({:?}, {})", key, delta);
    const Reply reply = request_with_deadline(op, [&](std::uint64_t id) {
      return wire::encode(Request{.type = Type::Add, .id = id, .key = key, .delta = delta});
    });
    expect(reply, Type::Int, op);
    return reply.number;
  }

  Bytes get(const std::string& key, milliseconds timeout) {
    check_key(key);
    check_timeout(timeout, "get");
    const std::string op = fmt::format("get({:?})", key);
    Reply reply = request_parked(op, {key}, timeout, [&](std::uint64_t id) {
      return wire::encode(Request{.type = Type::Get, .id = id, .key = key});
    });
    expect(reply, Type::Value, op);
    return std::move(reply.value);
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) {
    check_timeout(timeout, "wait");
    for (const std::string& key : keys) check_key(key);
    // Larger sets are waited for in batches under the same deadline.
    const Clock::time_point deadline = Clock::now() + timeout;
    for (std::size_t first = 0; first < keys.size(); first += wire::kMaxWaitKeys) {
      const std::size_t last = std::min(keys.size(), first + wire::kMaxWaitKeys);
      const std::vector<std::string> batch(keys.begin() + static_cast<std::ptrdiff_t>(first),
                                           keys.begin() + static_cast<std::ptrdiff_t>(last));
      const auto left =
          std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
      const std::string op = fmt::format("wait({})", quote_keys(batch));
      const Reply reply = request_parked(op, batch, left, [&](std::uint64_t id) {
        return wire::encode(Request{.type = Type::Wait, .id = id, .keys = batch});
      });
      expect(reply, Type::Ok, op);
    }
  }

 private:
  // Removes a request's slot however the call ends.
  struct PendingGuard {
    PendingGuard(Client* c, std::uint64_t request) : client(c), id(request) {}
    PendingGuard(const PendingGuard&) = delete;
    PendingGuard& operator=(const PendingGuard&) = delete;
    ~PendingGuard() {
      const std::lock_guard lock(client->mu_);
      client->pending_.erase(id);
    }
    Client* client;
    std::uint64_t id;
  };

  void connect(const std::string& host, std::uint16_t port, milliseconds connect_timeout) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + connect_timeout;
    milliseconds backoff(10);
    std::string why;
    while (true) {
      fd_ = net::try_connect(host, port, deadline, why);
      if (fd_ && handshake(std::max(deadline, Clock::now() + kMinHandshake), why)) break;
      fd_.reset();
      const auto now = Clock::now();
      if (now >= deadline) {
        throw Error(ErrorCode::PeerLost,
                    fmt::format("could not reach the strait store at {} after {}: is rank 0 "
                                "running and MASTER_ADDR/MASTER_PORT the same on every rank? "
                                "(last attempt: {})",
                                where_, seconds(connect_timeout), why));
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, kMaxRetryBackoff);
    }
    const int one = 1;
    const int idle_s = 30;
    const int interval_s = 5;
    const int probes = 6;
    // Notices a server host that vanished without closing its sockets within about a minute.
    setsockopt(fd_.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    // A send to a server that stopped reading fails after the request timeout instead of hanging.
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
    setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  // Hello / HelloOk. False (with why) when the connection closed early, so the caller retries;
  // throws when the peer answers but is not a compatible strait store.
  bool handshake(Clock::time_point deadline, std::string& why) {
    const store_auth::Nonce nonce = store_auth::fresh_nonce();
    const auto hello = wire::encode(Request{
        .type = Type::Hello, .magic = wire::kMagic, .version = wire::kVersion, .nonce = nonce});
    if (send(fd_.get(), hello.data(), hello.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(hello.size())) {
      why = fmt::format("handshake: {}", std::strerror(errno));
      return false;
    }
    std::optional<Reply> reply = handshake_reply(deadline, why);
    if (!reply) return false;
    expect_handshake(*reply, Type::HelloOk);
    if (!reply->auth && !secret_) return true;
    if (!secret_) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("authentication failed: the strait store at {} requires the job's "
                              "shared secret and this rank has none: set STRAIT_SECRET_FILE to "
                              "the same file as on rank 0",
                              where_));
    }
    if (!reply->auth) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("authentication failed: this rank has a shared secret ({}) but the "
                              "strait store at {} does not ask for one: set STRAIT_SECRET_FILE on "
                              "rank 0 too (or is something else listening on MASTER_PORT?)",
                              secret_->source(), where_));
    }
    const Key key = store_auth::auth_key(*secret_);
    if (!store_auth::equal(reply->proof,
                           store_auth::server_proof(key, wire::kVersion, nonce, reply->nonce))) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("authentication failed: this rank's secret differs from rank 0's "
                              "({}; the store at {} proved a different one)",
                              secret_->source(), where_));
    }
    const auto auth = wire::encode(
        Request{.type = Type::Auth,
                .proof = store_auth::client_proof(key, wire::kVersion, nonce, reply->nonce)});
    if (send(fd_.get(), auth.data(), auth.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(auth.size())) {
      why = fmt::format("handshake: {}", std::strerror(errno));
      return false;
    }
    reply = handshake_reply(deadline, why);
    if (!reply) return false;
    expect_handshake(*reply, Type::AuthOk);
    return true;
  }

  void expect_handshake(const Reply& reply, Type type) const {
    if (reply.type == Type::Fatal) {
      throw Error(
          ErrorCode::Mismatch,
          fmt::format("the strait store at {} rejected this client: {}", where_, reply.message));
    }
    if (reply.type != type) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("the strait store at {} answered the handshake with type 0x{:02x}",
                              where_, static_cast<unsigned>(reply.type)));
    }
  }

  // One reply during the handshake; nullopt (with why) when the connection closed early.
  std::optional<Reply> handshake_reply(Clock::time_point deadline, std::string& why) {
    std::array<std::uint8_t, wire::kHeaderBytes> header{};
    if (!recv_exact_until(fd_.get(), header, deadline)) {
      const int err = errno;
      if (err == ETIMEDOUT) {
        throw Error(ErrorCode::PeerLost,
                    fmt::format("{} accepted the connection but did not answer the strait store "
                                "handshake: is another program listening on MASTER_PORT?",
                                where_));
      }
      why = fmt::format("handshake: {}", io_reason(err));
      return std::nullopt;
    }
    Reply reply;
    try {
      Bytes body(wire::body_length(header));
      if (!recv_exact_until(fd_.get(), body, deadline)) {
        why = fmt::format("handshake: {}", io_reason(errno));
        return std::nullopt;
      }
      reply = wire::parse_reply(body);
    } catch (const wire::ProtocolError& e) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("{} does not speak the strait store protocol ({}): is another "
                              "program listening on MASTER_PORT?",
                              where_, e.what()));
    }
    return reply;
  }

  void read_loop() {
    std::string reason;
    try {
      while (true) {
        std::array<std::uint8_t, wire::kHeaderBytes> header{};
        if (!recv_exact(fd_.get(), header)) {
          reason = io_reason(errno);
          break;
        }
        Bytes body(wire::body_length(header));
        if (!recv_exact(fd_.get(), body)) {
          reason = io_reason(errno);
          break;
        }
        Reply reply = wire::parse_reply(body);
        if (reply.type == Type::Fatal) {
          reason = fmt::format("the store dropped this client: {}", reply.message);
          break;
        }
        const std::lock_guard lock(mu_);
        const auto it = pending_.find(reply.id);
        // Replies nobody waits for (their caller gave up) are dropped.
        if (it != pending_.end() && !it->second) {
          it->second = std::move(reply);
          cv_.notify_all();
        }
      }
    } catch (const std::exception& e) {
      reason = fmt::format("malformed reply: {}", e.what());
    }
    const std::lock_guard lock(mu_);
    broken_ = reason;
    cv_.notify_all();
  }

  [[nodiscard]] Error lost(const std::string& op) const {
    return {ErrorCode::PeerLost,
            fmt::format("{}: lost the connection to the strait store at {} ({}): rank 0, which "
                        "runs the store, has exited or the network failed",
                        op, where_, broken_.value_or("unknown cause"))};
  }

  // Registers a slot for the reply; throws PeerLost when the connection is already gone.
  std::uint64_t begin(const std::string& op) {
    const std::uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock(mu_);
    if (broken_) throw lost(op);
    pending_.emplace(id, std::nullopt);
    return id;
  }

  void transmit(const std::string& op, const std::vector<std::uint8_t>& frame) {
    const std::lock_guard write_lock(write_mu_);
    std::size_t sent = 0;
    while (sent < frame.size()) {
      const ssize_t n = ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const std::string reason = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                                     ? fmt::format("send blocked for {}", seconds(timeout_))
                                     : io_reason(n < 0 ? errno : 0);
      // A partly sent frame leaves the stream unusable: close it for everyone.
      ::shutdown(fd_.get(), SHUT_RDWR);
      const std::lock_guard lock(mu_);
      if (!broken_) broken_ = reason;
      throw lost(op);
    }
  }

  // Waits for the reply to id until deadline; nullopt on timeout. Throws PeerLost.
  std::optional<Reply> await(const std::string& op, std::uint64_t id, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return pending_.at(id).has_value() || broken_; });
    if (pending_.at(id)) return std::move(pending_.at(id));
    if (broken_) throw lost(op);
    return std::nullopt;
  }

  // set() and add(): the server answers at once, so no answer within timeout_ means trouble.
  template <typename MakeFrame>
  Reply request_with_deadline(const std::string& op, MakeFrame make_frame) {
    const std::uint64_t id = begin(op);
    const PendingGuard guard{this, id};
    transmit(op, make_frame(id));
    std::optional<Reply> reply = await(op, id, Clock::now() + timeout_);
    if (!reply) {
      throw Error(ErrorCode::Timeout,
                  fmt::format("{}: the strait store at {} did not answer within {}: is rank 0 "
                              "stuck or overloaded?",
                              op, where_, seconds(timeout_)));
    }
    return std::move(*reply);
  }

  // get() and wait(): parked on the server until the keys exist; cancelled at the deadline.
  template <typename MakeFrame>
  Reply request_parked(const std::string& op, const std::vector<std::string>& keys,
                       milliseconds timeout, MakeFrame make_frame) {
    const std::uint64_t id = begin(op);
    const PendingGuard guard{this, id};
    transmit(op, make_frame(id));
    std::optional<Reply> reply = await(op, id, Clock::now() + timeout);
    if (!reply) {
      // The answer to the cancel is either the real reply (the keys appeared just in time) or
      // Cancelled with the keys still missing.
      transmit(op, wire::encode(Request{.type = Type::Cancel, .id = id}));
      reply = await(op, id, Clock::now() + kCancelGrace);
    }
    if (!reply || reply->type == Type::Cancelled) {
      const std::vector<std::string>& missing = reply ? reply->keys : keys;
      const std::string what = keys.size() == 1
                                   ? fmt::format("key {}", quote_keys(keys))
                                   : fmt::format("keys {} ({} of {} still missing)",
                                                 quote_keys(missing), missing.size(), keys.size());
      throw Error(ErrorCode::Timeout,
                  fmt::format("{}: timed out after {} waiting for {} in the strait store at {}: "
                              "the rank that sets it has not (did it fail or take another path?)",
                              op, seconds(timeout), what, where_));
    }
    return std::move(*reply);
  }

  void expect(const Reply& reply, Type type, const std::string& op) const {
    if (reply.type == type) return;
    if (reply.type == Type::Error)
      throw Error(reply.code, fmt::format("{}: {}", op, reply.message));
    throw Error(
        ErrorCode::Internal,
        fmt::format("{}: the strait store at {} sent reply type 0x{:02x}, expected 0x{:02x}", op,
                    where_, static_cast<unsigned>(reply.type), static_cast<unsigned>(type)));
  }

  std::string where_;
  milliseconds timeout_;
  std::optional<SharedSecret> secret_;
  Fd fd_;
  std::atomic<std::uint64_t> next_id_{1};
  std::mutex write_mu_;  // one frame on the wire at a time
  std::mutex mu_;        // guards pending_ and broken_
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, std::optional<Reply>> pending_;
  std::optional<std::string> broken_;  // why the connection is gone
  std::thread reader_;
};

TcpStore::TcpStore(const TcpStoreOptions& options) : host_(options.host), port_(options.port) {
  if (host_.empty()) {
    throw Error(ErrorCode::InvalidArgument, "TcpStore needs the server's host: set MASTER_ADDR");
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("TcpStore timeouts must be positive (timeout {} ms, connect_timeout {} "
                            "ms)",
                            options.timeout.count(), options.connect_timeout.count()));
  }
  // An explicit "" means no secret, whatever the environment says.
  std::optional<SharedSecret> secret;
  if (!options.secret_file || !options.secret_file->empty()) {
    secret = SharedSecret::resolve(options.secret_file.value_or(std::string()));
  }
  if (options.is_server) {
    const bool loopback = net::is_loopback_host(host_);
    server_ = std::make_unique<TcpStoreServer>(loopback ? host_ : "", port_,
                                               TcpStoreServerOptions{.secret = secret});
    port_ = server_->port();
    if (!secret && !loopback) {
      spdlog::warn(
          "strait store: listening on every interface at port {} without a shared secret: anyone "
          "who reaches it can read and write the job's store. Set STRAIT_SECRET_FILE (a file of "
          "random bytes, mode 0600) on every rank",
          port_);
    }
  } else if (port_ == 0) {
    throw Error(ErrorCode::InvalidArgument,
                "a TcpStore client needs the server's port: set MASTER_PORT");
  }
  client_ = std::make_unique<Client>(host_, port_, options.connect_timeout, options.timeout,
                                     std::move(secret));
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const Bytes& value) {
  client_->set(key, value);
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return client_->get(key, timeout);
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  return client_->add(key, delta);
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  client_->wait(keys, timeout);
}

}  // namespace strait::comm
