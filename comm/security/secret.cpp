#include "comm/security/secret.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sodium.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fd.h"
#include "core/params.h"

namespace strait::comm {

void ensure_sodium() {
  static const int rc = sodium_init();
  if (rc < 0) {
    throw Error(ErrorCode::Unavailable, "libsodium failed to initialise (sodium_init)");
  }
}

void random_fill(std::span<std::uint8_t> out) {
  ensure_sodium();
  randombytes_buf(out.data(), out.size());
}

struct SharedSecret::Master {
  Key key{};
  Master() { sodium_mlock(key.data(), key.size()); }  // best effort: RLIMIT_MEMLOCK may refuse
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;
  ~Master() { sodium_munlock(key.data(), key.size()); }  // also wipes it
};

SharedSecret::SharedSecret(std::shared_ptr<const Master> master, std::string source)
    : master_(std::move(master)), source_(std::move(source)) {}

SharedSecret SharedSecret::from_bytes(std::span<const std::uint8_t> secret, std::string source) {
  ensure_sodium();
  if (secret.size() < kMinSecretBytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the shared secret ({}) has {} bytes, fewer than {}: create one with "
                            "`head -c 32 /dev/urandom > FILE && chmod 600 FILE`",
                            source, secret.size(), kMinSecretBytes));
  }
  auto master = std::make_shared<Master>();
  static constexpr std::string_view kLabel = "strait shared secret v1";
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kKeyBytes);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel.data()),
                            kLabel.size());
  crypto_generichash_update(&st, secret.data(), secret.size());
  crypto_generichash_final(&st, master->key.data(), kKeyBytes);
  sodium_memzero(&st, sizeof st);
  return {std::move(master), std::move(source)};
}

SharedSecret SharedSecret::from_file(const std::string& path) {
  const std::string source = fmt::format("STRAIT_SECRET_FILE={}", path);
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("cannot open the shared secret file {}: {} (every rank needs the same "
                            "file, mode 0600)",
                            path, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the shared secret {} is not a regular file", path));
  }
  if ((st.st_mode & 077U) != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the shared secret file {} has mode {:04o}: others can read it; run "
                            "`chmod 600 {}`",
                            path, st.st_mode & 07777U, path));
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxSecretBytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the shared secret file {} has {} bytes, more than {}: is it the "
                            "right file?",
                            path, st.st_size, kMaxSecretBytes));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(ErrorCode::Io, fmt::format("cannot read the shared secret file {}: {}", path,
                                             n < 0 ? std::strerror(errno) : "short read"));
    }
    got += static_cast<std::size_t>(n);
  }
  try {
    SharedSecret s = from_bytes(bytes, source);
    sodium_memzero(bytes.data(), bytes.size());
    return s;
  } catch (...) {
    sodium_memzero(bytes.data(), bytes.size());
    throw;
  }
}

std::optional<SharedSecret> SharedSecret::resolve(const std::string& path) {
  if (params::is_present("STRAIT_SECRET")) {
    throw Error(ErrorCode::InvalidArgument,
                "STRAIT_SECRET is set: a secret in the environment or on a command line leaks "
                "through /proc; put it in a file readable only by you and set STRAIT_SECRET_FILE "
                "to its path");
  }
  if (!path.empty()) return from_file(path);
  const std::optional<std::string> env = params::text("STRAIT_SECRET_FILE");
  if (!env) return std::nullopt;
  return from_file(*env);
}

Key SharedSecret::derive(std::string_view label) const {
  Key out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(label.data()),
                     label.size(), master_->key.data(), master_->key.size());
  return out;
}

}  // namespace strait::comm
