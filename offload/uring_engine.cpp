#include "offload/uring_engine.h"

#include <fmt/format.h>
#include <liburing.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "offload/engine_errors.h"
#include "offload/errno_text.h"

namespace strait::offload {
namespace {

using Clock = std::chrono::steady_clock;

void warn_once(std::atomic<bool>& warned, const std::string& text) {
  if (!warned.exchange(true)) spdlog::warn("{} Warning shown once.", text);
}

}  // namespace

struct UringEngine::Impl {
  struct Slot {
    IoRequest request;
    std::size_t done = 0;  // bytes transferred so far
    Ticket ticket = 0;
    int fixed_index = -1;  // registered buffer holding the request, or -1
    int file_index = -1;   // registered file of the request, or -1
  };
  struct Batch {
    std::size_t remaining = 0;  // requests not yet finished
    std::size_t size = 0;
    std::string error;  // first failure; empty when none
  };

  io_uring ring{};
  IoEngineOptions options;
  std::vector<Slot> slots;
  std::vector<unsigned> free_slots;
  std::deque<std::pair<Ticket, IoRequest>> pending;  // submitted by the caller, not to the kernel
  std::unordered_map<Ticket, Batch> batches;
  Ticket next_ticket = 1;
  unsigned in_flight = 0;         // slots owned by the kernel or about to be
  unsigned unsubmitted = 0;       // SQEs prepared but not yet handed to io_uring_submit
  std::vector<iovec> registered;  // sorted by address
  bool fixed = false;
  std::unordered_map<std::uint64_t, int> file_slots;  // IoFile::id -> fixed file index
  bool sqpoll = false;
  Stats stats;
  Faults faults;

