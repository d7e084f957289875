#include "comm/bootstrap/tcp_store_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_auth.h"
#include "comm/bootstrap/tcp_store_wire.h"
#include "core/error.h"
#include "core/fd.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;
using wire::ProtocolError;
using wire::Reply;
using wire::Type;

constexpr std::uint64_t kListenerTag = 0;
constexpr std::uint64_t kWakeTag = 1;
constexpr std::uint64_t kFirstConnTag = 2;
constexpr std::size_t kReadChunk = std::size_t{64} << 10U;
// Read at most this much from one client per wakeup, so one busy client cannot starve others.
constexpr std::size_t kMaxReadPerEvent = std::size_t{4} << 20U;
// A client with more than this many reply bytes unsent is not read from until they drain.
constexpr std::size_t kOutHighWater = std::size_t{8} << 20U;
constexpr int kBacklog = 4096;
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// A client that has not authenticated is read in small pieces: its frames are tiny.
constexpr std::size_t kPreAuthReadChunk = 512;
// Failures logged one by one; after that every kLogEvery-th, so a flood cannot fill the log.
constexpr std::uint64_t kLogFirst = 20;
constexpr std::uint64_t kLogEvery = 1000;

enum class Phase { Hello, Auth, Ready };

struct Conn {
  Fd fd;
  std::string peer;               // for log messages
  std::vector<std::uint8_t> in;   // received bytes not yet parsed
  std::vector<std::uint8_t> out;  // reply bytes not yet sent, from out_off on
  std::size_t out_off = 0;
  std::uint32_t events = 0;  // current epoll interest
  Phase phase = Phase::Hello;
  Clock::time_point deadline;        // for the handshake, while phase != Ready
  store_auth::Nonce client_nonce{};  // Phase::Auth
  store_auth::Nonce server_nonce{};  // Phase::Auth
  bool dead = false;                 // closed at the end of this loop iteration
  std::unordered_map<std::uint64_t, std::uint64_t> parked;  // request id -> waiter id

  [[nodiscard]] std::size_t pending_out() const { return out.size() - out_off; }
};

// A parked get() or wait(): answered when its last missing key is created.
struct Waiter {
  std::uint64_t conn = 0;
  std::uint64_t request = 0;
  Type type = Type::Get;
  std::vector<std::string> keys;  // distinct
  std::size_t missing = 0;
};

