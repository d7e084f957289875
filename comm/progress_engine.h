// ProgressEngine: one thread per process that owns the transport and drives every operation of
// every communicator that shares it, so non-blocking collectives overlap the caller's compute.
//
// Operations are state machines (Op::advance) run in submission order; many may be in flight. The
// works of one ordered stream (a communicator's collectives) complete in submission order. When
// nothing moves, the thread spins briefly (STRAIT_SPIN_US, default 50 us) and then sleeps on the
// transport's event fd, so idle or waiting ranks do not burn a core (several ranks often share a
// core on small machines). Every operation has a deadline; one that passes it fails with Timeout
// naming what it still waits for. A failed operation's receives are cancelled. While an operation
// that needs polling (GPU work) is pending, the thread sleeps kPollInterval at a time instead.
// A caller blocked in Work::wait() first drives the engine itself (drive()) for STRAIT_SPIN_US
// (default: adaptive, 50 us - 5 ms, longer while waits end within it and shorter while they do
// not), yielding its core between polls when this host has more ranks than cores, so
// short operations finish without thread wake-ups; the transport is then used by one thread at a
// time under progress_mutex_ (UCX's serialized thread mode). Meanwhile the engine thread sleeps.
// Thread-safety: submit(), fail(), abort() and drive() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/transport/op.h"
#include "comm/transport/transport.h"
#include "comm/work.h"
#include "core/error.h"
#include "core/fd.h"

