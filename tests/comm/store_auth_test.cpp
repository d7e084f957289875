// The store's authenticated handshake (comm/bootstrap/store_auth.h) and its defences against
// hostile clients (comm/bootstrap/tcp_store_server.h), against a real TcpStoreServer on loopback.
// Every raw socket has a receive timeout and every wait a deadline, so nothing here can hang.
#include "comm/bootstrap/store_auth.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/tcp_store.h"
#include "comm/bootstrap/tcp_store_server.h"
#include "comm/bootstrap/tcp_store_wire.h"
#include "comm/security/secret.h"
#include "core/error.h"
#include "tests/common/raw_socket.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::raw_connect;
using test::read_until_closed;
using test::send_bytes;
namespace fs = std::filesystem;

// A secret file in a fresh temporary folder, removed with it.
class SecretFile {
 public:
  explicit SecretFile(const std::string& content,
                      fs::perms mode = fs::perms::owner_read | fs::perms::owner_write) {
    std::string tmpl = (fs::temp_directory_path() / "strait_secret_XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    path_ = (fs::path(dir_) / "job.key").string();
    std::ofstream(path_, std::ios::binary) << content;
    fs::permissions(path_, mode);
  }
  SecretFile(const SecretFile&) = delete;
  SecretFile& operator=(const SecretFile&) = delete;
  ~SecretFile() { fs::remove_all(dir_); }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

const std::string kSecret = "0123456789abcdef-the-job-secret";
const std::string kOtherSecret = "0123456789abcdef-another-secret";

TcpStoreOptions client_options(std::uint16_t port, std::string secret_file) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.connect_timeout = 5s;
  o.timeout = 5s;
  o.secret_file = std::move(secret_file);
  return o;
}

TcpStoreServerOptions server_options(const SecretFile* secret) {
  TcpStoreServerOptions o;
  if (secret != nullptr) o.secret = SharedSecret::from_file(secret->path());
  return o;
}

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a strait::Error";
  return Error(ErrorCode::Internal, "no error thrown");
}

// Polls the server's counters until pred holds (the server counts on its own thread).
template <typename Pred>
TcpStoreServerStats wait_for_stats(const TcpStoreServer& server, Pred pred) {
  const auto deadline = Clock::now() + 10s;
  TcpStoreServerStats s = server.stats();
  while (!pred(s) && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    s = server.stats();
  }
  return s;
}

// One reply frame, or nullopt when the server closed the connection (or 10 s passed).
std::optional<wire::Reply> read_reply(const Fd& fd) {
  std::array<std::uint8_t, wire::kHeaderBytes> header{};
  std::size_t got = 0;
  while (got < header.size()) {
    const ssize_t n = recv(fd.get(), header.data() + got, header.size() - got, 0);
    if (n <= 0) return std::nullopt;
    got += static_cast<std::size_t>(n);
  }
  std::vector<std::uint8_t> body(wire::body_length(header));
  got = 0;
  while (got < body.size()) {
    const ssize_t n = recv(fd.get(), body.data() + got, body.size() - got, 0);
    if (n <= 0) return std::nullopt;
    got += static_cast<std::size_t>(n);
  }
  return wire::parse_reply(body);
}

// True when the server closes the connection within 10 s (after any replies it sends first).
bool closed_by_server(const Fd& fd) {
  bool closed = false;
  read_until_closed(fd, closed);
  return closed;
}

std::vector<std::uint8_t> hello(const store_auth::Nonce& nonce) {
  return wire::encode(wire::Request{
      .type = wire::Type::Hello, .magic = wire::kMagic, .version = wire::kVersion, .nonce = nonce});
}

std::vector<std::uint8_t> auth(const store_auth::Proof& proof) {
  return wire::encode(wire::Request{.type = wire::Type::Auth, .proof = proof});
}

// The server's answer to a rejected handshake: Fatal naming authentication, then a close.
void expect_rejected(const Fd& fd) {
  const auto reply = read_reply(fd);
  ASSERT_TRUE(reply.has_value()) << "closed without saying why";
  EXPECT_EQ(reply->type, wire::Type::Fatal);
  EXPECT_NE(reply->message.find("authentication failed"), std::string::npos) << reply->message;
  EXPECT_TRUE(closed_by_server(fd));
}

