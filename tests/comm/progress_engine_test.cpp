// ProgressEngine's polling of operations that no transport event announces (GPU work): with a
// transport whose event fd never fires, such an operation must still be seen to finish within
// about the poll interval, not after the engine's 100 ms wake-up timer.
#include "comm/progress_engine.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Moves nothing and never wakes the engine: it sleeps on an eventfd nobody writes.
class SilentTransport final : public Transport {
 public:
  SilentTransport() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  [[nodiscard]] int rank() const noexcept override { return 0; }
  [[nodiscard]] int size() const noexcept override { return 1; }
  RequestPtr isend(int /*peer*/, Tag /*tag*/, const void* /*buf*/, std::size_t /*len*/) override {
    return std::make_shared<TransportRequest>();
  }
  RequestPtr irecv(int /*peer*/, Tag /*tag*/, void* /*buf*/, std::size_t /*len*/) override {
    return std::make_shared<TransportRequest>();
  }
  void withdraw(std::span<const RequestPtr> /*requests*/,
                std::chrono::milliseconds /*budget*/) override {}
  bool progress() override { return false; }
  [[nodiscard]] int event_fd() const noexcept override { return fd_.get(); }
  bool arm() override { return true; }
  void check_peers() override {}
  [[nodiscard]] const std::string& peer_lost(int /*peer*/) const override { return none_; }

 private:
  Fd fd_;
  std::string none_;
};

// Finishes once `ready` is set, as a GPU event would.
class FlagOp final : public Op {
 public:
  FlagOp(const std::atomic<bool>& ready, bool polled) : ready_(ready), polled_(polled) {}
  bool advance(Transport& /*transport*/) override { return ready_.load(); }
  void cancel(Transport& /*transport*/) override {}
  [[nodiscard]] std::string waiting_for() const override { return "the flag"; }
  [[nodiscard]] bool needs_polling() const noexcept override { return polled_; }

 private:
  const std::atomic<bool>& ready_;
  bool polled_;
};

TEST(ProgressEngine, OperationsThatNeedPollingAreSeenToFinishPromptly) {
  ASSERT_TRUE(SilentTransport().event_fd() >= 0);
  auto engine = std::make_shared<ProgressEngine>(std::make_unique<SilentTransport>());
  std::vector<double> latency_ms;
  for (int trial = 0; trial < 7; ++trial) {
    std::atomic<bool> ready{false};
    auto work = engine->submit(std::make_unique<FlagOp>(ready, true), "polled op", 10s, 1, true);
    std::this_thread::sleep_for(30ms);  // well past spinning: the engine would be asleep now
    const auto set = Clock::now();
    ready.store(true);
    ASSERT_TRUE(work->wait_until(Clock::now() + 5s));
    latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - set).count());
    EXPECT_FALSE(work->error().has_value());
  }
  std::sort(latency_ms.begin(), latency_ms.end());
  // Sleeping on the fd instead would take up to the 100 ms wake-up timer (about 50 ms typically);
  // polling takes the 20 us interval plus scheduling delays.
  EXPECT_LT(latency_ms[latency_ms.size() / 2], 20.0)
      << "median latency; the slowest was " << latency_ms.back() << " ms";
}

}  // namespace
}  // namespace strait::comm
