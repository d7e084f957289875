#include "comm/bootstrap/tcp_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/prefix_store.h"
#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/tcp_store_wire.h"
#include "core/error.h"
#include "tests/common/raw_socket.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::raw_connect;
using test::read_until_closed;
using test::send_bytes;

TcpStoreOptions server_options(std::uint16_t port = 0) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.is_server = true;
  o.connect_timeout = 10s;
  o.timeout = 10s;
  return o;
}

TcpStoreOptions client_options(std::uint16_t port) {
  TcpStoreOptions o = server_options(port);
  o.is_server = false;
  return o;
}

Bytes random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

// Runs f and returns the strait::Error it throws; fails the test when it throws nothing.
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

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(TcpStore, SetGetBinaryValues) {
  TcpStore store(server_options());
  Bytes all_bytes(256);
  std::iota(all_bytes.begin(), all_bytes.end(), std::uint8_t{0});
  const Bytes big = random_bytes(std::size_t{1} << 20U, 1);
  const std::string binary_key("k\0ey\xff", 5);

  store.set("all", all_bytes);
  store.set("empty", Bytes{});
  store.set("big", big);
  store.set(binary_key, Bytes{1, 2, 3});
  EXPECT_EQ(store.get("all", 1s), all_bytes);
  EXPECT_EQ(store.get("empty", 1s), Bytes{});
  EXPECT_EQ(store.get("big", 1s), big);
  EXPECT_EQ(store.get(binary_key, 1s), (Bytes{1, 2, 3}));

  store.set("all", std::string("overwritten"));
  EXPECT_EQ(store.get_string("all", 1s), "overwritten");

  // A second client sees what the first wrote.
  TcpStore other(client_options(store.port()));
  EXPECT_EQ(other.get("big", 1s), big);
}

TEST(TcpStore, GetBlocksUntilAnotherThreadSetsTheKey) {
  TcpStore store(server_options());
  TcpStore setter(client_options(store.port()));
  std::atomic<bool> setting{false};
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    setting = true;
    setter.set("late", std::string("value"));
  });
  EXPECT_EQ(store.get_string("late", 30s), "value");
  EXPECT_TRUE(setting.load());  // get() did not return before the set began
  t.join();
}

TEST(TcpStore, ParkedGetDoesNotBlockOtherThreadsOfTheSameClient) {
  TcpStore server(server_options());
  TcpStore store(client_options(server.port()));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    store.set("shared", std::string("from the same client"));
  });
  EXPECT_EQ(store.get_string("shared", 30s), "from the same client");
  t.join();
}

TEST(TcpStore, WaitReturnsOnceEveryKeyExists) {
  TcpStore store(server_options());
  TcpStore setter(client_options(store.port()));
  std::atomic<bool> last_started{false};
  std::thread t([&] {
    setter.set("a", std::string("1"));
    std::this_thread::sleep_for(50ms);
    setter.set("b", std::string("2"));
    std::this_thread::sleep_for(50ms);
    last_started = true;
    setter.set("c", std::string("3"));
  });
  store.wait({"a", "b", "c", "a"}, 30s);
  EXPECT_TRUE(last_started.load());
  EXPECT_EQ(store.get_string("c", 0ms), "3");  // present: a zero timeout still finds it
  t.join();
  store.wait({}, 0ms);  // nothing to wait for
}

