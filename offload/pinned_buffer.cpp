#include "offload/pinned_buffer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

#include "core/error.h"
#include "offload/errno_text.h"

namespace strait::offload {
namespace {

void warn_unlocked_once(std::size_t bytes, int err) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit =
      lim.rlim_cur == RLIM_INFINITY ? "unlimited" : fmt::format("{} KiB", lim.rlim_cur / 1024);
  spdlog::warn(
      "offload: could not lock {} bytes of host memory ({}; RLIMIT_MEMLOCK is {}): buffers stay "
      "unlocked and may be swapped out, which slows transfers. Raise the limit (ulimit -l "
      "unlimited, or LimitMEMLOCK= / --ulimit memlock=-1 in containers). Warning shown once.",
      bytes, errno_text(err), limit);
}

}  // namespace

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  const std::size_t page = page_size();
  size_ = (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    throw Error(ErrorCode::Io, fmt::format("offload: cannot map a {}-byte host buffer: {}; free "
                                           "memory or use a smaller chunk size",
                                           bytes, errno_text(err)));
  }
  data_ = static_cast<std::byte*>(p);
  if (::mlock(p, size_) == 0) {
    locked_ = true;
  } else {
    warn_unlocked_once(size_, errno);
  }
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  release();
}

void PinnedBuffer::release() noexcept {
  if (data_ == nullptr) return;
  // munmap also drops the lock; no separate munlock needed.
  ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

}  // namespace strait::offload
