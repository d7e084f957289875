#include "offload/pinned_buffer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/device_memory.h"
#include "offload/errno_text.h"
#include "offload/numa.h"

namespace strait::offload {
namespace {

// Each warning once per process: a forked child (a rank) warns in its own log too.
bool first_warning_here(std::atomic<pid_t>& warned) {
  const pid_t me = ::getpid();
  return warned.exchange(me) != me;
}

std::atomic<pid_t> unlocked_warned{0};
std::atomic<pid_t> unbound_warned{0};
std::atomic<pid_t> unregistered_warned{0};

void warn_unlocked_once(std::size_t bytes, int err) {
  if (!first_warning_here(unlocked_warned)) return;
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit =
      lim.rlim_cur == RLIM_INFINITY ? "unlimited" : fmt::format("{} KiB", lim.rlim_cur / 1024);
  spdlog::warn(
      "offload: could not lock {} bytes of host memory ({}; RLIMIT_MEMLOCK is {}): buffers stay "
      "unlocked and may be swapped out, which slows transfers. Raise the limit (ulimit -l "
      "unlimited; 'memlock' in /etc/security/limits.conf; LimitMEMLOCK= for systemd, --ulimit "
      "memlock=-1 for containers) or grant CAP_IPC_LOCK. Warning shown once.",
      bytes, errno_text(err), limit);
}

void warn_unbound_once(unsigned node, const std::string& why) {
  if (!first_warning_here(unbound_warned)) return;
  spdlog::warn(
      "offload: could not bind host buffers to NUMA node {} ({}): their pages go where the kernel "
      "puts them (first touch), which may be a remote node. In a container, mbind needs "
      "CAP_SYS_NICE or a seccomp profile that allows it. Warning shown once.",
      node, why);
}

void warn_unregistered_once(const std::string& why) {
  if (!first_warning_here(unregistered_warned)) return;
  spdlog::warn(
      "offload: could not register host buffers with CUDA ({}): copies from them to the GPU are "
      "staged by the driver and slower. Check the locked-memory limit (ulimit -l) and free host "
      "memory. Warning shown once.",
      why);
}

}  // namespace

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes, const PinnedBufferOptions& options) {
  if (bytes == 0) return;
  if (options.numa_node) numa::check_node(*options.numa_node);
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - page) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("offload: a host buffer of {} bytes cannot exist; ask for less", bytes));
  }
  size_ = (bytes + page - 1) / page * page;
  // Buffers of a huge page or more start on a huge-page boundary (the mapping is made that much
  // larger and trimmed), so transparent huge pages can back all of them.
  const bool huge = size_ >= kHugePageBytes && size_ <= SIZE_MAX - kHugePageBytes;
  const std::size_t mapped = huge ? size_ + kHugePageBytes : size_;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    throw Error(ErrorCode::Io, fmt::format("offload: cannot map a {}-byte host buffer: {}; free "
                                           "memory or use a smaller chunk size",
                                           bytes, errno_text(err)));
  }
  if (huge) {
    const auto start = std::bit_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    const std::size_t head = aligned - start;
    if (head != 0) ::munmap(p, head);
    if (kHugePageBytes - head != 0) {
      ::munmap(std::bit_cast<void*>(aligned + size_), kHugePageBytes - head);
    }
    p = std::bit_cast<void*>(aligned);
  }
  data_ = static_cast<std::byte*>(p);
  try {
    // Bind before anything touches the pages: mlock and cudaHostRegister fault them in.
    if (options.numa_node) {
      std::string why;
      if (numa::bind_area(p, size_, *options.numa_node, &why)) {
        numa_node_ = options.numa_node;
      } else {
        warn_unbound_once(*options.numa_node, why);
      }
    }
    // Before mlock faults the pages in. Huge pages make each 2 MiB one segment for the block
    // layer: a 1 MiB O_DIRECT read into a registered io_uring buffer is then one request instead
    // of two of 512 KiB (virtio's 254-segment limit), 1.33 -> 2.4 GB/s on the development VM
    // (docs/results/offload.md). Where THP is off the advice is ignored.
    if (huge) ::madvise(p, size_, MADV_HUGEPAGE);
    if (::mlock(p, size_) == 0) {
      locked_ = true;
    } else {
      warn_unlocked_once(size_, errno);
    }
    if (options.register_with_cuda) {
      std::string why;
      switch (kernels::host_register(p, size_, &why)) {
        case kernels::HostRegistration::Registered: cuda_registered_ = true; break;
        case kernels::HostRegistration::NoDevice: break;
        case kernels::HostRegistration::Failed: warn_unregistered_once(why); break;
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)),
      numa_node_(std::exchange(other.numa_node_, std::nullopt)),
      cuda_registered_(std::exchange(other.cuda_registered_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
    numa_node_ = std::exchange(other.numa_node_, std::nullopt);
    cuda_registered_ = std::exchange(other.cuda_registered_, false);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  release();
}

void PinnedBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (cuda_registered_) kernels::host_unregister(data_);
  // munmap also drops the lock; no separate munlock needed.
  ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
  numa_node_.reset();
  cuda_registered_ = false;
}

}  // namespace strait::offload
