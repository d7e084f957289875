#include "offload/posix_engine.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "offload/engine_errors.h"
#include "offload/errno_text.h"

namespace strait::offload {
namespace {

// Transfers the whole request or returns why not. Runs without the engine's lock.
std::string transfer(const IoRequest& r) {
  std::size_t done = 0;
  while (done < r.length) {
    const auto off = static_cast<off_t>(r.offset + done);
    const ssize_t n = r.op == IoOp::Read
                          ? ::pread(r.file->fd(), r.data + done, r.length - done, off)
                          : ::pwrite(r.file->fd(), r.data + done, r.length - done, off);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR || err == EAGAIN) continue;
      return fmt::format("posix {} failed after {} bytes: {}", describe(r), done, errno_text(err));
    }
    if (n == 0) {
      if (r.op == IoOp::Write) {
        return fmt::format("posix {} made no progress after {} bytes", describe(r), done);
      }
      std::string size = "?";
      try {
        size = fmt::format("{}", r.file->size());
      } catch (const Error&) {
      }
      return fmt::format(
          "posix {} reached the end of the file after {} bytes (the file is {} "
          "bytes): it is shorter than expected, truncated or not preallocated",
          describe(r), done, size);
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

struct PosixEngine::Impl {
  struct Batch {
    std::size_t remaining = 0;
    std::size_t size = 0;
    std::string error;
  };
  struct Job {
    Ticket ticket;
    IoRequest request;
  };

  IoEngineOptions options;
  std::mutex mu;
  std::condition_variable_any work_cv;
  std::condition_variable done_cv;
  std::deque<Job> queue;
  std::unordered_map<Ticket, Batch> batches;
  Ticket next_ticket = 1;
  std::vector<std::jthread> workers;  // last member: joined first, while the rest still exists

  explicit Impl(const IoEngineOptions& opts) : options(opts) {
    if (options.threads == 0 || options.timeout.count() <= 0) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("posix io: threads ({}) and timeout ({} ms) must be positive",
                              options.threads, options.timeout.count()));
    }
    for (unsigned i = 0; i < options.threads; ++i) {
      workers.emplace_back([this](const std::stop_token& stop) { work(stop); });
    }
  }

  // The workers hold `this`: neither copyable nor movable.
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    {
      const std::lock_guard lock(mu);
      queue.clear();  // not started: dropped
    }
    for (auto& w : workers) w.request_stop();
    workers.clear();  // joins; transfers in progress finish first
  }

  void work(const std::stop_token& stop) {
    std::unique_lock lock(mu);
    while (true) {
      if (!work_cv.wait(lock, stop, [this] { return !queue.empty(); })) return;
      const Job job = queue.front();
      queue.pop_front();
      lock.unlock();
      std::string error = transfer(job.request);
      lock.lock();
      Batch& b = batches.at(job.ticket);
      if (!error.empty() && b.error.empty()) b.error = std::move(error);
      if (--b.remaining == 0) done_cv.notify_all();
    }
  }
};

PosixEngine::PosixEngine(const IoEngineOptions& options) : impl_(std::make_unique<Impl>(options)) {}

PosixEngine::~PosixEngine() = default;

IoFile PosixEngine::open(const std::filesystem::path& path, OpenMode mode) {
  return IoFile(path, mode, /*direct=*/false);
}

IoEngine::Ticket PosixEngine::submit(std::span<const IoRequest> requests) {
  for (const IoRequest& r : requests) validate(r);  // all or nothing
  Impl& im = *impl_;
  const std::vector<IoRequest> pieces = split_requests(requests, im.options.block_size);
  const std::size_t queued = pieces.size();
  Ticket ticket = 0;
  {
    const std::lock_guard lock(im.mu);
    ticket = im.next_ticket++;
    Impl::Batch& batch = im.batches[ticket];
    batch.size = requests.size();
    for (const IoRequest& part : pieces) im.queue.push_back({ticket, part});
    batch.remaining = queued;
  }
  if (queued == 1) {
    im.work_cv.notify_one();
  } else if (queued > 1) {
    im.work_cv.notify_all();
  }
  return ticket;
}

void PosixEngine::wait(Ticket ticket) {
  Impl& im = *impl_;
  std::unique_lock lock(im.mu);
  auto it = im.batches.find(ticket);
  if (it == im.batches.end()) {
    throw unknown_ticket("posix io", ticket);
  }
  Impl::Batch& batch = it->second;
  if (!im.done_cv.wait_for(lock, im.options.timeout, [&] { return batch.remaining == 0; })) {
    throw batch_timeout("posix io", batch.remaining, batch.size, ticket, im.options.timeout);
  }
  const std::string error = std::move(batch.error);
  im.batches.erase(it);
  if (!error.empty()) throw Error(ErrorCode::Io, error);
}

}  // namespace strait::offload
