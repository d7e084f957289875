#include "comm/transport/peer_memory.h"

#include <sys/uio.h>

#include <cerrno>

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

}  // namespace strait::comm
