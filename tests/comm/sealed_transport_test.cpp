// Sealed links (comm/transport/sealed_transport.h): the message format and replay window on their
// own, then real UCX transports (two threads of this process) where one side is honest and the
// other an adversary on the wire that injects tampered, replayed, reordered and misdirected
// envelopes, and finally a Communicator with every link sealed against a double-precision sum.
#include "comm/transport/sealed_transport.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/security/secret.h"
#include "comm/transport/link_keys.h"
#include "comm/transport/sealed_message.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"
#include "tests/comm/comm_test_ranks.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Bytes8 = std::vector<std::uint8_t>;

const std::string kSecretText = "sealed-link-test-secret-0123456789";

SharedSecret test_secret(const std::string& text = kSecretText) {
  return SharedSecret::from_bytes({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()},
                                  "test secret");
}

Bytes8 random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes8 b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

Bytes8 sealed_bytes(const Key& key, const sealed::Header& h, const Bytes8& plain) {
  Bytes8 out(plain.size() + sealed::kOverhead);
  sealed::seal(key, h, plain, out);
  return out;
}

sealed::Failure failure_of(const Key& key, int sender, int receiver, const Bytes8& message) {
  Bytes8 plain(message.size());
  try {
    sealed::open(key, sender, receiver, message, plain);
  } catch (const sealed::OpenError& e) {
    return e.failure();
  }
  ADD_FAILURE() << "the message opened";
  return sealed::Failure::Malformed;
}

TEST(SealedMessage, RoundTripsAndEveryFlippedBitIsRefused) {
  const Key key = test_secret().derive("k");
  const Bytes8 plain = random_bytes(100, 1);
  const sealed::Header h{.sender = 3, .receiver = 5, .tag = 0xabcdef, .seq = 42};
  const Bytes8 m = sealed_bytes(key, h, plain);
  ASSERT_EQ(m.size(), plain.size() + 41);
  // Sealed means unreadable: no 8-byte run of the plaintext survives in the envelope.
  for (std::size_t i = 0; i + 8 <= plain.size(); ++i) {
    EXPECT_EQ(std::search(m.begin(), m.end(), plain.begin() + static_cast<std::ptrdiff_t>(i),
                          plain.begin() + static_cast<std::ptrdiff_t>(i + 8)),
              m.end());
  }
  Bytes8 out(plain.size());
  const sealed::Header got = sealed::open(key, 3, 5, m, out);
  EXPECT_EQ(out, plain);
  EXPECT_EQ(got.tag, h.tag);
  EXPECT_EQ(got.seq, h.seq);

  for (std::size_t bit = 0; bit < m.size() * 8; ++bit) {
    Bytes8 bad = m;
    bad[bit / 8] ^= static_cast<std::uint8_t>(1U << (bit % 8));
    const sealed::Failure f = failure_of(key, 3, 5, bad);
    if (bit < 8) {
      EXPECT_EQ(f, sealed::Failure::Malformed) << "bit " << bit;  // the version
    } else if (bit < 8 + 64) {
      EXPECT_EQ(f, sealed::Failure::WrongPeer) << "bit " << bit;  // sender, receiver
    } else {
      EXPECT_EQ(f, sealed::Failure::Forged) << "bit " << bit;  // tag, seq, ciphertext, MAC
    }
  }
  // Another key (another secret, session or direction), a truncated envelope, the wrong peer.
  EXPECT_EQ(failure_of(test_secret("another-secret-0123456789").derive("k"), 3, 5, m),
            sealed::Failure::Forged);
  EXPECT_EQ(failure_of(key, 3, 5, Bytes8(m.begin(), m.begin() + 40)), sealed::Failure::Malformed);
  EXPECT_EQ(failure_of(key, 3, 6, m), sealed::Failure::WrongPeer);
  EXPECT_EQ(failure_of(key, 4, 5, m), sealed::Failure::WrongPeer);
  // An empty message seals too.
  const Bytes8 empty = sealed_bytes(key, h, {});
  Bytes8 none;
  EXPECT_NO_THROW(sealed::open(key, 3, 5, empty, none));
}

TEST(SealedMessage, ReplayWindowRefusesRepeatsOldAndReorderedWithinATag) {
  sealed::ReplayWindow w;
  const auto refused = [&](std::uint64_t tag, std::uint64_t seq) -> std::optional<sealed::Failure> {
    try {
      w.accept(7, tag, seq);
    } catch (const sealed::OpenError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 7"), std::string::npos) << e.what();
      return e.failure();
    }
    return std::nullopt;
  };
  EXPECT_FALSE(refused(1, 0));
  EXPECT_FALSE(refused(2, 2));  // another tag may run ahead ...
  EXPECT_FALSE(refused(1, 1));  // ... and this one catch up
  EXPECT_EQ(refused(1, 1), sealed::Failure::Replayed);
  EXPECT_EQ(refused(2, 2), sealed::Failure::Replayed);
  EXPECT_FALSE(refused(1, 5));
  EXPECT_EQ(refused(1, 4), sealed::Failure::Reordered);
  EXPECT_FALSE(refused(3, 4));  // the same number on another tag is a different, unseen message
  EXPECT_FALSE(refused(4, 3));
  const std::uint64_t far = 10 + sealed::ReplayWindow::kWindow;
  EXPECT_FALSE(refused(5, far));
  EXPECT_EQ(refused(6, 6), sealed::Failure::Replayed);  // older than the window: can't be told
  EXPECT_FALSE(refused(6, far - 1));
}

