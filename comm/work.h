/// \file
/// Work: the handle of a non-blocking operation (the role of MPI_Request / c10d::Work).
///
/// Completion and errors are reported by the progress engine. wait() blocks the caller until the
/// operation finishes and rethrows its error (strait::Error with the operation, its sequence number
/// and the ranks involved). A wait(timeout) that expires fails the operation itself with Timeout:
/// once a caller gives up on an operation its buffers may be reused, so it must not finish later.
/// Before a failed operation reports its error, its transfers let go of its buffers
/// (Transport::withdraw): unmatched receives are cancelled, transfers under way get 200 ms to
/// finish, and sends still queued then are dropped by force-closing their endpoint. Known limit: a
/// receive whose data is already arriving and does not finish in that time cannot be stopped (UCX
/// has no way to); it is logged, and its buffer may still be written while the peer sends. A send
/// to another host that is still queued is dropped the same way, and that peer is then lost to this
/// process's communicators (its connection was force-closed).
/// Thread-safety: all members may be called from any thread; callbacks run on the progress thread
/// and must be short and must not block (hand work to another thread, e.g. by fulfilling a
/// promise).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/export.h"

namespace strait::comm {

class WorkState;
class FlightRecorder;  // comm/flight_recorder.h, private to comm/

/// What runs an operation to completion, as Work sees it: the progress engine
/// (comm/progress_engine.h) implements it, so that work.h needs nothing above itself.
/// Thread-safety: every member may be called from any thread.
class WorkDriver {
 public:
  WorkDriver() = default;
  WorkDriver(const WorkDriver&) = delete;
  WorkDriver& operator=(const WorkDriver&) = delete;
  WorkDriver(WorkDriver&&) = delete;
  WorkDriver& operator=(WorkDriver&&) = delete;
  virtual ~WorkDriver() = default;
  /// Progresses on the caller's thread for a while before it blocks; returns work.done().
  virtual bool drive(const WorkState& work) = 0;
  /// A wait that drive() did not finish has ended, `waited` after it began.
  virtual void wait_ended(std::chrono::steady_clock::duration waited) = 0;
  /// Fails one pending operation (no-op when already finished).
  virtual void fail(const std::shared_ptr<WorkState>& work, const Error& error) = 0;
};

/// When an operation's deadline (the communicator's timeout) starts to run. AtWait is for
/// operations posted early, e.g. a pipeline stage's receives posted when its step starts: they may
/// rightly wait for a long time before anyone needs them, so only waiting for them is timed.
enum class DeadlineStart : std::uint8_t { AtSubmit, AtWait };

/// Says what an operation is ("allreduce #3 (f32 x 9, sum, ring@seg=1M) on comm 0 (rank 1 of
/// 2)"); called at most once, when an error or a log first needs the text, so a collective that
/// succeeds never formats it.
using Describer = std::function<std::string()>;

/// Shared between the handle and the engine.
class STRAIT_API WorkState {
 public:
  /// A state whose description is already formatted.
  explicit WorkState(std::string description) : description_(std::move(description)) {
    std::call_once(described_, [] {});
  }
  /// A state that formats its description on first use.
  explicit WorkState(Describer describe) : describe_(std::move(describe)) {}

  /// Formats the description on first use (thread-safe).
  [[nodiscard]] const std::string& description() const;
  /// True once complete() has run. Never blocks.
  [[nodiscard]] bool done() const;
  /// Waits until done or `until`; returns done().
  bool wait_until(std::chrono::steady_clock::time_point until) const;
  /// The error complete() was given; nullopt while pending or after success.
  [[nodiscard]] std::optional<Error> error() const;
  /// When complete() ran (steady clock); the epoch while pending.
  [[nodiscard]] std::chrono::steady_clock::time_point completed_at() const noexcept {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(completed_at_.load(std::memory_order_acquire)));
  }

  /// Engine side: first call wins; later calls are ignored.
  void complete(std::optional<Error> error);
  /// Runs `callback` once complete() has run (at once, on this thread, if it already has).
  void on_complete(std::function<void(const std::optional<Error>&)> callback);

  /// The operation's entry `id` in its communicator's flight recorder (comm/flight_recorder.h),
  /// told when the engine starts the operation and when it completes; set before it is submitted.
  /// Not owned: a communicator outlives its operations (its destructor fails and waits for them).
  void trace(FlightRecorder* recorder, std::uint64_t id) noexcept {
    recorder_ = recorder;
    record_id_ = id;
  }
  /// Engine side: the operation has started (no-op when it is not traced).
  void mark_started() const;

  /// The engine that runs this operation, so that an abandoned wait can fail it.
  std::weak_ptr<WorkDriver> engine;
  /// Set for DeadlineStart::AtWait: wait() gives up after this long (as wait(timeout) does).
  std::optional<std::chrono::milliseconds> wait_timeout;

 private:
  mutable std::string description_;
  mutable Describer describe_;
  mutable std::once_flag described_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  /// done_ for readers that poll (the engine, test()): no lock on the hot path.
  std::atomic<bool> finished_{false};
  std::atomic<std::chrono::steady_clock::rep> completed_at_{0};
  std::optional<Error> error_;
  std::vector<std::function<void(const std::optional<Error>&)>> callbacks_;
  FlightRecorder* recorder_ = nullptr;
  std::uint64_t record_id_ = 0;
};

/// The handle of a non-blocking operation (see the file comment). Copies share one operation.
class STRAIT_API Work {
 public:
  /// An invalid handle (valid() is false; other calls throw InvalidArgument).
  Work() = default;
  /// A handle on `state`.
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}

  /// True when the operation has finished (successfully or not). Never blocks.
  [[nodiscard]] bool test() const;
  /// Blocks until the operation finishes; throws its error. The operation's own deadline (the
  /// communicator's timeout, counted from submission, or from this call for DeadlineStart::AtWait)
  /// bounds the wait.
  void wait() const;
  /// As wait(), but gives up after `timeout`: the operation is then failed with Timeout and this
  /// throws that error. Like any failure, that leaves the communicator unusable (its peers may be
  /// mid-operation), so do not poll with short timeouts: use test() for that.
  void wait(std::chrono::milliseconds timeout) const;
  /// The error, once finished with one.
  [[nodiscard]] std::optional<Error> error() const;
  /// Runs `callback` once the operation finishes (at once, on this thread, if it already has).
  /// Callbacks run after the work is marked done: wait() and test() may already report completion
  /// while a callback is still running. A callback runs on the progress engine's thread, or on the
  /// thread of a caller driving the engine inside wait() (ProgressEngine::drive); it must not wait
  /// for another operation, nor destroy the last Communicator of the process.
  void on_complete(std::function<void(const std::optional<Error>&)> callback) const;
  /// What the operation is ("allreduce #3 (f32 x 9, sum, ...) on comm 0 (rank 1 of 2)").
  [[nodiscard]] const std::string& description() const;
  /// False for a default-constructed Work.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

 private:
  void require_valid() const;
  std::shared_ptr<WorkState> state_;
};

}  // namespace strait::comm
