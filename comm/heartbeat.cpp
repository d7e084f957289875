#include "comm/heartbeat.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <optional>

#include "comm/debug_log.h"
#include "core/error.h"

namespace strait::comm {

HeartbeatMonitor::HeartbeatMonitor(std::shared_ptr<Store> store, std::uint64_t generation, int rank,
                                   int size, std::chrono::milliseconds interval,
                                   std::function<void(int, const std::string&)> on_lost,
                                   std::function<void()> on_reform)
    : store_(std::move(store)),
      generation_(generation),
      rank_(rank),
      size_(size),
      interval_(interval),
      on_lost_(std::move(on_lost)),
      on_reform_(std::move(on_reform)),
      thread_([this] { run(); }) {}

HeartbeatMonitor::~HeartbeatMonitor() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::vector<std::pair<int, std::string>> HeartbeatMonitor::lost() const {
  const std::lock_guard lock(mutex_);
  return lost_;
}

void HeartbeatMonitor::run() {
  using Clock = std::chrono::steady_clock;
  const auto lease = interval_ * kLeaseIntervals;
  const auto key = [this](int r) { return fmt::format("strait/heartbeat/{}/{}", generation_, r); };
  const std::string reform_key = fmt::format("strait/reform/{}/decider", generation_ + 1);
  const auto start = Clock::now();
  // Per peer: the last counter value seen and when it changed (here).
  std::vector<std::int64_t> last(static_cast<std::size_t>(size_), -1);
  std::vector<Clock::time_point> changed(static_cast<std::size_t>(size_), start);
  std::vector<bool> reported(static_cast<std::size_t>(size_), false);
  bool reform_seen = false;
  std::optional<Clock::time_point> reform_since;
  try {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        if (stop_) return;
      }
      store_->add(key(rank_), 1);
      const auto now = Clock::now();
      for (int peer = 0; peer < size_; ++peer) {
        const auto p = static_cast<std::size_t>(peer);
        if (peer == rank_ || reported[p]) continue;
        const std::int64_t beat = store_->add(key(peer), 0);
        if (beat != last[p]) {
          last[p] = beat;
          changed[p] = now;
          continue;
        }
        if (now - changed[p] < lease) continue;
        const auto silent =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - changed[p]).count();
        const std::string why =
            beat <= 0 ? fmt::format(
                            "its heartbeat never arrived within {} ms (heartbeat lease {} "
                            "ms)",
                            silent, lease.count())
                      : fmt::format(
                            "its heartbeat lapsed: no beat for {} ms (lease {} ms: {} "
                            "intervals of {} ms)",
                            silent, lease.count(), kLeaseIntervals, interval_.count());
        reported[p] = true;
        debug::log(debug::Level::Warn, debug::kNet, "rank {} is lost: {}", peer, why);
        {
          const std::lock_guard lock(mutex_);
          lost_.emplace_back(peer, why);
          std::sort(lost_.begin(), lost_.end());
        }
        on_lost_(peer, why);
      }
      // The re-formation's grace: an operation whose last parts were sent before the senders left
      // still completes in it; what is pending after it waits for ranks that left.
      if (!reform_seen) {
        if (!reform_since && store_->add(reform_key, 0) > 0) reform_since = Clock::now();
        if (reform_since && Clock::now() - *reform_since >= kReformGraceIntervals * interval_) {
          reform_seen = true;
          on_reform_();
        }
      }
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, interval_, [this] { return stop_; });
      if (stop_) return;
    }
  } catch (const std::exception& e) {
    // The store is gone (its server's process ended): nothing more to learn from it.
    spdlog::debug("strait: rank {}'s heartbeat stops: {}", rank_, e.what());
  }
}

}  // namespace strait::comm
