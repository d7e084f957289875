#include "comm/algorithms/local_mailbox.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

#include "comm/transport/peer_memory.h"

namespace strait::comm {
namespace {

constexpr std::uint64_t kMagic = 0x584f424c49414d53ULL;  // "SMAILBOX"

// What a segment holds: who made it (so that a reader that took the wrong descriptor, a recycled
// pid's, finds out), then the two slots.
struct alignas(64) Segment {
  std::uint64_t magic = 0;
  std::uint64_t nonce = 0;
  LocalMailbox::Announcement announcement;
  LocalMailbox::Slot slots[2];
};

// A rank's record in the store: "pid fd nonce host-identity".
struct Record {
  pid_t pid = 0;
  int fd = -1;
  std::uint64_t nonce = 0;
  std::string host;
};

Record parse(const std::string& text) {
  Record r;
  std::istringstream in(text);
  in >> r.pid >> r.fd >> r.nonce >> r.host;
  return r;
}

void unmap(void* base, std::size_t length) noexcept {
  if (base != nullptr) ::munmap(base, length);
}

}  // namespace

LocalMailbox::LocalMailbox(const Key& /*key*/, int rank, int size)
    : rank_(rank), peers_(static_cast<std::size_t>(size)) {}

LocalMailbox::~LocalMailbox() {
  for (auto& p : peers_) unmap(p.mapping.base, p.mapping.length);
  unmap(own_mapping_.base, own_mapping_.length);
}

bool LocalMailbox::peer_exited(int r) const noexcept {
  const Peer& p = peers_[static_cast<std::size_t>(r)];
  if (!p.pidfd) return false;
  pollfd fd{p.pidfd.get(), POLLIN, 0};
  return ::poll(&fd, 1, 0) > 0;
}

std::uint64_t LocalMailbox::announce(const Fingerprint& fingerprint) noexcept {
  const auto words = std::bit_cast<std::array<std::uint64_t, Announcement::kWords>>(fingerprint);
  Announcement& a = *own_announcement_;
  const std::uint64_t v = a.version.load(std::memory_order_relaxed);
  a.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const std::uint64_t index = announcements_++;
  a.index.store(index, std::memory_order_relaxed);
  for (std::size_t i = 0; i < words.size(); ++i)
    a.words[i].store(words[i], std::memory_order_relaxed);
  a.version.store(v + 2, std::memory_order_release);
  return index;
}

std::optional<LocalMailbox::Announced> LocalMailbox::announced(int r) const noexcept {
  const Announcement& a = *peers_[static_cast<std::size_t>(r)].announcement;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::uint64_t before = a.version.load(std::memory_order_acquire);
    if (before == 0) return std::nullopt;
    if ((before & 1) != 0) continue;
    const std::uint64_t index = a.index.load(std::memory_order_relaxed);
    std::array<std::uint64_t, Announcement::kWords> words{};
    for (std::size_t i = 0; i < words.size(); ++i) {
      words[i] = a.words[i].load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (a.version.load(std::memory_order_relaxed) == before) {
      return Announced{index, std::bit_cast<Fingerprint>(words)};
    }
  }
  return std::nullopt;
}

std::optional<Fingerprint> LocalMailbox::disagreeing(int r, const Fingerprint& mine,
                                                     std::uint64_t index) const noexcept {
  const auto theirs = announced(r);
  if (theirs && theirs->index == index && !(theirs->fingerprint == mine)) {
    return theirs->fingerprint;
  }
  return std::nullopt;
}

std::shared_ptr<LocalMailbox> LocalMailbox::create(Store& store, const std::string& prefix,
                                                   int rank, int size,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& refuse,
                                                   std::string* why_not) {
  auto box = std::make_shared<LocalMailbox>(Key{}, rank, size);
  box->peers_[static_cast<std::size_t>(rank)].pid = ::getpid();
  std::string why = refuse;
  // This rank's segment: a memfd, closed once mapped here and taken by every peer (the
  // store's barrier below keeps it open until then).
  Fd memfd(::memfd_create("strait-mailbox", MFD_CLOEXEC));
  std::uint64_t nonce = std::random_device{}();
  nonce = (nonce << 32) ^ static_cast<std::uint64_t>(::getpid()) ^
          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (!why.empty()) {
    // Takes part in the agreement below only.
  } else if (!memfd || ::ftruncate(memfd.get(), sizeof(Segment)) != 0) {
    why = fmt::format("memfd_create/ftruncate: {}", std::strerror(errno));
  } else {
    void* base =
        ::mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
    if (base == MAP_FAILED) {
      why = fmt::format("mmap: {}", std::strerror(errno));
    } else {
      box->own_mapping_ = Mapping{base, sizeof(Segment)};
      auto* segment = new (base) Segment;  // default-initialised: the slots' data stays untouched
      segment->magic = kMagic;
      segment->nonce = nonce;
      box->own_ = segment->slots;
      box->own_announcement_ = &segment->announcement;
      box->peers_[static_cast<std::size_t>(rank)].slots = segment->slots;
      box->peers_[static_cast<std::size_t>(rank)].announcement = &segment->announcement;
    }
  }
  const std::string me = host_identity();
  store.set(fmt::format("{}/{}", prefix, rank),
            fmt::format("{} {} {} {}", ::getpid(), memfd.get(), nonce, me));
  for (int r = 0; r < size && why.empty(); ++r) {
    if (r == rank) continue;
    const Record rec = parse(store.get_string(fmt::format("{}/{}", prefix, r), timeout));
    if (rec.host != me) {
      why = fmt::format("rank {} is on another host or network namespace", r);
      break;
    }
    Peer& peer = box->peers_[static_cast<std::size_t>(r)];
    peer.pid = rec.pid;
    peer.pidfd.reset(pidfd_open(rec.pid));
    const Fd fd(peer.pidfd ? pidfd_getfd(peer.pidfd.get(), rec.fd) : -1);
    if (!fd) {
      why = fmt::format("taking rank {}'s segment (pidfd_getfd): {}", r, std::strerror(errno));
      break;
    }
    void* base = ::mmap(nullptr, sizeof(Segment), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) {
      why = fmt::format("mapping rank {}'s segment: {}", r, std::strerror(errno));
      break;
    }
    peer.mapping = Mapping{base, sizeof(Segment)};
    const auto* segment = static_cast<const Segment*>(base);
    if (segment->magic != kMagic || segment->nonce != rec.nonce) {
      why = fmt::format("rank {}'s segment is not the one it published (pid reused?)", r);
      break;
    }
    peer.slots = segment->slots;
    peer.announcement = &segment->announcement;
  }
  // Everyone learns whether everyone could: the mailbox is used by all ranks or by none.
  store.set(fmt::format("{}/ok/{}", prefix, rank), why.empty() ? "1" : "0");
  bool all = why.empty();
  for (int r = 0; r < size; ++r) {
    if (store.get_string(fmt::format("{}/ok/{}", prefix, r), timeout) != "1") {
      all = false;
      if (why.empty()) why = fmt::format("rank {} could not map every segment", r);
    }
  }
  if (why_not != nullptr) *why_not = why;
  return all ? box : nullptr;
}

}  // namespace strait::comm
