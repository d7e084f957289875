#include "comm/progress_engine.h"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/params.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;

// True on the engine thread, and on a caller's thread while it drives the engine inline: completion
// callbacks run then, and must not wait for the engine.
thread_local bool tls_progressing = false;
thread_local bool tls_caller_will_wait = false;  // ProgressEngine::CallerWillWait

// Nullopt when unset.
std::optional<std::chrono::microseconds> spin_from_env() {
  const std::optional<std::string> text = params::text("STRAIT_SPIN_US");
  if (!text) return std::nullopt;
  const char* v = text->c_str();
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  if (*end != '\0' || us < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("STRAIT_SPIN_US={} is not a non-negative integer (microseconds to "
                            "poll before sleeping)",
                            v));
  }
  return std::chrono::microseconds(us);
}

Error errno_error(const char* what) {
  return Error(ErrorCode::Internal,
               fmt::format("progress engine: {}: {}", what, std::strerror(errno)));
}

}  // namespace

ProgressEngine::ProgressEngine(std::unique_ptr<Transport> transport)
    : transport_(std::move(transport)) {
  // A waiting caller polls for up to 5 ms (adaptive, see wait_ended), as MPI busy-polls: with 50 us
  // (2 ranks, 2 cores), whenever the peer was descheduled a moment the wait fell back to the
  // engine thread and a wake-up, and an 8-byte allreduce averaged 30-900 us instead of 2-3 us.
  // With more local ranks than cores it yields the core between polls, so the peer can run.
  const auto env = spin_from_env();
  spin_ = env.value_or(std::chrono::microseconds(50));
  engine_spin_ = spin_;
  adaptive_spin_ = !env.has_value();
  drive_spin_us_.store(env ? env->count() : kMaxDriveSpin.count());
  yield_when_idle_ = !transport_->core_per_local_rank();
  wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) throw errno_error("eventfd");
  epoll_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_) throw errno_error("epoll_create1");
  for (int fd : {wake_fd_.get(), transport_->event_fd()}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw errno_error("epoll_ctl");
  }
  thread_ = std::thread([this] { run(); });
}

ProgressEngine::~ProgressEngine() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
    inbox_.store(true, std::memory_order_release);
  }
  notify();
  if (thread_.joinable()) thread_.join();
}

ProgressEngine::CallerWillWait::CallerWillWait() : previous_(tls_caller_will_wait) {
  tls_caller_will_wait = true;
}

ProgressEngine::CallerWillWait::~CallerWillWait() {
  tls_caller_will_wait = previous_;
}

void ProgressEngine::notify() {
  const std::uint64_t one = 1;
  // A full counter (never in practice) still leaves the fd readable, which is all we need.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

std::shared_ptr<WorkState> ProgressEngine::submit(std::unique_ptr<Op> op, std::string description,
                                                  std::chrono::milliseconds timeout,
                                                  std::uint64_t stream, bool ordered,
                                                  DeadlineStart start) {
  return submit(std::move(op), Describer([d = std::move(description)] { return d; }), timeout,
                stream, ordered, start);
}

std::shared_ptr<WorkState> ProgressEngine::submit(std::unique_ptr<Op> op, Describer describe,
                                                  std::chrono::milliseconds timeout,
                                                  std::uint64_t stream, bool ordered,
                                                  DeadlineStart start, FlightRecorder* recorder,
                                                  std::uint64_t record_id) {
  auto work = std::make_shared<WorkState>(std::move(describe));
  if (recorder != nullptr) work->trace(recorder, record_id);
  work->engine = weak_from_this();
  if (start == DeadlineStart::AtWait) work->wait_timeout = timeout;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [s, cause] : broken_) {
      if (s == stream) {
        work->complete(Error(cause.code(), fmt::format("{}: not started: the communicator is "
                                                       "unusable after an earlier error: {}",
                                                       work->description(), cause.message())));
        return work;
      }
    }
    if (stop_) {
      work->complete(
          Error(ErrorCode::Aborted,
                fmt::format("{}: the communicator is being destroyed", work->description())));
      return work;
    }
    Entry e;
    e.op = std::move(op);
    e.work = work;
    e.timeout = timeout;
    e.deadline = start == DeadlineStart::AtWait ? Clock::time_point::max() : Clock::now() + timeout;
    e.stream = stream;
    e.ordered = ordered;
    incoming_.push_back(std::move(e));
    inbox_.store(true, std::memory_order_release);
  }
  if (!tls_caller_will_wait) notify();
  return work;
}

