// Reading another process's memory on this host in one copy: process_vm_readv(2) (Linux "cross
// memory attach"), the kernel copying straight from the peer's pages into ours. What
// UcxTransport's single-copy path for large messages between local ranks reads with.
//
// The peer is named by pid, which the kernel may recycle once the process is gone: callers hold a
// pidfd of the peer and check it after the read (a readable pidfd means the process exited, and
// whatever was read may have come from another one). The kernel allows the read when this process
// may ptrace the peer (same uid and no Yama restriction, or CAP_SYS_PTRACE); otherwise EPERM.
// Thread-safety: stateless; any thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace strait::comm {

struct PeerRead {
  std::size_t bytes = 0;  // read into the destination, from its start
  int error = 0;          // 0 when all `len` bytes were read; else the errno that stopped it:
                          // ESRCH the process is gone, EFAULT the range is not mapped there
                          // (any more), EPERM not allowed (ptrace rules)
};

// Copies `len` bytes at address `remote` of process `pid` into `local`, in as many system calls
// as the kernel needs (it may copy less than asked at a time).
PeerRead read_peer_memory(pid_t pid, std::uint64_t remote, void* local, std::size_t len) noexcept;

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