std::string peer_name(const sockaddr_storage& ss) {
  std::array<char, INET6_ADDRSTRLEN> buf{};
  if (ss.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, &ss, sizeof in);
    inet_ntop(AF_INET, &in.sin_addr, buf.data(), buf.size());
    return net::endpoint(buf.data(), ntohs(in.sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, &ss, sizeof in6);
    inet_ntop(AF_INET6, &in6.sin6_addr, buf.data(), buf.size());
    return net::endpoint(buf.data(), ntohs(in6.sin6_port));
  }
  return "unknown peer";
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  Impl(const std::string& host, std::uint16_t port, TcpStoreServerOptions options)
      : options_(std::move(options)) {
    if (options_.secret) auth_key_ = store_auth::auth_key(*options_.secret);
    net::Listener listener = net::listen_tcp(host, port, kBacklog);
    listen_ = std::move(listener.fd);
    port_ = listener.port;
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    wake_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!epoll_ || !wake_) {
      throw Error(ErrorCode::Io, fmt::format("cannot create the store server's epoll/eventfd: {}",
                                             std::strerror(errno)));
    }
    watch(listen_.get(), kListenerTag, EPOLLIN, EPOLL_CTL_ADD);
    watch(wake_.get(), kWakeTag, EPOLLIN, EPOLL_CTL_ADD);
    thread_ = std::thread([this] { run(); });
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    const std::uint64_t one = 1;
    // Cannot fail short of a bug: the eventfd counter is far from overflow.
    [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
    thread_.join();
  }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }

  [[nodiscard]] TcpStoreServerStats stats() const {
    const std::lock_guard lock(stats_mu_);
    return stats_;
  }

 private:
  void watch(int fd, std::uint64_t tag, std::uint32_t events, int op) const {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (epoll_ctl(epoll_.get(), op, fd, &ev) != 0) {
      throw Error(ErrorCode::Io,
                  fmt::format("epoll_ctl on the store server failed: {}", std::strerror(errno)));
    }
  }

  void run() noexcept {
    try {
      loop();
    } catch (const std::exception& e) {
      spdlog::error("strait store server on port {} stopped: {}", port_, e.what());
    }
    // Close every socket now, so that clients see PeerLost instead of waiting for their timeouts.
    conns_.clear();
    listen_.reset();
  }

  static int ms_until(Clock::time_point t) {
    return static_cast<int>(std::clamp<long long>(
        std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count(), 0, 60'000));
  }

  void loop() {
    std::array<epoll_event, 64> events{};
    while (true) {
      int timeout_ms = -1;
      if (accept_paused_) timeout_ms = ms_until(accept_resume_);
      if (const Conn* oldest = oldest_pending()) {
        const int t = ms_until(oldest->deadline);
        timeout_ms = timeout_ms < 0 ? t : std::min(timeout_ms, t);
      }
      const int n =
          epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error(ErrorCode::Io, fmt::format("epoll_wait failed: {}", std::strerror(errno)));
      }
      for (int i = 0; i < n; ++i) {
        const std::uint64_t tag = events[static_cast<std::size_t>(i)].data.u64;
        const std::uint32_t ev = events[static_cast<std::size_t>(i)].events;
        if (tag == kWakeTag) return;
        if (tag == kListenerTag) {
          accept_clients();
          continue;
        }
        const auto it = conns_.find(tag);
        if (it == conns_.end() || it->second.dead) continue;
        Conn& c = it->second;
        if ((ev & (EPOLLERR | EPOLLHUP)) != 0U) {
          drop(c);  // reset or fully closed: nothing more can be sent to it
          continue;
        }
        if ((ev & EPOLLIN) != 0U) on_readable(tag, c);
        if (!c.dead && (ev & EPOLLOUT) != 0U) on_writable(tag, c);
      }
      expire_handshakes();
      close_dead();
      if (accept_paused_ && Clock::now() >= accept_resume_) {
        watch(listen_.get(), kListenerTag, EPOLLIN, EPOLL_CTL_MOD);
        accept_paused_ = false;
      }
    }
  }

  void accept_clients() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = accept4(listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Out of descriptors or memory: stop accepting for a moment instead of spinning.
        spdlog::error("strait store server cannot accept a client: {} (raise `ulimit -n`?)",
                      std::strerror(errno));
        watch(listen_.get(), kListenerTag, 0, EPOLL_CTL_MOD);
        accept_paused_ = true;
        accept_resume_ = Clock::now() + kAcceptPause;
        return;
      }
      Fd owned(fd);
      count([](TcpStoreServerStats& s) { ++s.accepted; });
      if (conns_.size() >= options_.max_connections) {
        count([](TcpStoreServerStats& s) { ++s.flood_dropped; });
        note_failure("refusing client {}: {} connections are open already", peer_name(ss),
                     conns_.size());
        continue;  // closed by owned's destructor
      }
      if (pending_ >= options_.max_pending) {
        // The oldest unauthenticated connection makes room: real ranks authenticate within
        // milliseconds, so it is a stalled or hostile one.
        if (Conn* oldest = oldest_pending()) {
          count([](TcpStoreServerStats& s) { ++s.flood_dropped; });
          note_failure("dropping client {}: {} connections are waiting to authenticate",
                       oldest->peer, pending_);
          drop(*oldest);
        }
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const std::uint64_t tag = next_conn_++;
      watch(fd, tag, EPOLLIN, EPOLL_CTL_ADD);
      Conn& c = conns_[tag];
      c.fd = std::move(owned);
      c.peer = peer_name(ss);
      c.events = EPOLLIN;
      c.deadline = Clock::now() + options_.handshake_timeout;
      pending_order_.push_back(tag);
      ++pending_;
    }
  }

  template <typename F>
  void count(F f) {
    const std::lock_guard lock(stats_mu_);
    f(stats_);
  }

  // Logs a rejected client, the first few each, then one in kLogEvery.
  template <typename... Args>
  void note_failure(fmt::format_string<Args...> format, Args&&... args) {
    const std::uint64_t n = ++failures_logged_;
    if (n <= kLogFirst || n % kLogEvery == 0) {
      spdlog::warn("strait store: {}{}", fmt::format(format, std::forward<Args>(args)...),
                   n == kLogFirst ? " (further rejections are logged once per 1000)" : "");
    }
  }

  // The unauthenticated connection accepted first, or null. Drops stale entries on the way.
  Conn* oldest_pending() {
    while (!pending_order_.empty()) {
      const auto it = conns_.find(pending_order_.front());
      if (it != conns_.end() && !it->second.dead && it->second.phase != Phase::Ready) {
        return &it->second;
      }
      pending_order_.pop_front();
    }
    return nullptr;
  }

  // Closes unauthenticated connections past their handshake deadline (slow or silent clients).
  void expire_handshakes() {
    const auto now = Clock::now();
    while (Conn* c = oldest_pending()) {
      if (c->deadline > now) return;
      count([](TcpStoreServerStats& s) { ++s.idle_dropped; });
      note_failure("dropping client {}: no {} within {} ms", c->peer,
                   options_.secret ? "authentication" : "handshake",
                   options_.handshake_timeout.count());
      drop(*c);
    }
  }

  // Marks a connection for closing at the end of this loop iteration.
  void drop(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    if (c.phase != Phase::Ready) {
      --pending_;
      if (c.phase == Phase::Auth) {
        // Counted here (not at the failed proof) so each connection counts once.
        count([](TcpStoreServerStats& s) { ++s.auth_failures; });
      }
      c.phase = Phase::Ready;  // no longer pending
    }
  }

  void on_readable(std::uint64_t tag, Conn& c) {
    std::size_t total = 0;
    while (!c.dead && c.pending_out() <= kOutHighWater && total < kMaxReadPerEvent) {
      const std::size_t old = c.in.size();
      const std::size_t chunk = c.phase == Phase::Ready ? kReadChunk : kPreAuthReadChunk;
      c.in.resize(old + chunk);
      const ssize_t n = recv(c.fd.get(), c.in.data() + old, chunk, 0);
      if (n > 0) {
        c.in.resize(old + static_cast<std::size_t>(n));
        total += static_cast<std::size_t>(n);
        process_frames(tag, c);
        continue;
      }
      c.in.resize(old);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (c.phase == Phase::Auth) note_failure("client {} left while authenticating", c.peer);
      drop(c);  // orderly close (n == 0) or a socket error
    }
    update_interest(tag, c);
  }

  void on_writable(std::uint64_t tag, Conn& c) {
    flush(c);
    // Frames held back while the client's replies piled up can be served now.
    if (!c.dead && c.pending_out() <= kOutHighWater) process_frames(tag, c);
    update_interest(tag, c);
  }

  void process_frames(std::uint64_t tag, Conn& c) {
    std::size_t off = 0;
    while (!c.dead && c.pending_out() <= kOutHighWater) {
      const std::size_t avail = c.in.size() - off;
      if (avail < wire::kHeaderBytes) break;
      try {
        const std::size_t len = wire::body_length(std::span<const std::uint8_t, wire::kHeaderBytes>(
            c.in.data() + off, wire::kHeaderBytes));
        if (c.phase != Phase::Ready && len > wire::kMaxPreAuthBodyBytes) {
          throw ProtocolError(fmt::format("a frame of {} bytes before the handshake (at most {})",
                                          len, wire::kMaxPreAuthBodyBytes));
        }
        if (avail - wire::kHeaderBytes < len) break;
        handle(tag, c, {c.in.data() + off + wire::kHeaderBytes, len});
        off += wire::kHeaderBytes + len;
      } catch (const ProtocolError& e) {
        fatal(c, e.what());
        return;
      }
    }
    if (off > 0) c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(off));
  }

  void handle(std::uint64_t tag, Conn& c, std::span<const std::uint8_t> body) {
    wire::Request q = wire::parse_request(body);
    const std::uint64_t id = q.id;
    if (c.phase == Phase::Hello) {
      if (q.type != Type::Hello) {
        throw ProtocolError("expected Hello as the first message: is this a strait store client?");
      }
      if (q.magic != wire::kMagic) throw ProtocolError("bad magic: not a strait store client");
      if (q.version != wire::kVersion) {
        throw ProtocolError(fmt::format(
            "client speaks store protocol version {}, this store speaks {}: every rank must run "
            "the same strait build",
            q.version, wire::kVersion));
      }
      if (!auth_key_) {
        become_ready(c);
        reply(tag, Reply{.type = Type::HelloOk, .id = id});
        return;
      }
      c.phase = Phase::Auth;
      c.client_nonce = q.nonce;
      c.server_nonce = store_auth::fresh_nonce();
      reply(tag, Reply{.type = Type::HelloOk,
                       .id = id,
                       .auth = true,
                       .nonce = c.server_nonce,
                       .proof = store_auth::server_proof(*auth_key_, wire::kVersion, c.client_nonce,
                                                         c.server_nonce)});
      return;
    }
    if (c.phase == Phase::Auth) {
      const bool ok =
          q.type == Type::Auth &&
          store_auth::equal(q.proof, store_auth::client_proof(*auth_key_, wire::kVersion,
                                                              c.client_nonce, c.server_nonce));
      if (!ok) {
        fatal(c, fmt::format("authentication failed: {} (every rank needs STRAIT_SECRET_FILE "
                             "naming the same secret)",
                             q.type == Type::Auth
                                 ? "wrong proof: a different secret, or a replayed handshake"
                                 : "a request before authenticating"));
        return;
      }
      become_ready(c);
      count([](TcpStoreServerStats& s) { ++s.authenticated; });
      reply(tag, Reply{.type = Type::AuthOk, .id = id});
      return;
    }
    switch (q.type) {
      case Type::Hello: throw ProtocolError("Hello sent twice");
      case Type::Auth: throw ProtocolError("Auth sent twice, or to a store without a secret");
      case Type::Set:
        kv_[q.key].assign(q.value.begin(), q.value.end());
        reply(tag, Reply{.type = Type::Ok, .id = id});
        key_created(q.key);
        return;
      case Type::Get:
        if (const auto it = kv_.find(q.key); it != kv_.end()) {
          reply(tag, Reply{.type = Type::Value, .id = id, .value = it->second});
        } else {
          park(tag, c, id, Type::Get, {std::move(q.key)});
        }
        return;
      case Type::Add: add(tag, id, q.key, q.delta); return;
      case Type::Wait: {
        std::vector<std::string> keys = std::move(q.keys);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        const bool all_present = std::all_of(keys.begin(), keys.end(),
                                             [&](const std::string& k) { return kv_.contains(k); });
        if (all_present) {
          reply(tag, Reply{.type = Type::Ok, .id = id});
        } else {
          park(tag, c, id, Type::Wait, std::move(keys));
        }
        return;
      }
      case Type::Cancel: {
        const auto it = c.parked.find(id);
        if (it == c.parked.end()) return;  // already answered: the reply precedes this cancel
        const std::uint64_t wid = it->second;
        c.parked.erase(it);
        const Waiter& w = waiters_.at(wid);
        Reply cancelled{.type = Type::Cancelled, .id = id};
        for (const std::string& k : w.keys) {
          if (!kv_.contains(k)) cancelled.keys.push_back(k);
        }
        remove_waiter(wid);
        reply(tag, cancelled);
        return;
      }
      default:  // parse_request accepts requests only
        throw ProtocolError(
            fmt::format("a client sent reply type 0x{:02x}", static_cast<unsigned>(q.type)));
    }
  }

  void become_ready(Conn& c) {
    c.phase = Phase::Ready;
    --pending_;
  }

  void add(std::uint64_t tag, std::uint64_t id, const std::string& key, std::int64_t delta) {
    std::int64_t current = 0;
    const auto it = kv_.find(key);
    if (it != kv_.end()) {
      const char* first = reinterpret_cast<const char*>(it->second.data());
      const char* last = first + it->second.size();
      const auto [ptr, ec] = std::from_chars(first, last, current);
      if (ec != std::errc() || ptr != last || it->second.empty()) {
        send_error(tag, id, ErrorCode::InvalidArgument,
                   fmt::format("add({:?}) on a key that holds {} bytes that are not a counter: "
                               "use add() only on keys no one set() to other values",
                               key, it->second.size()));
        return;
      }
    }
    std::int64_t updated = 0;
    if (__builtin_add_overflow(current, delta, &updated)) {
      send_error(
          tag, id, ErrorCode::InvalidArgument,
          fmt::format("add({:?}, {}) overflows the counter's value {}", key, delta, current));
      return;
    }
    const std::string text = std::to_string(updated);
    kv_[key].assign(text.begin(), text.end());
    reply(tag, Reply{.type = Type::Int, .id = id, .number = updated});
    key_created(key);
  }

  void send_error(std::uint64_t tag, std::uint64_t id, ErrorCode code, const std::string& message) {
    reply(tag, Reply{.type = Type::Error, .id = id, .code = code, .message = message});
  }

  void park(std::uint64_t tag, Conn& c, std::uint64_t request, Type type,
            std::vector<std::string> keys) {
    if (c.parked.contains(request)) throw ProtocolError("request id reused while still pending");
    if (c.parked.size() >= options_.max_parked_per_connection) {
      throw ProtocolError(fmt::format("more than {} get/wait requests parked on one connection",
                                      options_.max_parked_per_connection));
    }
    const std::uint64_t wid = next_waiter_++;
    std::size_t missing = 0;
    for (const std::string& k : keys) {
      if (kv_.contains(k)) continue;
      key_waiters_[k].push_back(wid);
      ++missing;
    }
    waiters_.emplace(wid, Waiter{tag, request, type, std::move(keys), missing});
    c.parked.emplace(request, wid);
  }

  // Answers the waiters for which key was the last one missing.
  void key_created(const std::string& key) {
    const auto it = key_waiters_.find(key);
    if (it == key_waiters_.end()) return;
    const std::vector<std::uint64_t> ids = std::move(it->second);
    key_waiters_.erase(it);
    for (const std::uint64_t wid : ids) {
      const auto w = waiters_.find(wid);
      if (w == waiters_.end() || --w->second.missing > 0) continue;
      const Waiter done = std::move(w->second);
      waiters_.erase(w);
      const auto conn = conns_.find(done.conn);
      if (conn == conns_.end()) continue;
      conn->second.parked.erase(done.request);
      if (done.type == Type::Get) {
        reply(done.conn,
              Reply{.type = Type::Value, .id = done.request, .value = kv_.at(done.keys.front())});
      } else {
        reply(done.conn, Reply{.type = Type::Ok, .id = done.request});
      }
    }
  }

  void remove_waiter(std::uint64_t wid) {
    const auto w = waiters_.find(wid);
    if (w == waiters_.end()) return;
    for (const std::string& k : w->second.keys) {
      const auto list = key_waiters_.find(k);
      if (list == key_waiters_.end()) continue;
      std::erase(list->second, wid);
      if (list->second.empty()) key_waiters_.erase(list);
    }
    waiters_.erase(w);
  }

  void reply(std::uint64_t tag, const Reply& r) { send(tag, wire::encode(r)); }

  void send(std::uint64_t tag, const std::vector<std::uint8_t>& frame) {
    const auto it = conns_.find(tag);
    if (it == conns_.end() || it->second.dead) return;
    Conn& c = it->second;
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    flush(c);
    update_interest(tag, c);
  }

  void flush(Conn& c) {
    while (c.pending_out() > 0) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.pending_out(),
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop(c);
      return;
    }
    if (c.pending_out() == 0) {
      c.out.clear();
      c.out_off = 0;
    } else if (c.out_off > (std::size_t{1} << 20U) && c.out_off * 2 > c.out.size()) {
      c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(c.out_off));
      c.out_off = 0;
    }
  }

  void update_interest(std::uint64_t tag, Conn& c) {
    if (c.dead) return;
    std::uint32_t want = 0;
    if (c.pending_out() > 0) want |= EPOLLOUT;
    if (c.pending_out() <= kOutHighWater) want |= EPOLLIN;
    if (want == c.events) return;
    watch(c.fd.get(), tag, want, EPOLL_CTL_MOD);
    c.events = want;
  }

  // Tells the client what it did wrong, then drops it.
  void fatal(Conn& c, const std::string& reason) {
    if (c.phase == Phase::Ready) {
      count([](TcpStoreServerStats& s) { ++s.protocol_errors; });
      note_failure("dropping client {}: {}", c.peer, reason);
    } else if (c.phase == Phase::Hello) {
      count([](TcpStoreServerStats& s) { ++s.protocol_errors; });
      note_failure("dropping client {} before its handshake: {}", c.peer, reason);
    } else {
      note_failure("dropping client {} while it authenticates: {}", c.peer, reason);
    }
    const auto frame = wire::encode(Reply{.type = Type::Fatal, .message = reason});
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    flush(c);
    // Unread input makes close() send a reset, which can destroy the Fatal frame in flight.
    std::array<std::uint8_t, 4096> sink{};
    for (int i = 0; i < 256 && recv(c.fd.get(), sink.data(), sink.size(), MSG_DONTWAIT) > 0; ++i) {
    }
    drop(c);
  }

  void close_dead() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!it->second.dead) {
        ++it;
        continue;
      }
      for (const auto& [request, wid] : it->second.parked) remove_waiter(wid);
      it = conns_.erase(it);  // closing the socket also removes it from the epoll set
    }
    const std::lock_guard lock(stats_mu_);
    stats_.open = conns_.size();
  }

  TcpStoreServerOptions options_;
  std::optional<Key> auth_key_;  // with a secret
  std::deque<std::uint64_t>
      pending_order_;        // unauthenticated connections, oldest first (some stale)
  std::size_t pending_ = 0;  // connections not yet Ready
  std::uint64_t failures_logged_ = 0;
  mutable std::mutex stats_mu_;
  TcpStoreServerStats stats_;
  Fd listen_;
  Fd epoll_;
  Fd wake_;
  std::uint16_t port_ = 0;
  std::unordered_map<std::uint64_t, Conn> conns_;
  std::uint64_t next_conn_ = kFirstConnTag;
  std::unordered_map<std::string, Bytes> kv_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> key_waiters_;
  std::unordered_map<std::uint64_t, Waiter> waiters_;
  std::uint64_t next_waiter_ = 1;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
  std::thread thread_;  // last: starts once everything above exists
};

TcpStoreServer::TcpStoreServer(const std::string& host, std::uint16_t port,
                               TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(host, port, std::move(options))) {}

TcpStoreServer::~TcpStoreServer() = default;

std::uint16_t TcpStoreServer::port() const noexcept {
  return impl_->port();
}

TcpStoreServerStats TcpStoreServer::stats() const {
  return impl_->stats();
}

}  // namespace strait::comm