void ProgressEngine::fail(const std::shared_ptr<WorkState>& work, const Error& error) {
  {
    const std::lock_guard lock(mutex_);
    commands_.push_back(Command{work, 0, error, nullptr});
    inbox_.store(true, std::memory_order_release);
  }
  notify();
}

void ProgressEngine::abort(std::uint64_t stream, const std::string& why) {
  {
    const std::lock_guard lock(mutex_);
    commands_.push_back(Command{nullptr, stream, Error(ErrorCode::Aborted, why), nullptr});
    inbox_.store(true, std::memory_order_release);
  }
  notify();
}

void ProgressEngine::abort(std::uint64_t stream, const Error& error) {
  {
    const std::lock_guard lock(mutex_);
    commands_.push_back(Command{nullptr, stream, error, nullptr});
    inbox_.store(true, std::memory_order_release);
  }
  notify();
}

void ProgressEngine::abort_and_wait(std::uint64_t stream, const std::string& why) {
  if (tls_progressing) return abort(stream, why);
  auto applied = std::make_shared<std::promise<void>>();
  std::future<void> done = applied->get_future();
  {
    const std::lock_guard lock(mutex_);
    // The engine thread runs until the engine is destroyed, which the caller's reference to it
    // prevents: the command is always applied.
    commands_.push_back(Command{nullptr, stream, Error(ErrorCode::Aborted, why), applied});
    inbox_.store(true, std::memory_order_release);
  }
  notify();
  done.wait();
}

void ProgressEngine::fail_entry(Entry& entry, const Error& error) {
  if (entry.work->done()) return;
  try {
    entry.op->cancel(*transport_);
  } catch (const std::exception&) {
    // Cancelling is best effort; the error that made us cancel is what the caller needs.
  }
  // The stream is marked broken before the completion wakes the caller: the caller's next
  // submission must fail at once, not run (and time out) on a communicator whose peers are gone
  // or out of step.
  mark_broken(entry.stream, error);
  entry.work->complete(error);
  break_stream(entry.stream, error);
}