TEST(TcpStore, TimeoutsNameTheMissingKeysAndReturnPromptly) {
  TcpStore store(server_options());
  const std::string where = net::endpoint("127.0.0.1", store.port());

  auto start = Clock::now();
  const Error get_error = error_of([&] { store.get("never-set", 300ms); });
  const double get_elapsed = seconds_since(start);
  EXPECT_EQ(get_error.code(), ErrorCode::Timeout);
  EXPECT_NE(std::string(get_error.what()).find("never-set"), std::string::npos) << get_error.what();
  EXPECT_NE(std::string(get_error.what()).find(where), std::string::npos) << get_error.what();
  EXPECT_GE(get_elapsed, 0.3);
  EXPECT_LT(get_elapsed, 10.0);

  store.set("present", std::string("x"));
  start = Clock::now();
  const Error wait_error = error_of([&] { store.wait({"present", "gone-1", "gone-2"}, 200ms); });
  EXPECT_EQ(wait_error.code(), ErrorCode::Timeout);
  const std::string msg = wait_error.what();
  EXPECT_NE(msg.find("keys \"gone-1\", \"gone-2\" (2 of 3 still missing)"), std::string::npos)
      << msg;
  EXPECT_GE(seconds_since(start), 0.2);
  EXPECT_LT(seconds_since(start), 10.0);

  // The cancelled requests leave the connection usable, and a late set of a key whose get timed
  // out does not leak a stale answer into later calls.
  store.set("never-set", std::string("now set"));
  store.set("other", std::string("other value"));
  EXPECT_EQ(store.get_string("other", 1s), "other value");
  EXPECT_EQ(store.get_string("never-set", 1s), "now set");
}

TEST(TcpStore, ConcurrentAddsFromManyClientsAndThreadsAreAtomic) {
  TcpStore server(server_options());
  constexpr int kClients = 4;
  constexpr int kThreadsPerClient = 4;
  constexpr int kAddsPerThread = 200;
  std::vector<std::unique_ptr<TcpStore>> clients;
  clients.reserve(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<TcpStore>(client_options(server.port())));
  }
  std::vector<std::vector<std::int64_t>> seen(kClients * kThreadsPerClient);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    for (int t = 0; t < kThreadsPerClient; ++t) {
      const int slot = c * kThreadsPerClient + t;
      threads.emplace_back([&, c, slot] {
        for (int i = 0; i < kAddsPerThread; ++i) seen[slot].push_back(clients[c]->add("n", 1));
      });
    }
  }
  for (auto& t : threads) t.join();

  // Every add returned a distinct value: together exactly 1..total.
  std::vector<std::int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  const std::int64_t total = kClients * kThreadsPerClient * kAddsPerThread;
  ASSERT_EQ(static_cast<std::int64_t>(all.size()), total);
  for (std::int64_t i = 0; i < total; ++i) ASSERT_EQ(all[static_cast<std::size_t>(i)], i + 1);
  EXPECT_EQ(server.get_string("n", 1s), std::to_string(total));
  EXPECT_EQ(server.add("n", -total - 5), -5);
  EXPECT_EQ(server.add("fresh", 0), 0);
}

