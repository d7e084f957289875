// SharedSecret: the job's shared secret, from which the store's authentication key and the
// per-pair link keys are derived (comm/bootstrap/store_auth.h, comm/transport/link_keys.h).
//
// The secret is the content of a file (STRAIT_SECRET_FILE, or the path a caller passes in
// TcpStoreOptions / CommOptions), at least 16 bytes, readable by its owner only (mode 0600 or
// 0400): a secret that others can read is no secret. A secret given on a command line or in the
// environment itself (STRAIT_SECRET) is refused, since /proc/<pid>/cmdline and environ leak it.
// The file's bytes are hashed at once (BLAKE2b-256, libsodium's crypto_generichash) into a master
// key held in memory locked with sodium_mlock and wiped when the last copy goes.
//
// Thread-safety: immutable after construction; copies share the key.
// Errors: InvalidArgument naming the file and the fix (missing, unreadable, mode too open, too
// short, STRAIT_SECRET set); Unavailable when libsodium cannot initialise.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace strait::comm {

inline constexpr std::size_t kKeyBytes = 32;
using Key = std::array<std::uint8_t, kKeyBytes>;

class SharedSecret {
 public:
  static constexpr std::size_t kMinSecretBytes = 16;
  static constexpr std::size_t kMaxSecretBytes = 1 << 20;

  // Reads and checks the file (see above).
  static SharedSecret from_file(const std::string& path);
  // From bytes already in memory (tests, and callers holding the secret some other way). source
  // names it in error messages ("STRAIT_SECRET_FILE=/run/job.key").
  static SharedSecret from_bytes(std::span<const std::uint8_t> secret, std::string source);
  // path when non-empty, else STRAIT_SECRET_FILE when set, else nullopt (no secret). Throws
  // InvalidArgument when STRAIT_SECRET (a secret in the environment) is set.
  static std::optional<SharedSecret> resolve(const std::string& path);

  // A 32-byte key for one purpose: BLAKE2b-256 keyed with the master key over the label (domain
  // separation: keys for different labels are independent).
  [[nodiscard]] Key derive(std::string_view label) const;
  // Where the secret came from, for messages: "STRAIT_SECRET_FILE=/path".
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

 private:
  struct Master;
  SharedSecret(std::shared_ptr<const Master> master, std::string source);
  std::shared_ptr<const Master> master_;
  std::string source_;
};

// Calls sodium_init() once; throws Unavailable when it fails.
void ensure_sodium();

// n random bytes from libsodium's CSPRNG.
void random_fill(std::span<std::uint8_t> out);

}  // namespace strait::comm