void ProgressEngine::mark_broken(std::uint64_t stream, const Error& cause) {
  std::vector<Entry> not_started;
  {
    const std::lock_guard lock(mutex_);
    const bool known = std::any_of(broken_.begin(), broken_.end(),
                                   [&](const auto& b) { return b.first == stream; });
    if (!known) broken_.emplace_back(stream, cause);
    any_broken_.store(true, std::memory_order_release);
    // Submitted before the stream broke but not yet picked up by this thread: they would
    // otherwise start on the broken stream.
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      if (it->stream == stream) {
        not_started.push_back(std::move(*it));
        it = incoming_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& e : not_started) {  // outside the lock: completion runs the work's callbacks
    e.work->complete(Error(cause.code(), fmt::format("{}: not started: the communicator is "
                                                     "unusable after an earlier error: {}",
                                                     e.work->description(), cause.message())));
  }
}

void ProgressEngine::fail_stream(std::uint64_t stream, const Error& cause) {
  mark_broken(stream, cause);
  abort(stream, cause);
}

void ProgressEngine::break_stream(std::uint64_t stream, const Error& cause) {
  mark_broken(stream, cause);
  for (auto& e : active_) {
    if (e.stream != stream || e.work->done()) continue;
    fail_entry(e, Error(cause.code(), fmt::format("{}: failed because an operation on the same "
                                                  "communicator failed: {}",
                                                  e.work->description(), cause.message())));
  }
}

void ProgressEngine::apply_commands(std::vector<Command>& commands) {
  for (auto& c : commands) {
    for (auto& e : active_) {
      if (c.work && e.work == c.work) {
        // A caller's expired wait: say what the operation was still waiting for.
        fail_entry(e, c.error.code() == ErrorCode::Timeout
                          ? Error(ErrorCode::Timeout,
                                  fmt::format("{}; still waiting for {}. A rank may be stuck, dead "
                                              "or calling a different operation",
                                              c.error.message(), e.op->waiting_for()))
                          : c.error);
      } else if (!c.work && (c.stream == 0 || e.stream == c.stream)) {
        // The command's code: Aborted from abort(), PeerLost from a heartbeat (comm/heartbeat.h).
        fail_entry(e, Error(c.error.code(), fmt::format("{}: aborted: {}", e.work->description(),
                                                        c.error.message())));
      }
    }
    if (!c.work) {
      // Later submissions to an aborted communicator fail at once.
      if (c.stream != 0) break_stream(c.stream, c.error);
    }
    if (c.applied) c.applied->set_value();
  }
  commands.clear();
}

bool ProgressEngine::step_ops() {
  bool moved = false;
  for (auto& e : active_) {
    if (e.finished || e.work->done()) continue;
    try {
      if (e.op->advance(*transport_)) {
        e.finished = true;
        moved = true;
      }
    } catch (const Error& err) {
      fail_entry(e, Error(err.code(), fmt::format("{}: {}", e.work->description(), err.message())));
      moved = true;
    } catch (const std::exception& ex) {
      fail_entry(e, Error(ErrorCode::Internal, fmt::format("{}: unexpected exception: {}",
                                                           e.work->description(), ex.what())));
      moved = true;
    }
  }
  return moved;
}

void ProgressEngine::check_deadlines(Clock::time_point now) {
  for (auto& e : active_) {
    if (e.finished || e.work->done() || now < e.deadline) continue;
    fail_entry(e, timeout_error(e.work->description(), e.timeout, e.op->waiting_for()));
  }
}

std::optional<Error> ProgressEngine::broken(std::uint64_t stream) {
  if (!any_broken_.load(std::memory_order_acquire)) return std::nullopt;
  const std::lock_guard lock(mutex_);
  for (const auto& [s, cause] : broken_) {
    if (s == stream) return cause;
  }
  return std::nullopt;
}

void ProgressEngine::complete_in_order() {
  auto& blocked = blocked_streams_;  // streams with an unfinished earlier ordered work
  blocked.clear();
  for (auto it = active_.begin(); it != active_.end();) {
    const bool is_blocked =
        it->ordered && std::find(blocked.begin(), blocked.end(), it->stream) != blocked.end();
    if (it->work->done()) {  // failed
      it = active_.erase(it);
    } else if (it->finished && !is_blocked) {
      it->work->complete(std::nullopt);
      it = active_.erase(it);
    } else {
      if (it->ordered) blocked.push_back(it->stream);
      ++it;
    }
  }
}

void ProgressEngine::sleep_until_event(Clock::time_point wake) {
  int timeout_ms = -1;
  if (wake != Clock::time_point::max()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 1000));
  }
  if (transport_->event_fd() < 0) timeout_ms = std::min(timeout_ms < 0 ? 1 : timeout_ms, 1);
  epoll_event events[4];
  const int n = ::epoll_wait(epoll_fd_.get(), events, 4, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == wake_fd_.get()) {
      std::uint64_t v = 0;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd_.get(), &v, sizeof v);
    }
  }
}

void ProgressEngine::sleep_until_notified(Clock::time_point wake) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
  pollfd pfd{wake_fd_.get(), POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(std::clamp<long long>(left, 0, 1000))) > 0) {
    std::uint64_t v = 0;
    [[maybe_unused]] const ssize_t r = ::read(wake_fd_.get(), &v, sizeof v);
  }
}

