#include "comm/work.h"

#include <fmt/format.h>

#include "comm/flight_dump.h"
#include "comm/flight_recorder.h"

namespace strait::comm {

const std::string& WorkState::description() const {
  std::call_once(described_, [this] {
    description_ = describe_();
    describe_ = nullptr;  // releases what it captured
  });
  return description_;
}

bool WorkState::done() const {
  return finished_.load(std::memory_order_acquire);
}

bool WorkState::wait_until(std::chrono::steady_clock::time_point until) const {
  std::unique_lock lock(mutex_);
  return cv_.wait_until(lock, until, [this] { return done_; });
}

std::optional<Error> WorkState::error() const {
  const std::lock_guard lock(mutex_);
  return error_;
}

void WorkState::complete(std::optional<Error> error) {
  std::vector<std::function<void(const std::optional<Error>&)>> callbacks;
  {
    const std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    completed_at_.store(now.count(), std::memory_order_release);
    // Before waiters wake: a rank that throws this error and exits has its dump written.
    if (recorder_) {
      if (error_) {
        recorder_->failed(record_id_, *error_);
        fr::on_failure(*recorder_, *error_);
      } else {
        recorder_->finished(record_id_,
                            std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
      }
    }
    finished_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& cb : callbacks) cb(error_);
}

void WorkState::mark_started() const {
  if (recorder_) recorder_->started(record_id_);
}

void WorkState::on_complete(std::function<void(const std::optional<Error>&)> callback) {
  {
    const std::lock_guard lock(mutex_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(error_);
}

void Work::require_valid() const {
  if (!state_) {
    throw Error(ErrorCode::InvalidArgument,
                "this Work handle is empty: it was default-constructed or moved from");
  }
}

bool Work::test() const {
  require_valid();
  return state_->done();
}

void Work::wait() const {
  require_valid();
  if (state_->wait_timeout) return wait(*state_->wait_timeout);
  const auto start = std::chrono::steady_clock::now();
  bool driven = false;
  if (auto engine = state_->engine.lock()) driven = engine->drive(*state_);
  // The engine fails every operation at its deadline, so this wait is bounded. No reference to the
  // engine is held meanwhile: its destruction is what ends the waits of a destroyed communicator.
  state_->wait_until(std::chrono::steady_clock::time_point::max());
  if (auto engine = state_->engine.lock(); engine && !driven) {
    // How long polling would have had to last: until the operation completed, not until this
    // thread woke up after it (a wake-up costs milliseconds on a loaded host).
    engine->wait_ended(state_->completed_at() - start);
  }
  if (auto e = state_->error()) throw *e;
}

void Work::wait(std::chrono::milliseconds timeout) const {
  require_valid();
  const auto start = std::chrono::steady_clock::now();
  if (auto engine = state_->engine.lock()) engine->drive(*state_);
  if (!state_->wait_until(start + timeout)) {
    const Error timed_out(ErrorCode::Timeout,
                          fmt::format("{} did not finish within {} ms of being waited for",
                                      state_->description(), timeout.count()));
    // The engine cancels the operation's receives before completing it, so once this returns no
    // buffer of the operation is written any more, save by a transfer UCX had already started
    // (work.h).
    if (auto engine = state_->engine.lock()) {
      engine->fail(state_, timed_out);
    } else {
      state_->complete(timed_out);
    }
    state_->wait_until(std::chrono::steady_clock::time_point::max());
  }
  if (auto e = state_->error()) throw *e;
}

std::optional<Error> Work::error() const {
  require_valid();
  return state_->error();
}

void Work::on_complete(std::function<void(const std::optional<Error>&)> callback) const {
  require_valid();
  state_->on_complete(std::move(callback));
}

const std::string& Work::description() const {
  require_valid();
  return state_->description();
}

}  // namespace strait::comm