TEST(TcpStore, AddRejectsNonCountersAndOverflow) {
  TcpStore store(server_options());
  store.set("text", std::string("12abc"));
  const Error not_counter = error_of([&] { store.add("text", 1); });
  EXPECT_EQ(not_counter.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(std::string(not_counter.what()).find("text"), std::string::npos);

  store.add("big", std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(error_of([&] { store.add("big", 1); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(store.add("big", -1), std::numeric_limits<std::int64_t>::max() - 1);
}

TEST(TcpStore, RejectsBadKeysAndValuesBeforeSending) {
  TcpStore store(server_options());
  EXPECT_EQ(error_of([&] { store.set("", std::string("x")); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { store.get(std::string(wire::kMaxKeyBytes + 1, 'k'), 1s); }).code(),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { store.set("huge", Bytes(wire::kMaxValueBytes + 1)); }).code(),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { store.get("k", -1ms); }).code(), ErrorCode::InvalidArgument);
  store.set(std::string(wire::kMaxKeyBytes, 'k'), std::string("longest key"));
  EXPECT_EQ(store.get_string(std::string(wire::kMaxKeyBytes, 'k'), 1s), "longest key");
}

TEST(TcpStore, ManyClientsRendezvous) {
  TcpStore server(server_options());
  constexpr int kRanks = 48;
  std::vector<std::string> keys;
  keys.reserve(kRanks);
  for (int r = 0; r < kRanks; ++r) keys.push_back("rank/" + std::to_string(r));
  std::vector<std::string> results(kRanks);
  std::vector<std::thread> threads;
  threads.reserve(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      TcpStore store(client_options(server.port()));
      store.set(keys[static_cast<std::size_t>(r)], std::to_string(r * r));
      store.wait(keys, 30s);
      std::int64_t sum = 0;
      for (int p = 0; p < kRanks; ++p) {
        sum += std::stoll(store.get_string(keys[static_cast<std::size_t>(p)], 1s));
      }
      results[static_cast<std::size_t>(r)] = std::to_string(sum);
    });
  }
  for (auto& t : threads) t.join();
  std::int64_t expected = 0;
  for (int p = 0; p < kRanks; ++p) expected += p * p;
  for (const auto& r : results) EXPECT_EQ(r, std::to_string(expected));
}

TEST(PrefixStore, IsolatesNamespaces) {
  TcpStore store(server_options());
  PrefixStore a("job1", store);
  PrefixStore b("job2", store);
  a.set("k", std::string("from a"));
  b.set("k", std::string("from b"));
  EXPECT_EQ(a.get_string("k", 1s), "from a");
  EXPECT_EQ(b.get_string("k", 1s), "from b");
  EXPECT_EQ(store.get_string("job1/k", 1s), "from a");

  a.set("only-a", std::string("x"));
  EXPECT_EQ(error_of([&] { b.get("only-a", 100ms); }).code(), ErrorCode::Timeout);
  EXPECT_EQ(a.add("count", 2), 2);
  EXPECT_EQ(b.add("count", 5), 5);
  EXPECT_EQ(a.add("count", 1), 3);
  a.wait({"k", "only-a"}, 1s);

  PrefixStore nested("sub", a);
  nested.set("k", std::string("nested"));
  EXPECT_EQ(store.get_string("job1/sub/k", 1s), "nested");
  EXPECT_EQ(error_of([&] { PrefixStore bad("", store); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { a.set("", std::string("x")); }).code(), ErrorCode::InvalidArgument);
}

TEST(TcpStore, ClientMayStartBeforeTheServer) {
  const std::uint16_t port = net::pick_free_port("127.0.0.1");
  std::string got;
  std::thread client([&] {
    TcpStore store(client_options(port));  // retries until the server below listens
    store.set("early", std::string("bird"));
    got = store.get_string("from-server", 10s);
  });
  std::this_thread::sleep_for(300ms);
  TcpStore server(server_options(port));
  EXPECT_EQ(server.get_string("early", 10s), "bird");
  server.set("from-server", std::string("hello"));
  client.join();
  EXPECT_EQ(got, "hello");
}

TEST(TcpStore, UnreachableServerIsAClearErrorAfterTheConnectTimeout) {
  const std::uint16_t port = net::pick_free_port("127.0.0.1");
  TcpStoreOptions o = client_options(port);
  o.connect_timeout = 300ms;
  const auto start = Clock::now();
  const Error e = error_of([&] { TcpStore store(o); });
  EXPECT_EQ(e.code(), ErrorCode::PeerLost);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("could not reach the strait store at 127.0.0.1:" + std::to_string(port) +
                     " after 0.3s"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << msg;
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(TcpStore, APortInUseIsReportedByTheServersConstructor) {
  TcpStore first(server_options());
  const Error e = error_of([&] { TcpStore second(server_options(first.port())); });
  EXPECT_EQ(e.code(), ErrorCode::Io);
  EXPECT_NE(std::string(e.what()).find("pick another MASTER_PORT"), std::string::npos) << e.what();
  TcpStoreOptions no_port = client_options(0);
  EXPECT_EQ(error_of([&] { TcpStore client(no_port); }).code(), ErrorCode::InvalidArgument);
}

TEST(TcpStore, ServerShutdownWakesParkedClientsWithPeerLost) {
  auto server = std::make_unique<TcpStore>(server_options());
  TcpStore client(client_options(server->port()));
  client.set("k", std::string("v"));
  std::atomic<int> code{-1};
  const auto start = Clock::now();
  std::thread t([&] {
    const Error e = error_of([&] { client.get("never", 60s); });
    code = static_cast<int>(e.code());
  });
  std::this_thread::sleep_for(200ms);
  server.reset();
  t.join();
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::PeerLost));
  EXPECT_LT(seconds_since(start), 30.0);
  // Every later call fails the same way, at once.
  EXPECT_EQ(error_of([&] { client.set("k", std::string("v")); }).code(), ErrorCode::PeerLost);
  EXPECT_EQ(error_of([&] { client.add("n", 1); }).code(), ErrorCode::PeerLost);
}

std::vector<std::uint8_t> hello(std::uint16_t version = wire::kVersion) {
  const std::array<std::uint8_t, wire::kAuthBytes> nonce{};
  return wire::Writer(wire::Type::Hello, 0).u32(wire::kMagic).u16(version).raw(nonce).finish();
}

TEST(TcpStore, GarbageFromOneClientDoesNotHurtTheServerOrOthers) {
  TcpStore store(server_options());
  store.set("before", std::string("ok"));

  std::vector<std::vector<std::uint8_t>> attacks;
  auto noise = random_bytes(4096, 7);  // a well-framed body of random bytes
  noise[0] = 0;
  noise[1] = 0;
  noise[2] = 0x0f;
  noise[3] = 0xfc;
  noise[4] = 0x7e;  // not Hello
  attacks.push_back(noise);
  attacks.push_back({0xff, 0xff, 0xff, 0xff, 1, 2, 3});  // absurd frame length
  attacks.push_back({0, 0, 0, 0});                       // frame shorter than a header
  auto unknown = hello();
  const auto bad = wire::Writer(static_cast<wire::Type>(0x7f), 1).u32(5).finish();
  unknown.insert(unknown.end(), bad.begin(), bad.end());
  attacks.push_back(unknown);  // unknown command after Hello
  auto lying = hello();
  const auto set = wire::Writer(wire::Type::Set, 2).u32(1).u8('k').u32(1U << 30U).finish();
  lying.insert(lying.end(), set.begin(), set.end());
  attacks.push_back(lying);  // value length past the frame
  attacks.push_back(wire::Writer(wire::Type::Get, 3).str("k").finish());  // no Hello first

  for (std::size_t i = 0; i < attacks.size(); ++i) {
    const Fd fd = raw_connect(store.port());
    send_bytes(fd, attacks[i]);
    bool closed = false;
    read_until_closed(fd, closed);
    EXPECT_TRUE(closed) << "attack " << i << " did not get the connection dropped";
    // The server is still serving the well-behaved client.
    EXPECT_EQ(store.get_string("before", 1s), "ok") << "after attack " << i;
    EXPECT_EQ(store.add("attacks survived", 1), static_cast<std::int64_t>(i + 1));
  }

  // A truncated frame followed by a close does not leave anything behind either.
  {
    const Fd fd = raw_connect(store.port());
    auto partial = hello();
    partial.insert(partial.end(), {0, 0, 0, 100, 3, 0, 0});
    send_bytes(fd, partial);
  }
  TcpStore late(client_options(store.port()));
  EXPECT_EQ(late.get_string("before", 1s), "ok");
}

TEST(TcpStore, VersionMismatchIsReportedToTheClient) {
  TcpStore store(server_options());
  const Fd fd = raw_connect(store.port());
  send_bytes(fd, hello(wire::kVersion + 1));
  bool closed = false;
  const auto got = read_until_closed(fd, closed);
  EXPECT_TRUE(closed);
  ASSERT_GE(got.size(), wire::kHeaderBytes);
  const std::size_t len =
      wire::body_length(std::span<const std::uint8_t, wire::kHeaderBytes>(got.data(), 4));
  ASSERT_EQ(got.size(), wire::kHeaderBytes + len);
  wire::Reader r({got.data() + wire::kHeaderBytes, len});
  EXPECT_EQ(r.type(), wire::Type::Fatal);
  const auto text = r.bytes(1 << 16);
  const std::string message(text.begin(), text.end());
  EXPECT_NE(message.find("version"), std::string::npos) << message;
}

TEST(TcpStore, ClientThatDoesNotReadItsRepliesDoesNotStallOthers) {
  TcpStore store(server_options());
  const Bytes value = random_bytes(std::size_t{1} << 20U, 3);
  store.set("v", value);
  const Fd fd = raw_connect(store.port());
  std::vector<std::uint8_t> requests = hello();
  constexpr int kGets = 40;  // 40 MiB of replies, far more than the socket buffers hold
  for (int i = 0; i < kGets; ++i) {
    const auto get =
        wire::Writer(wire::Type::Get, static_cast<std::uint64_t>(i + 1)).str("v").finish();
    requests.insert(requests.end(), get.begin(), get.end());
  }
  send_bytes(fd, requests);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(store.add("others still served", 1), 1);
  EXPECT_EQ(store.get("v", 1s), value);

  // When it finally reads, every reply is there, intact and in order.
  std::vector<std::uint8_t> buf;
  int replies = 0;
  const auto deadline = Clock::now() + 30s;
  while (replies < kGets + 1 && Clock::now() < deadline) {
    std::uint8_t chunk[65536];
    const ssize_t n = recv(fd.get(), chunk, sizeof chunk, 0);
    ASSERT_GT(n, 0);
    buf.insert(buf.end(), chunk, chunk + n);
    std::size_t off = 0;
    while (buf.size() - off >= wire::kHeaderBytes) {
      const std::size_t len =
          wire::body_length(std::span<const std::uint8_t, wire::kHeaderBytes>(buf.data() + off, 4));
      if (buf.size() - off - wire::kHeaderBytes < len) break;
      wire::Reader r({buf.data() + off + wire::kHeaderBytes, len});
      if (replies == 0) {
        EXPECT_EQ(r.type(), wire::Type::HelloOk);
      } else {
        EXPECT_EQ(r.type(), wire::Type::Value);
        EXPECT_EQ(r.id(), static_cast<std::uint64_t>(replies));
        const auto v = r.bytes(wire::kMaxValueBytes);
        EXPECT_TRUE(std::equal(v.begin(), v.end(), value.begin(), value.end()));
      }
      ++replies;
      off += wire::kHeaderBytes + len;
    }
    buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(off));
  }
  EXPECT_EQ(replies, kGets + 1);
}

TEST(Wire, RoundTripsAndRejectsMalformedFrames) {
  const std::vector<std::uint8_t> frame =
      wire::Writer(wire::Type::Add, 0x0102030405060708ULL).str("key").i64(-42).u16(0xbeef).finish();
  ASSERT_EQ(frame.size(), 4U + 1 + 8 + 4 + 3 + 8 + 2);
  const std::size_t len = wire::body_length(std::span<const std::uint8_t, 4>(frame.data(), 4));
  EXPECT_EQ(len, frame.size() - 4);
  wire::Reader r({frame.data() + 4, len});
  EXPECT_EQ(r.type(), wire::Type::Add);
  EXPECT_EQ(r.id(), 0x0102030405060708ULL);
  EXPECT_EQ(r.key(), "key");
  EXPECT_EQ(r.i64(), -42);
  EXPECT_EQ(r.u16(), 0xbeef);
  r.expect_end();
  EXPECT_THROW(r.u8(), wire::ProtocolError);

  // Truncated body, a string longer than what is left, trailing bytes, bad lengths.
  EXPECT_THROW(wire::Reader(std::span<const std::uint8_t>(frame.data() + 4, 5)),
               wire::ProtocolError);
  wire::Reader short_string({frame.data() + 4, 9 + 4 + 2});
  EXPECT_THROW(short_string.key(), wire::ProtocolError);
  wire::Reader trailing({frame.data() + 4, len});
  trailing.key();
  EXPECT_THROW(trailing.expect_end(), wire::ProtocolError);
  const std::uint8_t zero[4] = {0, 0, 0, 0};
  const std::uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_THROW(wire::body_length(std::span<const std::uint8_t, 4>(zero, 4)), wire::ProtocolError);
  EXPECT_THROW(wire::body_length(std::span<const std::uint8_t, 4>(huge, 4)), wire::ProtocolError);
  const auto empty_key = wire::Writer(wire::Type::Get, 1).str("").finish();
  wire::Reader ek({empty_key.data() + 4, empty_key.size() - 4});
  EXPECT_THROW(ek.key(), wire::ProtocolError);
}

}  // namespace
}  // namespace strait::comm