bool ProgressEngine::iterate(std::vector<Command>& commands) {
  // The inbox (submissions, commands, stop) is looked at under its lock only when a writer has
  // flagged it: a poll that finds nothing new takes no lock but progress_mutex_.
  if (inbox_.load(std::memory_order_acquire)) {
    const std::lock_guard lock(mutex_);
    inbox_.store(false, std::memory_order_relaxed);
    if (stop_) {
      inbox_.store(true, std::memory_order_relaxed);  // every later pass sees it too
      return false;
    }
    while (!incoming_.empty()) {
      incoming_.front().work->mark_started();
      active_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    commands.swap(commands_);
  }
  if (!commands.empty()) apply_commands(commands);
  bool moved = false;
  while (transport_->progress()) moved = true;
  moved |= step_ops();
  // The clock is read on every pass that moved and every kClockEvery-th idle one (a read costs
  // 20-40 ns in a VM, a fifth of an idle pass): deadlines and peer checks are milliseconds apart.
  if (!moved && ++idle_passes_ % kClockEvery != 0 && !active_.empty()) {
    complete_in_order();
    active_count_.store(active_.size(), std::memory_order_relaxed);
    return false;
  }
  const auto now = Clock::now();
  if (now - last_peer_check_ > std::chrono::milliseconds(10)) {
    transport_->check_peers();
    last_peer_check_ = now;
  }
  check_deadlines(now);
  complete_in_order();
  active_count_.store(active_.size(), std::memory_order_relaxed);
  if (moved) last_activity_ = now;
  return moved;
}

bool ProgressEngine::drive(const WorkState& work) {
  if (tls_progressing || std::this_thread::get_id() == thread_.get_id()) {
    notify();  // a submission under CallerWillWait may not have woken the engine thread
    return work.done();
  }
  struct Driving {  // counted while this thread drives; flagged while it holds the lock
    std::atomic<int>& drivers;
    explicit Driving(std::atomic<int>& d) : drivers(d) { drivers.fetch_add(1); }
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;
    ~Driving() {
      tls_progressing = false;
      drivers.fetch_sub(1);
    }
  } const driving(inline_drivers_);
  std::vector<Command> commands;
  const std::chrono::microseconds budget(drive_spin_us_.load(std::memory_order_relaxed));
  // The budget is for idle polling over the whole wait, not since the last message: a caller may
  // poll idle for the budget plus as long as it spent moving data. Restarting it on every move
  // kept a caller polling through a whole transfer over a slow link, whose bytes trickle in (a
  // 4 MiB allreduce at 500 Mbit/s: 6.6-19 ms of CPU against Gloo's 3.2-3.7, taken from the
  // training thread beside it); copies between local ranks, which move on most polls, go on.
  // The clock is read every kClockEvery polls and after every poll that moved; an interval
  // counts as busy when a poll in it moved.
  Clock::duration idle{0};
  Clock::duration busy{0};
  auto last = Clock::now();
  bool batch_moved = false;
  for (unsigned polls = 1; !work.done(); ++polls) {
    std::unique_lock lock(progress_mutex_, std::try_to_lock);
    if (lock.owns_lock()) {
      tls_progressing = true;
      const bool moved = iterate(commands);
      tls_progressing = false;
      batch_moved |= moved;
      // More ranks than cores: the peer this rank waits for may need this core. Yielding hands
      // it over at once (as Open MPI's yield_when_idle does), where sleeping on an event fd
      // would wait for a wake-up behind every other runnable thread.
      if (!moved && yield_when_idle_) {
        lock.unlock();
        std::this_thread::yield();
      }
    } else {
      std::this_thread::yield();
    }
    if (!batch_moved && polls % kClockEvery != 0) continue;
    const auto now = Clock::now();
    (batch_moved ? busy : idle) += now - last;
    last = now;
    batch_moved = false;
    if (idle > budget + busy) break;
  }
  if (adaptive_spin_ && work.done()) grow_spin();
  // Not done within the spin, or other operations still pending: the engine thread (asleep, and
  // not on the transport's events while this thread drove) takes over.
  if (!work.done() || active_count_.load(std::memory_order_relaxed) > 0) notify();
  return work.done();
}

void ProgressEngine::grow_spin() {
  const std::chrono::microseconds budget(drive_spin_us_.load(std::memory_order_relaxed));
  drive_spin_us_.store(std::min(budget * 2, kMaxDriveSpin).count(), std::memory_order_relaxed);
}

void ProgressEngine::wait_ended(std::chrono::steady_clock::duration waited) {
  // Adaptive spinning (as adaptive mutexes do). A wait whose operation completed after the polling
  // budget but within kMaxDriveSpin would have been cheaper polled through (the hand-over to the
  // engine thread and back costs milliseconds on a loaded host): grow the budget. `waited` ends at
  // the completion, not at this thread's wake-up: counting the wake-up's own milliseconds made a
  // loaded host shrink the budget after every hand-over and never recover (every later wait then
  // handed over too and took 4-5 ms; docs/results/torch.md). One far longer
  // (a peer computing through a pipeline bubble) only burns CPU that ranks sharing the cores need:
  // shrink it. 4 training ranks on 2 cores, 300 steps: 131 s polling 5 ms always, 109 s adaptive; 4
  // ranks' back-to-back 8-byte allreduces: 2.7 ms polling 50 us always, tens of us adaptive.
  if (!adaptive_spin_) return;
  if (waited <= kMaxDriveSpin) return grow_spin();
  const std::chrono::microseconds budget(drive_spin_us_.load(std::memory_order_relaxed));
  drive_spin_us_.store(std::max(budget / 2, kMinDriveSpin).count(), std::memory_order_relaxed);
}

void ProgressEngine::run() {
  // Named, so that top -H, perf and /proc/PID/task show whose CPU time this is.
  pthread_setname_np(pthread_self(), "strait-progress");
  std::vector<Command> commands;
  tls_progressing = true;
  for (;;) {
    std::unique_lock lock(progress_mutex_);
    if (inbox_.load(std::memory_order_acquire)) {  // stop_ sets it (and iterate() keeps it set)
      const std::lock_guard guard(mutex_);
      if (stop_) break;
    }
    const bool moved = iterate(commands);
    const auto now = Clock::now();
    if (moved) continue;
    // A caller spinning in drive() progresses for us: do not compete with it for the cores.
    const bool driven = inline_drivers_.load(std::memory_order_relaxed) > 0;
    if (!active_.empty() && !driven && now - last_activity_ < engine_spin_) {
      // More local ranks than cores: hand the core over between polls (see drive()).
      if (yield_when_idle_) {
        lock.unlock();
        std::this_thread::yield();
      }
      continue;
    }
    if (std::any_of(active_.begin(), active_.end(),
                    [](const Entry& e) { return !e.finished && e.op->needs_polling(); })) {
      lock.unlock();
      std::this_thread::sleep_for(kPollInterval);
      continue;
    }
    auto wake = Clock::time_point::max();
    for (const auto& e : active_) wake = std::min(wake, e.deadline);
    if (!active_.empty()) wake = std::min(wake, now + std::chrono::milliseconds(100));
    if (driven) {
      // Not on the transport's events: each arriving message would wake this thread to fight the
      // driving caller for a core (2 ranks on 2 cores: an 8-byte allreduce took 3 us or 50 us,
      // depending on who won). The caller notifies when it stops driving with work left.
      lock.unlock();
      sleep_until_notified(std::min(wake, now + kDrivenNap));
      lock.lock();
      continue;
    }
    if (transport_->event_fd() >= 0 && !transport_->arm()) continue;  // events already pending
    lock.unlock();
    const auto slept_at = Clock::now();
    sleep_until_event(wake);
    lock.lock();
    adapt_engine_spin(Clock::now() - slept_at, !active_.empty());
    transport_->check_peers();
    last_peer_check_ = last_activity_ = Clock::now();
  }
  const std::lock_guard progress(progress_mutex_);
  // Destruction: whatever is still pending can no longer finish.
  for (auto& e : active_) {
    if (e.work->done()) continue;
    try {
      e.op->cancel(*transport_);
    } catch (const std::exception&) {
    }
    e.work->complete(Error(ErrorCode::Aborted, fmt::format("{}: the communicator was destroyed "
                                                           "before the operation finished",
                                                           e.work->description())));
  }
  active_.clear();
  const std::lock_guard lock(mutex_);
  for (auto& e : incoming_) {
    e.work->complete(Error(ErrorCode::Aborted, fmt::format("{}: the communicator was destroyed",
                                                           e.work->description())));
  }
  incoming_.clear();
}

void ProgressEngine::adapt_engine_spin(Clock::duration slept, bool active) {
  // Adaptive, as drive()'s budget: polling spin_ after each message pays when the next one comes
  // within it (a sleep that short would have been cheaper polled through: grow the window), and
  // only burns a core when messages trickle in further apart (a slow link's bytes, one segment
  // every ~100 us at 500 Mbit/s: 50 us of polling after each took 40% of a core from the
  // training thread beside it): shrink it. Idle sleeps (nothing pending) say nothing.
  if (!active || !adaptive_spin_) return;  // STRAIT_SPIN_US fixes it
  const Clock::duration floor = std::min(spin_, kMinEngineSpin);
  const Clock::duration most = spin_;
  if (slept < spin_) {
    engine_spin_ = std::min(std::max(engine_spin_ * 2, floor), most);
  } else {
    engine_spin_ = std::max(engine_spin_ / 2, floor);
  }
}

std::vector<std::pair<int, std::string>> ProgressEngine::lost_peers() {
  std::vector<std::pair<int, std::string>> lost;
  const std::lock_guard progress(progress_mutex_);
  transport_->check_peers();
  for (int peer = 0; peer < transport_->size(); ++peer) {
    if (peer == transport_->rank()) continue;
    const std::string& how = transport_->peer_lost(peer);
    if (!how.empty()) lost.emplace_back(peer, how);
  }
  return lost;
}

}  // namespace strait::comm
