// HeartbeatMonitor: a world communicator's liveness signal through the root store, so that a peer
// that stops without its connections breaking (SIGSTOP, a hung host, a partition that leaves TCP
// half-open) is known lost within a bounded time instead of at the next operation's timeout (the
// torchft#164 request), and so that ranks still waiting in an old generation's collective learn
// that the others have begun to re-form it (comm/reform.h) instead of waiting for its timeout.
//
// One thread per world communicator, enabled by CommOptions::heartbeat (STRAIT_HEARTBEAT_S):
// every `interval` it adds 1 to "strait/heartbeat/<generation>/<rank>" and reads every peer's
// counter. A peer whose counter has not moved for `lease` (5 intervals; measured on this host's
// steady clock, so no clock agreement is needed) is reported lost: on_lost(peer, why) once per
// peer. A peer is therefore known lost within lease + interval (+ one store round trip) of its
// last beat. It also reads "strait/reform/<generation + 1>/decider" and calls on_reform() once,
// kReformGraceIntervals intervals after it first sees that a re-formation of the next generation
// has begun (an operation whose parts were all sent before the senders left completes in that
// grace; what is still pending then waits for ranks that have left).
// What it does not see: a process whose heartbeat thread runs while its work is stuck (a deadlock
// in the caller's code): the operation timeout covers that. The store must be reachable: when it
// is not (its server is gone), the monitor stops quietly; the transport's own loss detection and
// the timeouts remain. Cost: size() store requests per interval per rank (fine for tens of ranks;
// for thousands, a lighthouse that aggregates beats would be needed).
// Thread-safety: lost() may be called from any thread; the callbacks run on the monitor's thread.
// Destruction stops the thread (within one store round trip).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/bootstrap/store.h"

namespace strait::comm {

class HeartbeatMonitor {
 public:
  // Leases are this many intervals.
  static constexpr int kLeaseIntervals = 5;
  // on_reform() comes this many intervals after a re-formation is seen.
  static constexpr int kReformGraceIntervals = 2;

  HeartbeatMonitor(std::shared_ptr<Store> store, std::uint64_t generation, int rank, int size,
                   std::chrono::milliseconds interval,
                   std::function<void(int peer, const std::string& why)> on_lost,
                   std::function<void()> on_reform);
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;
  ~HeartbeatMonitor();

  // The peers whose lease lapsed, with why; ascending.
  [[nodiscard]] std::vector<std::pair<int, std::string>> lost() const;

 private:
  void run();

  std::shared_ptr<Store> store_;
  std::uint64_t generation_;
  int rank_;
  int size_;
  std::chrono::milliseconds interval_;
  std::function<void(int, const std::string&)> on_lost_;
  std::function<void()> on_reform_;
  mutable std::mutex mutex_;  // guards lost_ and stop_
  std::condition_variable wake_;
  std::vector<std::pair<int, std::string>> lost_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace strait::comm