namespace strait::comm {

class ProgressEngine final : public WorkDriver,
                             public std::enable_shared_from_this<ProgressEngine> {
 public:
  // How often operations that need polling are advanced once spinning is over: short next to a
  // GPU collective of any size worth offloading, long enough to leave the core to others.
  static constexpr std::chrono::microseconds kPollInterval{20};

  explicit ProgressEngine(std::unique_ptr<Transport> transport);
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;
  // Fails what is still pending with Aborted, stops the thread, then destroys the transport.
  ~ProgressEngine() override;

  [[nodiscard]] Transport& transport() noexcept { return *transport_; }

  // Runs `op` on `stream` (a communicator). When `ordered`, its work completes only after the
  // earlier ordered works of the stream. A failure of any operation of a stream fails every other
  // pending operation of it and every later submission (its peers may be gone or out of step:
  // continuing could only hang or corrupt), as NCCL does with a communicator after an error.
  // `timeout` runs from now, or (DeadlineStart::AtWait) from when the work is waited for.
  // `describe` formats the operation's description when an error or a log first needs it.
  // `recorder`: the flight recorder whose entry `record_id` follows the operation (null: none).
  std::shared_ptr<WorkState> submit(std::unique_ptr<Op> op, Describer describe,
                                    std::chrono::milliseconds timeout, std::uint64_t stream,
                                    bool ordered, DeadlineStart start = DeadlineStart::AtSubmit,
                                    FlightRecorder* recorder = nullptr,
                                    std::uint64_t record_id = 0);
  // The same with the description already formatted.
  std::shared_ptr<WorkState> submit(std::unique_ptr<Op> op, std::string description,
                                    std::chrono::milliseconds timeout, std::uint64_t stream,
                                    bool ordered, DeadlineStart start = DeadlineStart::AtSubmit);
  // While one lives on a thread, that thread's submissions do not wake the engine thread: the
  // caller waits for them at once (a blocking collective) and drives them itself, and drive()
  // wakes the engine if its spin ends first. Saves a thread wake-up per short blocking call.
  class CallerWillWait {
   public:
    CallerWillWait();
    CallerWillWait(const CallerWillWait&) = delete;
    CallerWillWait& operator=(const CallerWillWait&) = delete;
    ~CallerWillWait();

   private:
    bool previous_;
  };
  // Called by Work::wait() before it blocks: progresses on the caller's thread for up to the spin
  // time (STRAIT_SPIN_US) while `work` is pending, so a short operation completes without the two
  // thread wake-ups (caller -> engine -> caller) that cost tens of microseconds each. Only one
  // thread progresses at a time (progress_mutex_); completion callbacks of operations finished
  // meanwhile run on the caller's thread. Returns work.done(). A no-op on the engine thread and
  // inside a completion callback.
  bool drive(const WorkState& work) override;
  // Called by Work::wait() when a wait that drive() did not finish has ended, with how long after
  // the wait began the operation completed: adapts the polling budget (see the .cpp).
  void wait_ended(std::chrono::steady_clock::duration waited) override;
  // An operation of `stream` run outside the engine (the blocking mailbox path) failed with
  // `cause`: the stream is unusable from now on (later submissions fail at once, as after an
  // operation of the engine's own), and its active operations are failed as by abort().
  void fail_stream(std::uint64_t stream, const Error& cause);
  // Why `stream` can no longer be used (one of its operations failed, or it was aborted: a
  // heartbeat's PeerLost), or nullopt. One atomic load while no stream is broken. Any thread.
  [[nodiscard]] std::optional<Error> broken(std::uint64_t stream);
  // Fails one pending operation (no-op when already finished).
  void fail(const std::shared_ptr<WorkState>& work, const Error& error) override;
  // Fails every pending operation of `stream` (0: all streams) with Aborted.
  void abort(std::uint64_t stream, const std::string& why);
  // The same with `error`'s code and message (a heartbeat's PeerLost, comm/heartbeat.h).
  void abort(std::uint64_t stream, const Error& error);
  // The peers the transport knows to be gone (Transport::peer_lost), after a fresh check_peers():
  // (world rank, how it was lost), ascending. Any thread; waits for the progressing thread's turn.
  // For Communicator::lost_peers() and reform() (comm/reform.h).
  std::vector<std::pair<int, std::string>> lost_peers();
  // As abort(), and returns only once the engine thread has failed them: none of the stream's
  // operations is advanced afterwards, so memory they point to (a destroyed communicator's
  // counters) may go. On the engine thread itself (a completion callback) it cannot wait and
  // behaves as abort().
  void abort_and_wait(std::uint64_t stream, const std::string& why);

 private:
  struct Entry {
    std::unique_ptr<Op> op;
    std::shared_ptr<WorkState> work;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout{};
    std::uint64_t stream = 0;
    bool ordered = false;
    bool finished = false;  // advance() returned true; completes when earlier ordered works have
  };
  struct Command {                    // fail/abort requests handed to the engine thread
    std::shared_ptr<WorkState> work;  // null: abort `stream`
    std::uint64_t stream = 0;
    Error error;
    std::shared_ptr<std::promise<void>> applied;  // set once applied (abort_and_wait)
  };

  void run();
  // One pass: pick up submissions and commands, progress the transport, advance the operations,
  // check deadlines, complete in order. With progress_mutex_ held. True when anything moved.
  bool iterate(std::vector<Command>& commands);
  void notify();
  void apply_commands(std::vector<Command>& commands);
  bool step_ops();
  void check_deadlines(std::chrono::steady_clock::time_point now);
  void complete_in_order();
  void fail_entry(Entry& entry, const Error& error);
  // Later submissions to `stream` (and those not yet picked up) fail at once with `cause`.
  void mark_broken(std::uint64_t stream, const Error& cause);
  // mark_broken, then fail the stream's active operations.
  void break_stream(std::uint64_t stream, const Error& cause);
  void sleep_until_event(std::chrono::steady_clock::time_point wake);
  // Sleeps until notify() or `wake`, whichever is first (not on the transport's events).
  void sleep_until_notified(std::chrono::steady_clock::time_point wake);
  // How long the engine thread naps at most while a caller drives (then it looks again).
  static constexpr std::chrono::milliseconds kDrivenNap{5};

  std::unique_ptr<Transport> transport_;
  std::mutex mutex_;  // guards incoming_, commands_, stop_
  // Set (under mutex_) whenever incoming_, commands_ or stop_ change; iterate() clears it.
  std::atomic<bool> inbox_{false};
  // Idle passes of iterate() that read the clock: one in kClockEvery (see iterate()).
  static constexpr unsigned kClockEvery = 8;
  unsigned idle_passes_ = 0;  // under progress_mutex_
  std::deque<Entry> incoming_;
  std::vector<Command> commands_;
  bool stop_ = false;
  // Held by whichever thread progresses: the engine thread, or a caller in drive(). Guards
  // active_, the transport and the two times below.
  std::mutex progress_mutex_;
  std::atomic<int> inline_drivers_{0};        // callers spinning in drive()
  std::atomic<std::size_t> active_count_{0};  // active_.size() after the last iterate()
  std::chrono::steady_clock::time_point last_activity_{};
  std::chrono::steady_clock::time_point last_peer_check_{};
  std::deque<Entry> active_;
  // complete_in_order()'s scratch, kept so that polling allocates nothing.
  std::vector<std::uint64_t> blocked_streams_;
  std::vector<std::pair<std::uint64_t, Error>> broken_;  // guarded by mutex_
  std::atomic<bool> any_broken_{false};                  // !broken_.empty()
  Fd wake_fd_;                                           // eventfd: submissions and commands
  Fd epoll_fd_;                                          // wake_fd_ and the transport's event fd
  std::chrono::microseconds spin_;                       // the engine thread's, before it sleeps
  // The engine thread's polling window after a message, adaptive within [kMinEngineSpin, spin_]
  // (adapt_engine_spin); engine thread only.
  std::chrono::steady_clock::duration engine_spin_{};
  static constexpr std::chrono::microseconds kMinEngineSpin{2};
  void adapt_engine_spin(std::chrono::steady_clock::duration slept, bool active);
  // A caller's polling budget in drive() before it hands over: STRAIT_SPIN_US, or adaptive
  // between these bounds.
  static constexpr std::chrono::microseconds kMinDriveSpin{50};
  static constexpr std::chrono::microseconds kMaxDriveSpin{5000};
  std::atomic<std::int64_t> drive_spin_us_{0};
  bool adaptive_spin_ = true;
  bool yield_when_idle_ = false;
  void grow_spin();  // more local ranks than cores: drive() yields
  std::thread thread_;
};

}  // namespace strait::comm
