#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "comm/algorithms/local_mailbox.h"
#include "comm/symmetric_heap.h"
#include "comm/transport/peer_memory.h"
#include "core/error.h"

namespace strait::comm {

SymmetricBuffer::SymmetricBuffer(std::shared_ptr<SymmetricMemory> owner, std::uint64_t id,
                                 void* data, std::size_t bytes) noexcept
    : owner_(std::move(owner)), id_(id), data_(data), bytes_(bytes) {}

SymmetricBuffer::SymmetricBuffer(SymmetricBuffer&& other) noexcept
    : owner_(std::move(other.owner_)), id_(other.id_), data_(other.data_), bytes_(other.bytes_) {
  other.id_ = 0;
  other.data_ = nullptr;
  other.bytes_ = 0;
}

SymmetricBuffer& SymmetricBuffer::operator=(SymmetricBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::move(other.owner_);
    id_ = other.id_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.id_ = 0;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

SymmetricBuffer::~SymmetricBuffer() {
  reset();
}

void SymmetricBuffer::reset() noexcept {
  if (owner_ && id_ != 0) {
    owner_->release(id_);
  } else if (data_ != nullptr) {
    ::munmap(data_, bytes_);
  }
  owner_.reset();
  id_ = 0;
  data_ = nullptr;
  bytes_ = 0;
}

void SymmetricMemory::unmap(const Entry& e) noexcept {
  if (e.serial != 0) {
    if (e.pid == 0) {
      unregister_own(e.serial);
    } else {
      unregister_peer(e.pid, e.serial);
    }
  }
  ::munmap(e.mapped, e.bytes);
  if (e.fd >= 0) ::close(e.fd);
}

SymmetricMemory::~SymmetricMemory() {
  for (const Entry& e : entries_) unmap(e);
}

void SymmetricMemory::release(std::uint64_t id) noexcept {
  const std::lock_guard lock(mutex_);
  std::erase_if(entries_, [id](const Entry& e) {
    if (e.id != id) return false;
    unmap(e);
    return true;
  });
}

std::uint64_t SymmetricMemory::id_of(const void* p, std::size_t len) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.rank == rank_ && a >= e.address && a + len <= e.address + e.bytes) return e.id;
  }
  return 0;
}

const std::byte* SymmetricMemory::find(int r, std::uint64_t id, std::uint64_t address,
                                       std::size_t len) const {
  if (id == 0) return nullptr;
  const std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.rank == r && e.id == id && address >= e.address && address + len <= e.address + e.bytes) {
      return static_cast<const std::byte*>(e.mapped) + (address - e.address);
    }
  }
  return nullptr;
}

SymmetricBuffer SymmetricMemory::allocate(Store& store, const std::string& prefix,
                                          const LocalMailbox& box, std::size_t bytes,
                                          std::chrono::milliseconds timeout) {
  if (bytes == 0) {
    throw Error(ErrorCode::InvalidArgument, "alloc: 0 bytes; ask for at least 1");
  }
  const auto fail = [](const std::string& what) {
    return Error(ErrorCode::Unavailable,
                 fmt::format("alloc (symmetric memory): {}: {}", what, std::strerror(errno)));
  };
  std::uint64_t id = 0;
  {
    const std::lock_guard lock(mutex_);
    id = next_id_++;
  }
  const std::string key = fmt::format("{}/{}", prefix, id);
  const int fd = ::memfd_create("strait-symmetric", MFD_CLOEXEC);
  if (fd < 0) throw fail("memfd_create");
  void* mine = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (mine = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    const Error e = fail("ftruncate/mmap");
    ::close(fd);
    throw e;
  }
  // Peers' messages from this buffer name it by this serial to the transport (peer_memory.h).
  std::vector<Entry> got{Entry{rank_, id, reinterpret_cast<std::uintptr_t>(mine), bytes, mine, fd,
                               0, register_own(mine, bytes)}};
  // Whatever fails below leaves nothing mapped (peers' mappings are registered only at the end).
  const auto undo = [&] {
    for (const Entry& e : got) unmap(e);
  };
  try {
    store.set(fmt::format("{}/{}", key, rank_),
              fmt::format("{} {} {} {} {}", ::getpid(), fd, got[0].address, bytes, got[0].serial));
    // Every rank's size first: ranks that disagree then all fail alike, before any takes a
    // descriptor that a failing peer may already have closed.
    struct Peer {
      pid_t pid = 0;
      int fd = -1;
      std::uint64_t address = 0;
      std::uint64_t serial = 0;
    };
    std::vector<Peer> peers(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      std::istringstream in(store.get_string(fmt::format("{}/{}", key, r), timeout));
      std::size_t their_bytes = 0;
      Peer& peer = peers[static_cast<std::size_t>(r)];
      in >> peer.pid >> peer.fd >> peer.address >> their_bytes >> peer.serial;
      if (their_bytes != bytes) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("alloc #{}: rank {} asked for {} bytes, this rank {}: every rank "
                                "must ask for the same size",
                                id, r, their_bytes, bytes));
      }
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Peer& peer = peers[static_cast<std::size_t>(r)];
      const int taken = pidfd_getfd(box.pidfd(r), peer.fd);
      if (taken < 0) throw fail(fmt::format("taking rank {}'s buffer (pidfd_getfd)", r));
      void* theirs = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, taken, 0);
      ::close(taken);
      if (theirs == MAP_FAILED) throw fail(fmt::format("mapping rank {}'s buffer", r));
      got.push_back(Entry{r, id, peer.address, bytes, theirs, -1, peer.pid, peer.serial});
    }
    // Every rank has taken every descriptor before any may free its buffer.
    store.set(fmt::format("{}/mapped/{}", key, rank_), "1");
    for (int r = 0; r < size_; ++r)
      (void)store.get_string(fmt::format("{}/mapped/{}", key, r), timeout);
  } catch (...) {
    undo();
    throw;
  }
  for (const Entry& e : got) {
    if (e.pid != 0 && e.serial != 0) {
      register_peer(e.pid, e.serial, e.address, e.bytes, e.mapped, &in_place_);
    }
  }
  {
    const std::lock_guard lock(mutex_);
    entries_.insert(entries_.end(), got.begin(), got.end());
  }
  return SymmetricBuffer(shared_from_this(), id, mine, bytes);
}

}  // namespace strait::comm