// Drives t until r completes (or 10 s pass, a test failure).
void wait_done(Transport& t, const RequestPtr& r) {
  const auto deadline = Clock::now() + 10s;
  while (r->pending() && Clock::now() < deadline) t.progress();
  ASSERT_FALSE(r->pending()) << "request did not complete in 10 s";
}

TEST(SealedTransport, HonestPeersExchangeSealedBytes) {
  HashStore store;
  const std::vector<std::size_t> sizes = {0, 1, 1000, std::size_t{1} << 20U};
  std::jthread sender([&] {
    SealedTransport t(std::make_unique<UcxTransport>(store, "u", 0, 2, 10s), test_secret(), store,
                      "s", {false, true}, 10s);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const Bytes8 data = random_bytes(sizes[i], static_cast<unsigned>(i));
      wait_done(t, t.isend(1, 100 + i, data.data(), data.size()));
    }
    store.get("received", 20s);  // keep the endpoints until rank 1 has everything
  });
  {
    SealedTransport t(std::make_unique<UcxTransport>(store, "u", 1, 2, 10s), test_secret(), store,
                      "s", {true, false}, 10s);
    EXPECT_TRUE(t.sealed(0));
    EXPECT_FALSE(t.sealed(1));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      Bytes8 got(sizes[i] + 7, 0xee);
      const RequestPtr r = t.irecv(0, 100 + i, got.data(), got.size());
      wait_done(t, r);
      ASSERT_EQ(r->state, TransportRequest::State::Done) << r->error;
      EXPECT_EQ(r->bytes, sizes[i]);
      got.resize(r->bytes);
      EXPECT_EQ(got, random_bytes(sizes[i], static_cast<unsigned>(i))) << "size " << sizes[i];
    }
    store.set("received", std::string("1"));
    sender.join();
  }
}

// Rank 0 is the adversary: a plain UCX transport that knows the secret's derivation only as far as
// the test gives it, and puts chosen envelopes on the wire. Rank 1 is honest and sealed.
TEST(SealedTransport, TamperedReplayedReorderedAndMisdirectedMessagesAreNamedErrors) {
  HashStore store;
  struct Case {
    std::string name;
    Tag tag;
    std::string expect;  // "" for delivered; else a phrase of the error
  };
  const std::vector<Case> cases = {
      {"honest", 7, ""},
      {"one bit flipped", 7, "failed authentication"},
      {"replay of the first", 7, "repeats sequence number"},
      {"honest, later number", 7, ""},
      {"earlier number on the same tag", 7, "reordered"},
      {"sealed for rank 2", 7, "sealed by rank 0 for rank 2"},
      {"another secret", 7, "failed authentication"},
      {"honest, another tag", 9, ""},
  };
  std::jthread adversary([&] {
    UcxTransport raw(store, "u", 0, 3, 10s);
    SessionNonce mine{};
    random_fill(mine);
    store.set("s/session/0", Bytes(mine.begin(), mine.end()));
    const Bytes theirs_bytes = store.get("s/session/1", 10s);
    SessionNonce theirs{};
    std::copy(theirs_bytes.begin(), theirs_bytes.end(), theirs.begin());
    const Key key = link_key(test_secret(), mine, theirs, 0, 1);
    const Key wrong = link_key(test_secret("another-secret-0123456789"), mine, theirs, 0, 1);
    const Bytes8 hello = {'h', 'e', 'l', 'l', 'o'};
    const auto env = [&](const Key& k, std::uint32_t to, Tag tag, std::uint64_t seq) {
      return sealed_bytes(k, {.sender = 0, .receiver = to, .tag = tag, .seq = seq}, hello);
    };
    Bytes8 flipped = env(key, 1, 7, 1);
    flipped[sealed::kHeaderBytes + 2] ^= 0x10;
    const std::vector<Bytes8> wire = {
        env(key, 1, 7, 0), flipped,           env(key, 1, 7, 0),   env(key, 1, 7, 5),
        env(key, 1, 7, 4), env(key, 2, 7, 6), env(wrong, 1, 7, 7), env(key, 1, 9, 8),
    };
    for (std::size_t i = 0; i < wire.size(); ++i) {
      wait_done(raw, raw.isend(1, cases[i].tag, wire[i].data(), wire[i].size()));
    }
    store.set("done/0", std::string("1"));
    store.get("done/1", 20s);
    // Rank 2 connects to this transport while it constructs: it must not be gone before then (a
    // starved bystander met a destroyed peer's shared memory on a loaded machine).
    store.get("ready/2", 20s);
  });
  std::jthread bystander([&] {
    UcxTransport idle(store, "u", 2, 3, 10s);
    store.set("ready/2", std::string("1"));
    store.get("done/1", 20s);
  });
  {
    SealedTransport t(std::make_unique<UcxTransport>(store, "u", 1, 3, 10s), test_secret(), store,
                      "s", {true, false, false}, 10s);
    for (const Case& c : cases) {
      Bytes8 got(64, 0xee);
      const RequestPtr r = t.irecv(0, c.tag, got.data(), got.size());
      wait_done(t, r);
      if (c.expect.empty()) {
        ASSERT_EQ(r->state, TransportRequest::State::Done) << c.name << ": " << r->error;
        EXPECT_EQ(Bytes8(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(r->bytes)),
                  (Bytes8{'h', 'e', 'l', 'l', 'o'}))
            << c.name;
      } else {
        ASSERT_EQ(r->state, TransportRequest::State::Failed) << c.name << " was delivered";
        EXPECT_NE(r->error.find(c.expect), std::string::npos) << c.name << ": " << r->error;
        EXPECT_NE(r->error.find("rank 0"), std::string::npos) << c.name << ": " << r->error;
        // Nothing unauthenticated reaches the caller's buffer.
        EXPECT_NE(Bytes8(got.begin(), got.begin() + 5), (Bytes8{'h', 'e', 'l', 'l', 'o'}))
            << c.name;
      }
    }
    store.get("done/0", 20s);
    store.set("done/1", std::string("1"));
    store.get("ready/2", 20s);  // as the adversary: rank 2 has connected to us
  }
}