  explicit Impl(const IoEngineOptions& opts) : options(opts) {
    if (options.queue_depth == 0 || options.timeout.count() <= 0) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("io_uring: queue_depth ({}) and timeout ({} ms) must be positive",
                              options.queue_depth, options.timeout.count()));
    }
    int rc = 0;
    if (options.sqpoll) {
      io_uring_params params{};
      params.flags = IORING_SETUP_SQPOLL;
      params.sq_thread_idle = options.sqpoll_idle_ms;
      rc = io_uring_queue_init_params(options.queue_depth, &ring, &params);
      sqpoll = rc == 0;
      if (rc < 0 && rc != -ENOSYS) {
        static std::atomic<bool> warned{false};
        warn_once(warned, fmt::format("io_uring: the kernel refuses SQPOLL ({}); using a ring "
                                      "without a polling thread.",
                                      errno_text(-rc)));
      }
    }
    if (!sqpoll) {
      // COOP_TASKRUN (Linux >= 5.19): completions are posted when this thread next enters the
      // kernel (it always does, to wait) instead of interrupting it with an IPI, as fio does.
      // Older kernels reject the flag with EINVAL: then a plain ring.
      io_uring_params params{};
      params.flags = IORING_SETUP_COOP_TASKRUN;
      rc = io_uring_queue_init_params(options.queue_depth, &ring, &params);
      if (rc == -EINVAL) rc = io_uring_queue_init(options.queue_depth, &ring, 0);
    }
    if (rc < 0) {
      const char* why = "";
      if (rc == -ENOSYS) why = ": the kernel is built without io_uring";
      if (rc == -EPERM) {
        why = ": refused by a seccomp policy (containers) or /proc/sys/kernel/io_uring_disabled";
      }
      throw Error(ErrorCode::Unavailable,
                  fmt::format("io_uring_queue_init({}) failed with {}{}; use "
                              "STRAIT_IO_ENGINE=posix or allow io_uring",
                              options.queue_depth, errno_text(-rc), why));
    }
    // The ring may round entries up; our in-flight bound stays queue_depth so SQEs never run out.
    slots.resize(options.queue_depth);
    for (unsigned i = options.queue_depth; i > 0; --i) free_slots.push_back(i - 1);
  }

  // Owns the io_uring instance: neither copyable nor movable.
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    // The kernel may still be writing into caller buffers: let in-flight transfers finish (ring
    // teardown would cancel them, but not synchronously with the buffers being freed).
    pending.clear();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (in_flight > 0 && Clock::now() < deadline) {
      try {
        flush();
        reap(deadline);
      } catch (const std::exception& e) {
        spdlog::error("io_uring: while draining at shutdown: {}", e.what());
        break;
      }
    }
    io_uring_queue_exit(&ring);
  }

  // The registered buffer that holds all of r's bytes, or -1 (binary search: the buffers are
  // sorted by address and do not overlap).
  int find_fixed(const IoRequest& r) const {
    if (!fixed) return -1;
    const auto begin = std::bit_cast<std::uintptr_t>(r.data);
    auto it = std::upper_bound(registered.begin(), registered.end(), begin,
                               [](std::uintptr_t a, const iovec& v) {
                                 return a < std::bit_cast<std::uintptr_t>(v.iov_base);
                               });
    if (it == registered.begin()) return -1;
    --it;
    const auto base = std::bit_cast<std::uintptr_t>(it->iov_base);
    if (begin + r.length > base + it->iov_len) return -1;
    return static_cast<int>(it - registered.begin());
  }

  int find_file(const IoRequest& r) const {
    const auto it = file_slots.find(r.file->id());
    return it == file_slots.end() ? -1 : it->second;
  }

  // Prepares the SQE for the rest of slot i's transfer. The bound in_flight <= queue_depth <= SQ
  // entries means an SQE is always free here.
  void prepare(unsigned i) {
    Slot& s = slots[i];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) {
      throw Error(ErrorCode::Internal, "io_uring: no free SQE although a slot is free");
    }
    // Pieces are at most kMaxTransferBytes (submit cuts them), so the count fits 32 bits.
    std::size_t len = s.request.length - s.done;
    if (faults.short_transfer > 0) len = std::min(len, faults.short_transfer);
    std::byte* addr = s.request.data + s.done;
    const std::uint64_t off = s.request.offset + s.done;
    const int fd = s.file_index >= 0 ? s.file_index : s.request.file->fd();
    const auto n = static_cast<unsigned>(len);
    if (s.request.op == IoOp::Read) {
      if (s.fixed_index >= 0) {
        io_uring_prep_read_fixed(sqe, fd, addr, n, off, s.fixed_index);
      } else {
        io_uring_prep_read(sqe, fd, addr, n, off);
      }
    } else if (s.fixed_index >= 0) {
      io_uring_prep_write_fixed(sqe, fd, addr, n, off, s.fixed_index);
    } else {
      io_uring_prep_write(sqe, fd, addr, n, off);
    }
    if (s.file_index >= 0) {
      sqe->flags |= IOSQE_FIXED_FILE;
      ++stats.fixed_file_sqes;
    }
    if (s.fixed_index >= 0) ++stats.fixed_buffer_sqes;
    io_uring_sqe_set_data64(sqe, i);
    ++unsubmitted;
    ++stats.sqes;
    if (options.submit_batch > 0 && unsubmitted >= options.submit_batch) flush();
  }

  void fill() {
    while (!pending.empty() && !free_slots.empty()) {
      const unsigned i = free_slots.back();
      free_slots.pop_back();
      auto [ticket, request] = pending.front();
      pending.pop_front();
      slots[i] = Slot{request, 0, ticket, find_fixed(request), find_file(request)};
      ++in_flight;
      prepare(i);
    }
  }

  void flush() {
    while (unsubmitted > 0) {
      const int rc = io_uring_submit(&ring);
      if (rc >= 0) {
        unsubmitted -= std::min(unsubmitted, static_cast<unsigned>(rc));
        if (rc == 0) return;
        continue;
      }
      // Transient: the kernel is short of resources or completions must be reaped first.
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) return;
      throw Error(ErrorCode::Io, fmt::format("io_uring_submit failed: {}", errno_text(-rc)));
    }
  }

  void finish(unsigned i, std::string error) {
    Slot& s = slots[i];
    Batch& b = batches.at(s.ticket);
    if (!error.empty() && b.error.empty()) b.error = std::move(error);
    --b.remaining;
    --in_flight;
    free_slots.push_back(i);
  }

  void complete(unsigned i, int res) {
    Slot& s = slots[i];
    const IoRequest& r = s.request;
    if (faults.eagain > 0) {
      --faults.eagain;
      res = -EAGAIN;  // the transfer happened; repeating it moves the same bytes again
    }
    if (res == -EINTR || res == -EAGAIN) {
      ++stats.retries;
      prepare(i);  // retried as is
      return;
    }
    if (res < 0) {
      finish(i, fmt::format("io_uring {} failed after {} bytes: {}", describe(r), s.done,
                            errno_text(-res)));
      return;
    }
    s.done += static_cast<std::size_t>(res);
    if (s.done == r.length) {
      finish(i, {});
      return;
    }
    // Short transfer. O_DIRECT moves whole blocks, so an unaligned count means the read hit the
    // end of the file; so does a read that returns nothing.
    const bool at_eof =
        r.op == IoOp::Read &&
        (res == 0 || (r.file->direct() && s.done % r.file->alignment().offset != 0));
    if (at_eof) {
      std::string size = "?";
      try {
        size = fmt::format("{}", r.file->size());
      } catch (const Error&) {
      }
      finish(i, fmt::format("io_uring {} reached the end of the file after {} bytes (the file is "
                            "{} bytes): it is shorter than expected, truncated or not "
                            "preallocated",
                            describe(r), s.done, size));
      return;
    }
    if (res == 0) {
      finish(i, fmt::format("io_uring {} made no progress after {} bytes", describe(r), s.done));
      return;
    }
    ++stats.short_transfers;
    prepare(i);  // the remainder
  }

  // Waits for at least one completion (or the deadline) and processes all that are ready.
  // Returns false on timeout.
  bool reap(Clock::time_point deadline) {
    io_uring_cqe* cqe = nullptr;
    while (true) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      __kernel_timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
      const int rc = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
      if (rc == 0) break;
      if (rc == -ETIME || rc == -EINTR || rc == -EAGAIN) continue;
      throw Error(ErrorCode::Io, fmt::format("io_uring_wait_cqe failed: {}", errno_text(-rc)));
    }
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      complete(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)), cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    return true;
  }
};

