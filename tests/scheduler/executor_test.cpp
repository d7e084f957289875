// The pipeline executor on one rank (no communicators needed): activation offload gives the same
// bits as keeping every stash in the model, with fewer activation slots, and a failing activation
// store is an error naming the microbatch and the stage; several model chunks on the rank
// (interleaved 1F1B, ZB-V) hand activations and gradients over in memory and train the same model.
#include "scheduler/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/rank_model.h"
#include "model/transformer_stage.h"
#include "offload/activation_store.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_sim.h"
#include "train/data_parallel_sync.h"

namespace strait::sched {
namespace {

using train::DataParallelSync;
using train::GradientCompression;
using train::GradientLayout;

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

// Three plain SGD steps (lr 0.05) of `exec` on the same random tokens for every caller; the losses.
std::vector<double> three_sgd_steps(PipelineExecutor& exec) {
  std::mt19937_64 rng(9);
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    const auto tokens = random_ids(rng, kM * kB * kT);
    const auto targets = random_ids(rng, kM * kB * kT);
    const StepStats st =
        exec.run_step(step, tokens, targets, [](std::span<float> p, std::span<const float> g) {
          for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.05F * g[i];
        });
    losses.push_back(st.loss);
  }
  return losses;
}

// Three SGD steps of the whole model as one stage under `schedule`.
Result train(const Schedule& schedule, std::unique_ptr<offload::ActivationStore> store = nullptr) {
  StageModel<float> model(tiny(), {0, 2}, kB, peak_stashed_microbatches(schedule, 0), 5);
  TransformerStage stage(model);
  PipelineExecutor exec(schedule, 0, stage, {}, kB, kT);
  exec.set_gradient_sync(std::make_unique<DataParallelSync>(PipelineComms{}, 0, 1, GradientLayout{},
                                                            GradientCompression{}, 1.0));
  if (store) exec.set_activation_store(std::move(store));
  Result run;
  run.slots = model.slots();
  run.losses = three_sgd_steps(exec);
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

// --- Several chunks on one rank ------------------------------------------------------------------

GptConfig four_layers() {
  GptConfig c = tiny();
  c.layers = 4;
  return c;
}

// Three SGD steps of the 4-layer model under `schedule` on one rank (P = 1), its chunks built by
// RankModel, the tied embedding's two copies (when two chunks hold them) summed by the sync.
Result train_chunks(const Schedule& schedule,
                    std::unique_ptr<offload::ActivationStore> store = nullptr) {
  RankModel model(four_layers(), schedule, 0, kB, 5);
  PipelineExecutor exec(schedule, 0, model.pipeline_stages(), {}, kB, kT);
  GradientLayout layout;
  if (const auto t = model.tied_wte()) layout.tied = GradientLayout::Range{t->offset, t->count};
  if (const auto t = model.tied_copy())
    layout.tied_copy = GradientLayout::Range{t->offset, t->count};
  exec.set_gradient_sync(std::make_unique<DataParallelSync>(PipelineComms{}, 0, 1, layout,
                                                            GradientCompression{}, 1.0));
  if (store) exec.set_activation_store(std::move(store));
  Result run;
  run.slots = model.slots();
  run.losses = three_sgd_steps(exec);
  // Every tensor once, by name, in name order: comparable whatever the split.
  std::vector<std::pair<std::string, std::vector<float>>> named;
  for (const TensorInfo& t : model.tensors()) {
    if (model.is_tied_copy(t)) continue;
    const auto p = model.params().subspan(t.offset, t.count);
    named.emplace_back(t.name, std::vector<float>(p.begin(), p.end()));
  }
  std::sort(named.begin(), named.end());
  for (const auto& [name, values] : named) {
    run.params.insert(run.params.end(), values.begin(), values.end());
  }
  // The tied copies stayed one.
  if (const auto copy = model.tied_copy()) {
    const auto a = model.params().subspan(model.tied_wte()->offset, copy->count);
    const auto b = model.params().subspan(copy->offset, copy->count);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "the two wte copies diverged";
  }
  return run;
}

TEST(ExecutorChunks, RankModelLaysOutTheChunksStagesInOneBuffer) {
  // ZB-V on 2 ranks: rank 0 holds stages 0 and 3 (both ends: two wte), rank 1 stages 1 and 2.
  const Schedule zbv = make_zb_v(2, 4);
  const RankModel r0(four_layers(), zbv, 0, kB, 5);
  const RankModel r1(four_layers(), zbv, 1, kB, 5);
  EXPECT_EQ(r0.stage(0), 0);
  EXPECT_EQ(r0.stage(1), 3);
  EXPECT_EQ(r1.stage(0), 1);
  EXPECT_EQ(r1.stage(1), 2);
  ASSERT_TRUE(r0.tied_wte() && r0.tied_copy());
  EXPECT_FALSE(r1.tied_wte() || r1.tied_copy());
  EXPECT_TRUE(r0.holds_first_stage() && r0.holds_last_stage());
  // The same weights, tensor by tensor, as one stage holding the whole model.
  StageModel<float> whole(four_layers(), {0, 4}, kB, 1, 5);
  std::size_t total = 0;
  for (const RankModel* r : {&r0, &r1}) {
    for (int c = 0; c < r->chunks(); ++c) {
      EXPECT_EQ(r->chunk(c).params().data(),
                r->params().data() + (c == 0 ? 0 : r->chunk(0).params().size()));
    }
    for (const TensorInfo& t : r->tensors()) {
      const auto got = r->params().subspan(t.offset, t.count);
      const auto want = whole.param(t.name);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << t.name;
      if (!r->is_tied_copy(t)) total += t.count;
    }
  }
  EXPECT_EQ(total, whole.params().size());
  EXPECT_EQ(StageModel<float>::parameter_count(four_layers(), {1, 3}),
            StageModel<float>(four_layers(), {1, 3}, 1, 1, 5).params().size());
  // Interleaved on 2 ranks: chunk c of rank r is stage c * 2 + r.
  const RankModel i1(four_layers(), make_interleaved_1f1b(2, 4, 2), 1, kB, 5);
  EXPECT_EQ(i1.stage(0), 1);
  EXPECT_EQ(i1.stage(1), 3);
  EXPECT_TRUE(i1.tied_wte() && !i1.tied_copy());
  EXPECT_TRUE(i1.is_tied_copy(i1.tensors()[i1.chunk(0).tensors().size()]));  // stage 3's wte
  // More stages than layers is refused with the fix.
  try {
    (void)RankModel(tiny(), make_interleaved_1f1b(2, 4, 2), 0, kB, 5);
    ADD_FAILURE() << "split 2 layers into 4 stages";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 4 model stages (2 ranks x 2 chunks) but the model "
                                         "has 2 layers"),
              std::string::npos)
        << e.what();
  }
}

