// Sealed messages: the wire format of comm/transport/sealed_transport.h, and the receiver's replay
// window. The only code that parses sealed bytes from the network; the fuzz target
// tests/fuzz/sealed_message_fuzz.cpp drives it with arbitrary input.
//
// A sealed message is a 25-byte header in the clear, then the ciphertext and its 16-byte tag:
//   u8 version (1) | u32 sender | u32 receiver | u64 transport tag | u64 sequence | ciphertext+tag
// (big-endian). The AEAD is XChaCha20-Poly1305 (libsodium's crypto_aead_xchacha20poly1305_ietf),
// keyed per direction (link_keys.h); its nonce is the sequence number (zero-padded to 24 bytes),
// which the sender increments per message, so it never repeats under a key. The associated data is
// the header, so a message moved to another tag, another peer or another position fails to open.
//
// The receiver rejects, naming the peer: a message for another receiver or from another sender
// (WrongPeer: checked in the clear first, then by the key), one that fails authentication
// (Forged: tampered in any bit, or sealed with another secret or session), a sequence number
// already seen or older than the window (Replayed), and, within one transport tag, a sequence
// number lower than one already accepted for that tag (Reordered; different tags may complete in
// any order). Sizes: kOverhead bytes on top of the plaintext.
// Thread-safety: functions are pure; a ReplayWindow is one peer's state, used by one thread.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "comm/security/secret.h"

namespace strait::comm::sealed {

inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 1 + 4 + 4 + 8 + 8;
inline constexpr std::size_t kMacBytes = 16;
inline constexpr std::size_t kOverhead = kHeaderBytes + kMacBytes;

struct Header {
  std::uint32_t sender = 0;
  std::uint32_t receiver = 0;
  std::uint64_t tag = 0;
  std::uint64_t seq = 0;
};

enum class Failure { Malformed, WrongPeer, Forged, Replayed, Reordered };

// Why a sealed message was refused; what() is a sentence naming the peer.
class OpenError : public std::runtime_error {
 public:
  OpenError(Failure failure, const std::string& message)
      : std::runtime_error(message), failure_(failure) {}
  [[nodiscard]] Failure failure() const noexcept { return failure_; }

 private:
  Failure failure_;
};

// Writes the sealed form of plain into out (plain.size() + kOverhead bytes). plain and out must not
// overlap.
void seal(const Key& key, const Header& header, std::span<const std::uint8_t> plain,
          std::span<std::uint8_t> out);

// The header of a sealed message (not yet authenticated). OpenError(Malformed) when shorter than
// kOverhead or of another version.
Header peek(std::span<const std::uint8_t> message);

// Checks that the message is from `sender` for `receiver` and authentic, and decrypts it into
// plain (at least message.size() - kOverhead bytes). Returns its header. Throws OpenError
// (Malformed, WrongPeer, Forged); sequence numbers are the ReplayWindow's business.
Header open(const Key& key, int sender, int receiver, std::span<const std::uint8_t> message,
            std::span<std::uint8_t> plain);

// Sequence numbers seen from one peer: each accepted once, none older than kWindow below the
// highest, and non-decreasing within a transport tag.
class ReplayWindow {
 public:
  static constexpr std::uint64_t kWindow = std::uint64_t{1} << 16U;

  // Throws OpenError(Replayed / Reordered) naming `peer`; records seq otherwise.
  void accept(int peer, std::uint64_t tag, std::uint64_t seq);

 private:
  bool any_ = false;
  std::uint64_t top_ = 0;      // highest accepted
  std::bitset<kWindow> seen_;  // bit (s % kWindow) for s in (top_ - kWindow, top_]
  std::unordered_map<std::uint64_t, std::uint64_t> last_by_tag_;
};

}  // namespace strait::comm::sealed
