#include "comm/transport/peer_memory.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace strait::comm {

PeerRead read_peer_memory(pid_t pid, std::uint64_t remote, void* local, std::size_t len) noexcept {
  PeerRead r;
  auto* out = static_cast<std::byte*>(local);
  while (r.bytes < len) {
    iovec to{out + r.bytes, len - r.bytes};
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the peer's address, valid only in its process
    iovec from{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + r.bytes)),
               len - r.bytes};
    const ssize_t n = ::process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      r.error = errno;
      return r;
    }
    if (n == 0) {  // nothing more could be read: the rest is not mapped
      r.error = EFAULT;
      return r;
    }
    r.bytes += static_cast<std::size_t>(n);
  }
  return r;
}

std::string host_identity() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat pid_ns {};
  struct stat net_ns {};
  ::stat("/proc/self/ns/pid", &pid_ns);
  ::stat("/proc/self/ns/net", &net_ns);
  return fmt::format("{}:{}:{}", boot_id, pid_ns.st_ino, net_ns.st_ino);
}

int pidfd_open(pid_t pid) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U));
}

int pidfd_getfd(int pidfd, int fd) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0U));
}

}  // namespace strait::comm
