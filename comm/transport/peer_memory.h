// Reading another process's memory on this host in one copy: process_vm_readv(2) (Linux "cross
// memory attach"), the kernel copying straight from the peer's pages into ours. What
// UcxTransport's single-copy path for large messages between local ranks reads with.
//
// The peer is named by pid, which the kernel may recycle once the process is gone: callers hold a
// pidfd of the peer and check it after the read (a readable pidfd means the process exited, and
// whatever was read may have come from another one). The kernel allows the read when this process
// may ptrace the peer (same uid and no Yama restriction, or CAP_SYS_PTRACE); otherwise EPERM.
// Thread-safety: any thread (the table of mapped buffers below is internally locked).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace strait::comm {

struct PeerRead {
  std::size_t bytes = 0;  // read into the destination, from its start
  int error = 0;          // 0 when all `len` bytes were read; else the errno that stopped it:
                          // ESRCH the process is gone, EFAULT the range is not mapped there
                          // (any more), EPERM not allowed (ptrace rules)
};

// Copies `len` bytes at address `remote` of process `pid` into `local`, in as many system calls
// as the kernel needs (it may copy less than asked at a time). `serial` (see below), when not 0
// and this process maps that buffer of `pid` over the whole range: a memcpy from the mapping
// instead, with no system call and no pinning of the peer's pages.
PeerRead read_peer_memory(pid_t pid, std::uint64_t remote, void* local, std::size_t len,
                          std::uint64_t serial = 0) noexcept;

// Symmetric buffers (comm/symmetric_heap.h) as the transport sees them, process-wide: a sender
// names the buffer its message lies in by a serial (unique in its process, never reused), and a
// receiver that maps that buffer reads it from the mapping (read_peer_memory). Naming it with each
// message, rather than looking the address up, keeps a freed buffer's mapping from being read for
// ordinary memory that the peer later got at the same address. Thread-safety: internally locked;
// a read holds the lock while it copies, so a mapping is not removed under it.
// A serial for this process's buffer [p, p + bytes); unregister_own() before unmapping it.
std::uint64_t register_own(const void* p, std::size_t bytes);
void unregister_own(std::uint64_t serial) noexcept;
// The serial of this process's registered buffer holding [p, p + len), 0 when none does.
std::uint64_t own_serial_of(const void* p, std::size_t len) noexcept;
// Process `pid`'s buffer `serial`, at `address` there, is mapped here at `mapped` (read-only);
// every read from it adds its bytes to `*read_in_place` (which must outlive the registration).
void register_peer(pid_t pid, std::uint64_t serial, std::uint64_t address, std::size_t bytes,
                   const void* mapped, std::atomic<std::uint64_t>* read_in_place);
void unregister_peer(pid_t pid, std::uint64_t serial) noexcept;
// The table of mapped buffers, locked while this lives (keep it short): what find() returns is
// readable until then. find(): where [address, address + len) of `pid`'s buffer `serial` is mapped
// here, or null when this process does not map that range; it counts `len` bytes read in place.
class PeerMappings {
 public:
  PeerMappings();
  [[nodiscard]] const std::byte* find(pid_t pid, std::uint64_t serial, std::uint64_t address,
                                      std::size_t len) const;

 private:
  std::unique_lock<std::mutex> lock_;
};

// Identity of this host as far as shared memory and pids are concerned: processes with the same
// boot id and pid namespace can watch each other with a pidfd and share memory; the network
// namespace is part of it so that ranks in different namespaces (the WAN testbed's sites) talk
// through their network devices.
std::string host_identity();

// pidfd_open(2) and pidfd_getfd(2), through syscall(2): glibc 2.36's <sys/pidfd.h> lacks C linkage
// for C++, and older glibc lack it. -1 with errno on failure.
int pidfd_open(pid_t pid) noexcept;
int pidfd_getfd(int pidfd, int fd) noexcept;

}  // namespace strait::comm