// A well-behaved client still gets served: the job is unaffected.
void expect_serving(std::uint16_t port, const std::string& secret_file, const std::string& tag) {
  TcpStore client(client_options(port, secret_file));
  client.set("probe/" + tag, std::string(tag));
  EXPECT_EQ(client.get_string("probe/" + tag, 1s), tag);
}

TEST(StoreAuth, RightSecretServesEveryRankAndProvesBothWays) {
  const SecretFile secret(kSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
  std::vector<std::unique_ptr<TcpStore>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::make_unique<TcpStore>(client_options(server.port(), secret.path())));
  }
  ranks[0]->set("hello", std::string("world"));
  for (auto& r : ranks) EXPECT_EQ(r->get_string("hello", 1s), "world");
  EXPECT_EQ(ranks[3]->add("n", 5), 5);
  const auto s = wait_for_stats(server, [](const auto& st) { return st.authenticated == 4; });
  EXPECT_EQ(s.authenticated, 4U);
  EXPECT_EQ(s.auth_failures, 0U);

  // The proofs are HMAC-SHA256 under a key derived from the secret: the two directions differ,
  // and both depend on both nonces.
  const Key key = store_auth::auth_key(SharedSecret::from_file(secret.path()));
  const store_auth::Nonce a = store_auth::fresh_nonce();
  const store_auth::Nonce b = store_auth::fresh_nonce();
  EXPECT_NE(a, b);
  EXPECT_FALSE(store_auth::equal(store_auth::server_proof(key, 2, a, b),
                                 store_auth::client_proof(key, 2, a, b)));
  EXPECT_FALSE(store_auth::equal(store_auth::client_proof(key, 2, a, b),
                                 store_auth::client_proof(key, 2, b, a)));
  EXPECT_TRUE(store_auth::equal(store_auth::client_proof(key, 2, a, b),
                                store_auth::client_proof(key, 2, a, b)));
}

