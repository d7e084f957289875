// Fd: the sole owner of a POSIX file descriptor, closed on destruction (sockets, eventfd, epoll,
// signalfd, pipes).
//
// Move-only. Thread-safety: a value type (no internal locking). Closing a descriptor that another
// thread is blocked on does not wake that thread: use shutdown(2) on sockets or an eventfd.
#pragma once

#include <unistd.h>

#include <utility>

namespace strait::comm {

class Fd {
 public:
  Fd() noexcept = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the current descriptor (if any) and owns fd instead. close(2) is not retried on EINTR:
  // on Linux the descriptor is released even then, and a retry could close someone else's.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace strait::comm