TEST(ExecutorChunks, ChunksOnOneRankTrainTheSameModel) {
  // Interleaved with 2 chunks and ZB-V on one rank split the model the same way (stage 0: layers
  // 0-1 and wte, stage 1: layers 2-3 and the head), so their bits agree (ZB-V's B / W split
  // changes none).
  const Result inter = train_chunks(make_interleaved_1f1b(1, kM, 2));
  const Result zbv = train_chunks(make_zb_v(1, kM));
  EXPECT_EQ(inter.losses, zbv.losses);
  EXPECT_TRUE(inter.params == zbv.params);
  // DualPipeV (OVERLAP_F_B pairs, full and split backwards mixed) on the same split: the same bits.
  const Result dual = train_chunks(make_dualpipev(1, kM));
  EXPECT_EQ(dual.losses, zbv.losses);
  EXPECT_TRUE(dual.params == zbv.params);
  // Against the model as one stage (one chunk, a single wte): the same up to float rounding of
  // the sums taken in another order (the tied gradient is a + b instead of one accumulation).
  const Result one = train_chunks(make_gpipe(1, kM));
  ASSERT_EQ(one.losses.size(), inter.losses.size());
  ASSERT_EQ(one.params.size(), inter.params.size());
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(inter.losses[s], one.losses[s], 1e-5 * std::abs(one.losses[s])) << "step " << s;
  }
  double worst = 0;
  for (std::size_t i = 0; i < one.params.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(inter.params[i] - one.params[i])));
  }
  EXPECT_LT(worst, 1e-5);
  // Four chunks (one layer each) as well, and with their stashes offloaded: the same bits.
  const Result four = train_chunks(make_interleaved_1f1b(1, kM, 4));
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(four.losses[s], one.losses[s], 1e-5 * std::abs(one.losses[s])) << "step " << s;
  }
  auto store = std::make_unique<TestStore>();
  TestStore* counts = store.get();
  const Result offloaded =
      train_chunks(add_activation_offload(make_interleaved_1f1b(1, kM, 4), 0), std::move(store));
  EXPECT_GT(counts->offloads, 0);
  EXPECT_LT(offloaded.slots, four.slots);
  EXPECT_EQ(offloaded.losses, four.losses);
  EXPECT_TRUE(offloaded.params == four.params);
  // The comparison can fail: other data gives other losses.
  EXPECT_NE(one.losses[1], one.losses[0]);
}

TEST(ExecutorChunks, ChunksThatDoNotShareABufferAreRejected) {
  const Schedule s = make_interleaved_1f1b(1, kM, 2);
  StageModel<float> a(four_layers(), {0, 2}, kB, kM, 5);
  StageModel<float> b(four_layers(), {2, 4}, kB, kM, 5);
  TransformerStage sa(a), sb(b);
  try {
    PipelineExecutor exec(s, 0, std::vector<PipelineStage*>{&sa, &sb}, {}, kB, kT);
    ADD_FAILURE() << "accepted chunks in separate buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("chunk 1's params do not follow chunk 0's"),
              std::string::npos)
        << e.what();
  }
  try {
    PipelineExecutor exec(s, 0, sa, {}, kB, kT);
    ADD_FAILURE() << "accepted one chunk for a 2-chunk schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("puts 2 model chunks on each rank but 1 were given"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strait::sched