TEST(StoreAuth, WrongSecretFailsAtOnceNamingTheFileAndIsCountedByTheServer) {
  const SecretFile secret(kSecret);
  const SecretFile other(kOtherSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
  const auto start = Clock::now();
  const Error e = error_of([&] { TcpStore c(client_options(server.port(), other.path())); });
  EXPECT_LT(Clock::now() - start, 3s) << "a wrong secret must fail at once, not time out";
  EXPECT_EQ(e.code(), ErrorCode::Mismatch);
  const std::string text = e.what();
  EXPECT_NE(text.find("authentication failed: this rank's secret differs from rank 0's"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("STRAIT_SECRET_FILE=" + other.path()), std::string::npos) << text;
  const auto s = wait_for_stats(server, [](const auto& st) { return st.auth_failures == 1; });
  EXPECT_EQ(s.auth_failures, 1U);
  EXPECT_EQ(s.authenticated, 0U);
  expect_serving(server.port(), secret.path(), "after a wrong secret");
}

TEST(StoreAuth, SecretOnOneSideOnlyIsAnErrorEitherWay) {
  const SecretFile secret(kSecret);
  {
    TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
    const Error e = error_of([&] { TcpStore c(client_options(server.port(), "")); });
    EXPECT_EQ(e.code(), ErrorCode::Mismatch);
    EXPECT_NE(std::string(e.what()).find("requires the job's shared secret"), std::string::npos)
        << e.what();
  }
  {
    TcpStoreServer open_server("127.0.0.1", 0, server_options(nullptr));
    const Error e =
        error_of([&] { TcpStore c(client_options(open_server.port(), secret.path())); });
    EXPECT_EQ(e.code(), ErrorCode::Mismatch);
    EXPECT_NE(std::string(e.what()).find("does not ask for one"), std::string::npos) << e.what();
    // Without a secret on either side, behaviour is as before.
    expect_serving(open_server.port(), "", "no secret");
  }
}

TEST(StoreAuth, ReplayedTranscriptIsRejected) {
  const SecretFile secret(kSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
  const Key key = store_auth::auth_key(SharedSecret::from_file(secret.path()));

  // An honest handshake, spoken by hand: this is what an eavesdropper captures.
  const store_auth::Nonce nonce = store_auth::fresh_nonce();
  std::vector<std::uint8_t> captured = hello(nonce);
  {
    const Fd fd = raw_connect(server.port());
    send_bytes(fd, captured);
    const auto ok = read_reply(fd);
    ASSERT_TRUE(ok.has_value());
    ASSERT_EQ(ok->type, wire::Type::HelloOk);
    ASSERT_TRUE(ok->auth);
    EXPECT_TRUE(store_auth::equal(ok->proof,
                                  store_auth::server_proof(key, wire::kVersion, nonce, ok->nonce)));
    const auto proof = auth(store_auth::client_proof(key, wire::kVersion, nonce, ok->nonce));
    send_bytes(fd, proof);
    const auto done = read_reply(fd);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->type, wire::Type::AuthOk);
    captured.insert(captured.end(), proof.begin(), proof.end());
  }
  // The same bytes again: the server's nonce is fresh, so the captured proof is worthless.
  const Fd replay = raw_connect(server.port());
  send_bytes(replay, captured);
  const auto challenge = read_reply(replay);
  ASSERT_TRUE(challenge.has_value());
  EXPECT_EQ(challenge->type, wire::Type::HelloOk);
  expect_rejected(replay);
  const auto s = wait_for_stats(server, [](const auto& st) { return st.auth_failures == 1; });
  EXPECT_EQ(s.auth_failures, 1U);
  EXPECT_EQ(s.authenticated, 1U);
  expect_serving(server.port(), secret.path(), "after a replay");
}

TEST(StoreAuth, ReflectedChallengeIsRejected) {
  const SecretFile secret(kSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));

  // 1. The server's own proof sent back as the client's.
  {
    const Fd fd = raw_connect(server.port());
    send_bytes(fd, hello(store_auth::fresh_nonce()));
    const auto ok = read_reply(fd);
    ASSERT_TRUE(ok.has_value() && ok->auth);
    send_bytes(fd, auth(ok->proof));
    expect_rejected(fd);
  }
  // 2. The server's challenge reflected into a second connection, whose proof is sent back on
  //    the first: the server proves "server | Ns1 | Ns2", never "client | Nc1 | Ns1".
  {
    const Fd first = raw_connect(server.port());
    const store_auth::Nonce nc = store_auth::fresh_nonce();
    send_bytes(first, hello(nc));
    const auto c1 = read_reply(first);
    ASSERT_TRUE(c1.has_value() && c1->auth);
    const Fd second = raw_connect(server.port());
    send_bytes(second, hello(c1->nonce));
    const auto c2 = read_reply(second);
    ASSERT_TRUE(c2.has_value() && c2->auth);
    send_bytes(first, auth(c2->proof));
    expect_rejected(first);
  }
  // 3. A client echoing the server's nonce as its own gets nothing usable either.
  {
    const Fd fd = raw_connect(server.port());
    const store_auth::Nonce nc = store_auth::fresh_nonce();
    send_bytes(fd, hello(nc));
    const auto ok = read_reply(fd);
    ASSERT_TRUE(ok.has_value() && ok->auth);
    store_auth::Proof guess{};
    std::copy(ok->nonce.begin(), ok->nonce.end(), guess.begin());
    send_bytes(fd, auth(guess));
    expect_rejected(fd);
  }
  // Three rejected proofs, and the second connection of case 2, which left without proving.
  const auto s = wait_for_stats(server, [](const auto& st) { return st.auth_failures == 4; });
  EXPECT_EQ(s.auth_failures, 4U);
  EXPECT_EQ(s.authenticated, 0U);
  expect_serving(server.port(), secret.path(), "after reflections");
}

TEST(StoreAuth, NothingIsReadOrWrittenBeforeAuthentication) {
  const SecretFile secret(kSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
  TcpStore rank(client_options(server.port(), secret.path()));
  rank.set("secret-key", std::string("v"));
  {
    // Hello, then a Set and a Get without Auth, all at once.
    const Fd fd = raw_connect(server.port());
    std::vector<std::uint8_t> frames = hello(store_auth::fresh_nonce());
    const auto set = wire::encode(wire::Request{.type = wire::Type::Set,
                                                .id = 1,
                                                .key = "planted",
                                                .value = std::span<const std::uint8_t>{}});
    const auto get =
        wire::encode(wire::Request{.type = wire::Type::Get, .id = 2, .key = "secret-key"});
    frames.insert(frames.end(), set.begin(), set.end());
    frames.insert(frames.end(), get.begin(), get.end());
    send_bytes(fd, frames);
    const auto challenge = read_reply(fd);
    ASSERT_TRUE(challenge.has_value());
    EXPECT_EQ(challenge->type, wire::Type::HelloOk);
    expect_rejected(fd);  // no Value reply came before the Fatal
  }
  {
    // A Get as the very first frame.
    const Fd fd = raw_connect(server.port());
    send_bytes(fd,
               wire::encode(wire::Request{.type = wire::Type::Get, .id = 2, .key = "secret-key"}));
    const auto reply = read_reply(fd);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, wire::Type::Fatal);
    EXPECT_TRUE(closed_by_server(fd));
  }
  EXPECT_EQ(error_of([&] { rank.get("planted", 200ms); }).code(), ErrorCode::Timeout);
}

TEST(SharedSecret, FileChecksNameTheFix) {
  const SecretFile readable(kSecret, fs::perms::owner_read | fs::perms::owner_write |
                                         fs::perms::group_read | fs::perms::others_read);
  Error e = error_of([&] { SharedSecret::from_file(readable.path()); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();

  const SecretFile short_secret("short");
  e = error_of([&] { SharedSecret::from_file(short_secret.path()); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("/dev/urandom"), std::string::npos) << e.what();

  e = error_of([&] { SharedSecret::from_file("/nonexistent/strait.key"); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);

  ASSERT_EQ(setenv("STRAIT_SECRET", "hunter2-hunter2-hunter2", 1), 0);
  e = error_of([&] { SharedSecret::resolve(""); });
  unsetenv("STRAIT_SECRET");
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("STRAIT_SECRET_FILE"), std::string::npos) << e.what();

  // Same secret, same keys; different secret or label, different keys.
  const SecretFile a(kSecret);
  const SecretFile b(kOtherSecret);
  EXPECT_EQ(SharedSecret::from_file(a.path()).derive("x"),
            SharedSecret::from_file(a.path()).derive("x"));
  EXPECT_NE(SharedSecret::from_file(a.path()).derive("x"),
            SharedSecret::from_file(b.path()).derive("x"));
  EXPECT_NE(SharedSecret::from_file(a.path()).derive("x"),
            SharedSecret::from_file(a.path()).derive("y"));
}

// --- hostile clients -------------------------------------------------------------------------

TEST(StoreHostileClients, SilentAndSlowConnectionsAreDroppedAtTheHandshakeDeadline) {
  const SecretFile secret(kSecret);
  TcpStoreServerOptions options = server_options(&secret);
  options.handshake_timeout = 500ms;
  TcpStoreServer server("127.0.0.1", 0, std::move(options));
  constexpr int kSilent = 100;
  std::vector<Fd> silent;
  for (int i = 0; i < kSilent; ++i) silent.push_back(raw_connect(server.port()));
  // A slowloris: a valid Hello, one byte every 50 ms, never finished in time.
  const Fd slow = raw_connect(server.port());
  const auto frame = hello(store_auth::fresh_nonce());
  const auto start = Clock::now();
  bool slow_closed = false;
  for (std::size_t i = 0; i < frame.size() && Clock::now() - start < 5s; ++i) {
    if (::send(slow.get(), &frame[i], 1, MSG_NOSIGNAL) != 1) {
      slow_closed = true;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(slow_closed || closed_by_server(slow));
  for (const Fd& fd : silent) EXPECT_TRUE(closed_by_server(fd));
  const auto s =
      wait_for_stats(server, [](const auto& st) { return st.idle_dropped >= kSilent + 1; });
  EXPECT_EQ(s.idle_dropped, static_cast<std::uint64_t>(kSilent + 1));
  expect_serving(server.port(), secret.path(), "after slow clients");
  // Authenticated ranks are never dropped for being idle.
  TcpStore rank(client_options(server.port(), secret.path()));
  std::this_thread::sleep_for(800ms);
  rank.set("still", std::string("here"));
  EXPECT_EQ(rank.get_string("still", 1s), "here");
}

TEST(StoreHostileClients, AFloodOfConnectionsDoesNotKeepRanksOut) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  // Each flood connection costs this process two descriptors (the server is in it too).
  const int flood = static_cast<int>(std::min<rlim_t>(1000, (lim.rlim_cur - 200) / 2));
  ASSERT_GE(flood, 200) << "RLIMIT_NOFILE is too low for the test";
  const SecretFile secret(kSecret);
  TcpStoreServerOptions options = server_options(&secret);
  options.max_pending = 64;
  TcpStoreServer server("127.0.0.1", 0, std::move(options));
  TcpStore before(client_options(server.port(), secret.path()));
  before.set("k", std::string("v"));
  std::vector<Fd> conns;
  for (int i = 0; i < flood; ++i) {
    conns.push_back(raw_connect(server.port()));
    if (i % 100 == 50) {
      // Ranks joining in the middle of the flood get in, and those already in are served.
      expect_serving(server.port(), secret.path(), "during the flood " + std::to_string(i));
      EXPECT_EQ(before.get_string("k", 1s), "v");
    }
  }
  const auto s = wait_for_stats(server, [&](const auto& st) {
    return st.accepted >= static_cast<std::uint64_t>(flood) + 11 && st.open <= 64 + 1;
  });
  EXPECT_LE(s.open, 64U + 1U) << "unauthenticated connections beyond max_pending stay open";
  EXPECT_GE(s.flood_dropped, static_cast<std::uint64_t>(flood - 64));
  EXPECT_EQ(s.authenticated, 11U);
}

TEST(StoreHostileClients, RandomOversizedAndTruncatedFramesLeaveTheServerServing) {
  const SecretFile secret(kSecret);
  TcpStoreServer server("127.0.0.1", 0, server_options(&secret));
  TcpStore rank(client_options(server.port(), secret.path()));
  rank.set("k", std::string("v"));
  std::mt19937 rng(17);
  constexpr int kClients = 200;
  for (int i = 0; i < kClients; ++i) {
    const Fd fd = raw_connect(server.port());
    std::vector<std::uint8_t> bytes(1 + rng() % 4096);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    switch (i % 4) {
      case 0: break;  // noise
      case 1:         // a header announcing the largest frame the protocol allows, then noise
        bytes[0] = static_cast<std::uint8_t>(wire::kMaxBodyBytes >> 24U);
        bytes[1] = static_cast<std::uint8_t>(wire::kMaxBodyBytes >> 16U);
        bytes[2] = static_cast<std::uint8_t>(wire::kMaxBodyBytes >> 8U);
        bytes[3] = static_cast<std::uint8_t>(wire::kMaxBodyBytes);
        break;
      case 2: {  // a valid Hello, then an Auth cut in the middle
        bytes = hello(store_auth::fresh_nonce());
        const auto a = auth(store_auth::Proof{});
        bytes.insert(bytes.end(), a.begin(), a.begin() + 10);
        break;
      }
      default: {  // a valid Hello, then an oversized Set instead of Auth
        bytes = hello(store_auth::fresh_nonce());
        const std::vector<std::uint8_t> big(1 << 16, 0xab);
        const auto set =
            wire::encode(wire::Request{.type = wire::Type::Set, .id = 1, .key = "k", .value = big});
        bytes.insert(bytes.end(), set.begin(), set.end());
      }
    }
    ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);  // may fail once dropped
    // Every other client disconnects at once, mid-frame; the rest wait to be thrown out.
    if (i % 2 == 1) {
      EXPECT_TRUE(closed_by_server(fd)) << "client " << i;
    }
  }
  const auto s = wait_for_stats(server, [](const auto& st) { return st.open == 1; });
  EXPECT_EQ(s.open, 1U) << "connections of hostile clients linger";
  EXPECT_EQ(s.authenticated, 1U);
  EXPECT_EQ(rank.get_string("k", 1s), "v") << "a hostile Set got through";
  expect_serving(server.port(), secret.path(), "after random frames");
}

}  // namespace
}  // namespace strait::comm