TEST(SealedTransport, EncryptSettingsAreCheckedAndCommunicatorsRunSealed) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "strait_seal_XXXXXX").string();
  const fs::path dir = mkdtemp(tmpl.data());
  const std::string key_file = (dir / "job.key").string();
  std::ofstream(key_file) << kSecretText;
  fs::permissions(key_file, fs::perms::owner_read | fs::perms::owner_write);

  EXPECT_THROW(parse_encrypt_mode("sometimes", "STRAIT_ENCRYPT"), Error);
  constexpr int kWorld = 4;
  // Every link sealed; the ring and recursive doubling run over it. Values are small integers, so
  // the float sum is exact and equals the double-precision reference.
  testing::run_ranks_with(
      kWorld,
      [&](int) {
        CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
        o.secret_file = key_file;
        o.encrypt = "all";
        return o;
      },
      [&](Communicator& comm) {
        for (const std::size_t n : {std::size_t{3}, std::size_t{1} << 18U}) {
          std::vector<float> v(n);
          for (std::size_t i = 0; i < n; ++i) {
            v[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(comm.rank())) % 13);
          }
          comm.allreduce(v.data(), v.data(), n, kernels::DType::F32, kernels::ReduceOp::Sum);
          for (std::size_t i = 0; i < n; i += 997) {
            double want = 0;
            for (int r = 0; r < kWorld; ++r) {
              want += static_cast<double>((i * 7 + static_cast<std::size_t>(r)) % 13);
            }
            ASSERT_EQ(static_cast<double>(v[i]), want) << "element " << i;
          }
        }
      });

  // A rank whose setting differs fails with Mismatch naming both.
  std::vector<std::string> errors(2);
  auto store = std::make_shared<HashStore>();
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        CommOptions o = testing::options_with_timeout(5s);
        o.secret_file = key_file;
        o.encrypt = r == 0 ? "all" : "off";
        try {
          Communicator::create(store, r, 2, o);
        } catch (const Error& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
  }
  EXPECT_NE(errors[1].find("STRAIT_ENCRYPT differs"), std::string::npos) << errors[1];
  // Rank 0, which seals, learns it from rank 1's setting, not from a timeout.
  EXPECT_NE(errors[0].find("STRAIT_ENCRYPT differs"), std::string::npos) << errors[0];
  // Sealing without a secret is refused up front.
  CommOptions no_secret = testing::options_with_timeout(5s);
  no_secret.secret_file = "";
  no_secret.encrypt = "all";
  HashStore lone;
  EXPECT_THROW(
      {
        auto unused = seal_links(std::make_unique<UcxTransport>(lone, "u", 0, 1, 5s),
                                 no_secret.secret_file, no_secret.encrypt, {}, lone, "s", 5s);
      },
      Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strait::comm
