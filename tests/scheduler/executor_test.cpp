// The pipeline executor on one stage (no communicators needed): activation offload gives the same
// bits as keeping every stash in the model, with fewer activation slots, and a failing activation
// store is an error naming the microbatch and the stage.
#include "scheduler/executor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/activation_store.h"
#include "scheduler/grad_sync.h"
#include "scheduler/model/transformer_stage.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"

namespace strait::sched {
namespace {

constexpr int kB = 2, kT = 8, kM = 6;

GptConfig tiny() {
  GptConfig c;
  c.vocab = 17;
  c.ctx = kT;
  c.layers = 2;
  c.dim = 16;
  c.heads = 2;
  return c;
}

std::vector<std::int32_t> random_ids(std::mt19937_64& rng, std::size_t n) {
  std::uniform_int_distribution<std::int32_t> d(0, tiny().vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Counts what passes through, and can fail the offload or reload of one microbatch.
class TestStore final : public offload::ActivationStore {
 public:
  int fail_offload_of = -1;
  int fail_reload_of = -1;
  bool corrupt = false;  // flip an exponent bit in the middle of every reloaded stash
  int offloads = 0;
  int reloads = 0;

  std::future<void> offload(int key, std::span<const std::byte> bytes) override {
    ++offloads;
    if (key == fail_offload_of) return failed("disk full");
    return inner_->offload(key, bytes);
  }
  std::future<void> reload(int key, std::span<std::byte> bytes) override {
    ++reloads;
    auto f = inner_->reload(key, bytes);
    if (key == fail_reload_of) {
      f.get();
      return failed("checksum mismatch");
    }
    if (corrupt) {
      f.get();
      bytes[(bytes.size() / 2) / 4 * 4 + 3] ^= std::byte{0x40};  // a float's top byte
      std::promise<void> done;
      done.set_value();
      return done.get_future();
    }
    return f;
  }
  [[nodiscard]] std::string_view kind() const noexcept override { return "test"; }
  [[nodiscard]] std::size_t allocated_bytes() const noexcept override {
    return inner_->allocated_bytes();
  }

 private:
  static std::future<void> failed(const std::string& why) {
    std::promise<void> p;
    p.set_exception(std::make_exception_ptr(Error(ErrorCode::Io, why)));
    return p.get_future();
  }
  std::unique_ptr<offload::ActivationStore> inner_ = offload::make_host_activation_store();
};

struct Result {
  std::vector<double> losses;
  std::vector<float> params;
  int slots = 0;
};

// Three SGD steps of the whole model as one stage under `schedule`.
Result train(const Schedule& schedule, std::unique_ptr<offload::ActivationStore> store = nullptr) {
  StageModel<float> model(tiny(), {0, 2}, kB, peak_stashed_microbatches(schedule, 0), 5);
  TransformerStage stage(model);
  PipelineExecutor exec(schedule, 0, stage, {}, kB, kT);
  exec.set_gradient_sync(std::make_unique<DataParallelSync>(PipelineComms{}, 0, 1, GradientLayout{},
                                                            GradientCompression{}, 1.0));
  if (store) exec.set_activation_store(std::move(store));
  std::mt19937_64 rng(9);
  Result run;
  run.slots = model.slots();
  for (int step = 0; step < 3; ++step) {
    const auto tokens = random_ids(rng, kM * kB * kT);
    const auto targets = random_ids(rng, kM * kB * kT);
    const StepStats st =
        exec.run_step(step, tokens, targets, [](std::span<float> p, std::span<const float> g) {
          for (std::size_t i = 0; i < p.size(); ++i) {
            p[i] -= 0.05F * g[i];
          }
        });
    run.losses.push_back(st.loss);
  }
  run.params.assign(model.params().begin(), model.params().end());
  return run;
}

TEST(ExecutorActivationOffload, SameBitsWithFewerSlots) {
  const Result ref = train(make_gpipe(1, kM));
  EXPECT_EQ(ref.slots, kM);
  for (const int prefetch : {0, 1, 2}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    const Schedule s = add_activation_offload(make_gpipe(1, kM), prefetch);
    auto store = std::make_unique<TestStore>();
    TestStore* counts = store.get();
    const Result got = train(s, std::move(store));
    EXPECT_EQ(got.slots, prefetch + 1);
    EXPECT_EQ(counts->offloads, 3 * offloaded_microbatches(s, 0));
    EXPECT_GT(counts->offloads, 0);
    EXPECT_EQ(counts->reloads, counts->offloads);
    EXPECT_EQ(got.losses, ref.losses);
    EXPECT_TRUE(got.params == ref.params);
  }
  // The comparison can fail: one wrong bit in a reloaded stash changes the result.
  auto corrupting = std::make_unique<TestStore>();
  corrupting->corrupt = true;
  const Result bad = train(add_activation_offload(make_gpipe(1, kM), 1), std::move(corrupting));
  EXPECT_FALSE(bad.params == ref.params);
}

TEST(ExecutorActivationOffload, StoreFailureNamesMicrobatchAndStage) {
  const Schedule s = add_activation_offload(make_gpipe(1, kM), 1);
  for (const bool in_reload : {false, true}) {
    auto store = std::make_unique<TestStore>();
    (in_reload ? store->fail_reload_of : store->fail_offload_of) = 2;
    try {
      (void)train(s, std::move(store));
      ADD_FAILURE() << "a failing store went unnoticed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Io);
      const std::string want = in_reload
                                   ? "activation reload of microbatch 2 on stage 0 (test store): "
                                     "checksum mismatch"
                                   : "activation offload of microbatch 2 on stage 0 (test store): "
                                     "disk full";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(ExecutorActivationOffload, MissingStoreOrTooFewSlotsAreRejected) {
  const Schedule s = add_activation_offload(make_gpipe(1, kM), 1);
  try {
    (void)train(s);
    ADD_FAILURE() << "ran an offloading schedule without a store";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no activation store"), std::string::npos) << e.what();
  }
  StageModel<float> model(tiny(), {0, 2}, kB, 1, 5);
  TransformerStage stage(model);
  try {
    PipelineExecutor exec(s, 0, stage, {}, kB, kT);
    ADD_FAILURE() << "accepted a model with too few slots";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("needs 2 activation slots"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strait::sched
