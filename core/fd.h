/// \file
/// Fd: sole owner of a POSIX file descriptor, closed on destruction (RAII for sockets, eventfds,
/// epoll instances, pidfds, files).
#pragma once

#include <unistd.h>

#include <utility>

namespace strait {

/// Sole owner of a POSIX file descriptor (-1: none); closes it on destruction. Move-only; not
/// thread-safe.
class Fd {
 public:
  /// No descriptor.
  Fd() noexcept = default;
  /// Takes ownership of `fd` (-1: none).
  explicit Fd(int fd) noexcept : fd_(fd) {}
  /// Takes `other`'s descriptor, leaving it empty.
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  /// Closes this descriptor, then takes `other`'s.
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  /// The descriptor, still owned (-1 when empty).
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  /// Same as valid().
  explicit operator bool() const noexcept { return valid(); }
  /// Gives up ownership: returns the descriptor (-1 when empty) and leaves this empty.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace strait
