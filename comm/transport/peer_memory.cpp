#include "comm/transport/peer_memory.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

namespace strait::comm {

namespace {

struct Mapped {
  pid_t pid = 0;  // 0: this process's own buffer
  std::uint64_t serial = 0;
  std::uint64_t address = 0;  // in the owner's address space
  std::size_t bytes = 0;
  const std::byte* mapped = nullptr;
  std::atomic<std::uint64_t>* read_in_place = nullptr;
};

struct MappedTable {
  std::mutex mutex;
  std::vector<Mapped> entries;
  std::uint64_t next_serial = 1;
};

// Process-wide, as pids and serials are, and never destroyed: a communicator released during
// static destruction still unregisters its buffers.
union Forever {
  MappedTable table;
  Forever() : table() {}
  Forever(const Forever&) = delete;
  Forever& operator=(const Forever&) = delete;
  Forever(Forever&&) = delete;
  Forever& operator=(Forever&&) = delete;
  ~Forever() {}  // NOLINT(modernize-use-equals-default): a union's member is not destroyed
};

MappedTable& table() {
  static Forever t;
  return t.table;
}

}  // namespace

std::uint64_t register_own(const void* p, std::size_t bytes) {
  MappedTable& t = table();
  const std::lock_guard lock(t.mutex);
  const std::uint64_t serial = t.next_serial++;
  t.entries.push_back(Mapped{0, serial, reinterpret_cast<std::uintptr_t>(p), bytes,
                             static_cast<const std::byte*>(p), nullptr});
  return serial;
}

void unregister_own(std::uint64_t serial) noexcept {
  unregister_peer(0, serial);
}

std::uint64_t own_serial_of(const void* p, std::size_t len) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  MappedTable& t = table();
  const std::lock_guard lock(t.mutex);
  for (const Mapped& e : t.entries) {
    if (e.pid == 0 && a >= e.address && a + len <= e.address + e.bytes) return e.serial;
  }
  return 0;
}

void register_peer(pid_t pid, std::uint64_t serial, std::uint64_t address, std::size_t bytes,
                   const void* mapped, std::atomic<std::uint64_t>* read_in_place) {
  MappedTable& t = table();
  const std::lock_guard lock(t.mutex);
  t.entries.push_back(
      Mapped{pid, serial, address, bytes, static_cast<const std::byte*>(mapped), read_in_place});
}

void unregister_peer(pid_t pid, std::uint64_t serial) noexcept {
  MappedTable& t = table();
  const std::lock_guard lock(t.mutex);
  std::erase_if(t.entries, [&](const Mapped& e) { return e.pid == pid && e.serial == serial; });
}

PeerMappings::PeerMappings() : lock_(table().mutex) {}

const std::byte* PeerMappings::find(pid_t pid, std::uint64_t serial, std::uint64_t address,
                                    std::size_t len) const {
  for (const Mapped& e : table().entries) {
    if (e.pid == pid && e.serial == serial && address >= e.address &&
        address + len <= e.address + e.bytes) {
      if (e.read_in_place != nullptr) e.read_in_place->fetch_add(len);
      return e.mapped + (address - e.address);
    }
  }
  return nullptr;
}

PeerRead read_peer_memory(pid_t pid, std::uint64_t remote, void* local, std::size_t len,
                          std::uint64_t serial) noexcept {
  if (serial != 0 && pid != 0) {
    const PeerMappings mappings;  // held while copying: the mapping stays
    if (const std::byte* from = mappings.find(pid, serial, remote, len)) {
      std::memcpy(local, from, len);
      return PeerRead{len, 0};
    }
  }
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