UringEngine::UringEngine(const IoEngineOptions& options) : impl_(std::make_unique<Impl>(options)) {}

UringEngine::~UringEngine() = default;

IoFile UringEngine::open(const std::filesystem::path& path, OpenMode mode) {
  return IoFile(path, mode, /*direct=*/true);
}

bool UringEngine::buffers_registered() const noexcept {
  return impl_->fixed;
}

bool UringEngine::files_registered() const noexcept {
  return !impl_->file_slots.empty();
}

bool UringEngine::sqpoll() const noexcept {
  return impl_->sqpoll;
}

UringEngine::Stats UringEngine::stats() const noexcept {
  return impl_->stats;
}

void UringEngine::inject_faults_for_testing(const Faults& faults) {
  impl_->faults = faults;
}

void UringEngine::register_files(std::span<const IoFile* const> files) {
  Impl& im = *impl_;
  if (im.in_flight > 0 || !im.pending.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                "io_uring: register_files while transfers are in flight; wait for every batch "
                "first");
  }
  if (!im.file_slots.empty()) {
    io_uring_unregister_files(&im.ring);
    im.file_slots.clear();
  }
  if (!im.options.register_files || files.empty()) return;
  std::vector<int> fds;
  for (const IoFile* f : files) {
    if (f == nullptr || f->fd() < 0) {
      throw Error(ErrorCode::InvalidArgument,
                  "io_uring: register_files given a file that is not "
                  "open");
    }
    fds.push_back(f->fd());
  }
  const int rc = io_uring_register_files(&im.ring, fds.data(), static_cast<unsigned>(fds.size()));
  if (rc != 0) {
    static std::atomic<bool> warned{false};
    warn_once(warned, fmt::format("io_uring: cannot register {} files ({}); requests name their "
                                  "descriptors instead, which costs a lookup each.",
                                  fds.size(), errno_text(-rc)));
    return;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    im.file_slots[files[i]->id()] = static_cast<int>(i);
  }
}

void UringEngine::register_buffers(std::span<const std::span<std::byte>> buffers) {
  Impl& im = *impl_;
  if (im.in_flight > 0 || !im.pending.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                "io_uring: register_buffers while transfers are in flight; wait for every batch "
                "first");
  }
  if (im.fixed) {
    io_uring_unregister_buffers(&im.ring);
    im.fixed = false;
  }
  im.registered.clear();
  if (!im.options.register_buffers || buffers.empty()) return;
  std::size_t total = 0;
  for (const auto& b : buffers) {
    im.registered.push_back(iovec{b.data(), b.size()});
    total += b.size();
  }
  // Sorted, so find_fixed can search; indices are positions in this order.
  std::sort(im.registered.begin(), im.registered.end(), [](const iovec& a, const iovec& b) {
    return std::bit_cast<std::uintptr_t>(a.iov_base) < std::bit_cast<std::uintptr_t>(b.iov_base);
  });
  const int rc = io_uring_register_buffers(&im.ring, im.registered.data(),
                                           static_cast<unsigned>(im.registered.size()));
  if (rc == 0) {
    im.fixed = true;
    return;
  }
  im.registered.clear();
  static std::atomic<bool> warned{false};
  warn_once(warned, fmt::format("io_uring: cannot register {} bytes in {} fixed buffers ({}); "
                                "using plain reads and writes, which pin pages per request. "
                                "Raise RLIMIT_MEMLOCK (ulimit -l) to allow it; each buffer "
                                "must be at most 1 GiB.",
                                total, buffers.size(), errno_text(-rc)));
}

IoEngine::Ticket UringEngine::submit(std::span<const IoRequest> requests) {
  for (const IoRequest& r : requests) validate(r);  // all or nothing
  Impl& im = *impl_;
  const Ticket ticket = im.next_ticket++;
  Impl::Batch& batch = im.batches[ticket];
  batch.size = requests.size();
  for (const IoRequest& part : split_requests(requests, im.options.block_size)) {
    im.pending.emplace_back(ticket, part);
    ++batch.remaining;
  }
  im.fill();
  im.flush();
  return ticket;
}

void UringEngine::wait(Ticket ticket) {
  Impl& im = *impl_;
  auto it = im.batches.find(ticket);
  if (it == im.batches.end()) {
    throw unknown_ticket("io_uring", ticket);
  }
  const auto deadline = Clock::now() + im.options.timeout;
  while (it->second.remaining > 0) {
    im.fill();
    im.flush();
    if (im.in_flight == 0) {
      throw Error(ErrorCode::Internal,
                  fmt::format("io_uring: ticket {} has {} requests left but none in flight", ticket,
                              it->second.remaining));
    }
    if (!im.reap(deadline)) {
      throw batch_timeout("io_uring", it->second.remaining, it->second.size, ticket,
                          im.options.timeout);
    }
  }
  const std::string error = std::move(it->second.error);
  im.batches.erase(it);
  if (!error.empty()) throw Error(ErrorCode::Io, error);
}

}  // namespace strait::offload
