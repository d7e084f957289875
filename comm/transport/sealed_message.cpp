#include "comm/transport/sealed_message.h"

#include <fmt/format.h>
#include <sodium.h>

#include <array>

namespace strait::comm::sealed {
namespace {

static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kMacBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kKeyBytes);

void put_be(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    p[i] = static_cast<std::uint8_t>(v);
    v >>= 8U;
  }
}

std::uint64_t get_be(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8U) | p[i];
  return v;
}

std::array<std::uint8_t, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES> nonce_of(std::uint64_t seq) {
  std::array<std::uint8_t, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES> n{};
  put_be(n.data() + n.size() - 8, seq, 8);
  return n;
}

}  // namespace

void seal(const Key& key, const Header& h, std::span<const std::uint8_t> plain,
          std::span<std::uint8_t> out) {
  if (out.size() != plain.size() + kOverhead) {
    throw std::logic_error("sealed::seal: the output must be plain.size() + kOverhead bytes");
  }
  std::uint8_t* p = out.data();
  p[0] = kVersion;
  put_be(p + 1, h.sender, 4);
  put_be(p + 5, h.receiver, 4);
  put_be(p + 9, h.tag, 8);
  put_be(p + 17, h.seq, 8);
  const auto nonce = nonce_of(h.seq);
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(p + kHeaderBytes, &written, plain.data(), plain.size(),
                                             p, kHeaderBytes, nullptr, nonce.data(), key.data());
}

Header peek(std::span<const std::uint8_t> m) {
  if (m.size() < kOverhead) {
    throw OpenError(Failure::Malformed,
                    fmt::format("a sealed message of {} bytes is shorter than its {}-byte "
                                "envelope",
                                m.size(), kOverhead));
  }
  if (m[0] != kVersion) {
    throw OpenError(Failure::Malformed,
                    fmt::format("a sealed message of version {} (this build speaks {}): is every "
                                "rank running the same strait build, with the same STRAIT_ENCRYPT?",
                                m[0], kVersion));
  }
  return Header{.sender = static_cast<std::uint32_t>(get_be(m.data() + 1, 4)),
                .receiver = static_cast<std::uint32_t>(get_be(m.data() + 5, 4)),
                .tag = get_be(m.data() + 9, 8),
                .seq = get_be(m.data() + 17, 8)};
}

Header open(const Key& key, int sender, int receiver, std::span<const std::uint8_t> m,
            std::span<std::uint8_t> plain) {
  const Header h = peek(m);
  if (h.sender != static_cast<std::uint32_t>(sender) ||
      h.receiver != static_cast<std::uint32_t>(receiver)) {
    throw OpenError(Failure::WrongPeer,
                    fmt::format("a sealed message that arrived from rank {} at rank {} was "
                                "sealed by rank {} for rank {}: misdirected or injected",
                                sender, receiver, h.sender, h.receiver));
  }
  const std::size_t len = m.size() - kOverhead;
  if (plain.size() < len) throw std::logic_error("sealed::open: the output is too small");
  const auto nonce = nonce_of(h.seq);
  unsigned long long written = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          plain.data(), &written, nullptr, m.data() + kHeaderBytes, m.size() - kHeaderBytes,
          m.data(), kHeaderBytes, nonce.data(), key.data()) != 0) {
    throw OpenError(Failure::Forged,
                    fmt::format("a sealed message from rank {} (sequence {}) failed "
                                "authentication: it was altered in transit, or rank {} holds a "
                                "different secret or session",
                                sender, h.seq, sender));
  }
  return h;
}

void ReplayWindow::accept(int peer, std::uint64_t tag, std::uint64_t seq) {
  if (any_) {
    if (seq <= top_) {
      if (top_ - seq >= kWindow || seen_.test(seq % kWindow)) {
        throw OpenError(Failure::Replayed,
                        fmt::format("a sealed message from rank {} repeats sequence number {} "
                                    "(the highest seen is {}): a replay",
                                    peer, seq, top_));
      }
    }
    const auto it = last_by_tag_.find(tag);
    if (it != last_by_tag_.end() && seq < it->second) {
      throw OpenError(Failure::Reordered,
                      fmt::format("a sealed message from rank {} with sequence number {} arrived "
                                  "after number {} of the same stream (tag 0x{:x}): reordered",
                                  peer, seq, it->second, tag));
    }
    if (seq > top_) {
      if (seq - top_ >= kWindow) {
        seen_.reset();
      } else {
        for (std::uint64_t s = top_ + 1; s <= seq; ++s) seen_.reset(s % kWindow);
      }
      top_ = seq;
    }
  } else {
    any_ = true;
    top_ = seq;
  }
  seen_.set(seq % kWindow);
  last_by_tag_[tag] = seq;
  if (last_by_tag_.size() > 4 * 4096) {
    // Tags whose last message fell out of the window can only see replays, which the window
    // already refuses.
    std::erase_if(last_by_tag_, [&](const auto& kv) { return top_ - kv.second >= kWindow; });
  }
}

}  // namespace strait::comm::sealed
