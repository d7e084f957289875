// Spawns the built `strait` binary and checks `strait train` end to end, as a user runs it: the
// loss trajectory does not depend on how the global batch is split over pipeline stages,
// data-parallel replicas, microbatches and schedules; training lowers the loss; and bad settings,
// a wrong world size and a rank killed mid-step end the job with a clear message, never a hang.
//
// Models are tiny (2 layers, width 32, context 32) and the corpus is written by each test, so the
// tests need no installed data and a whole run takes well under a second on two cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/scratch_mount.h"
#include "tests/common/strait_process.h"
#include "tests/common/word_corpus.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::child_processes;
using strait::test::contains;
using strait::test::process_environment;
using strait::test::process_exists;
using strait::test::processes_with_environment;
using strait::test::TempDir;

// Every error case must end well within this: they fail before or right after the ranks start.
constexpr auto kQuick = 30s;

// `strait ARGS...` running with stdout and stderr captured in a file.
using strait::test::Strait;

using strait::test::write_word_corpus;

// One job's workspace: a corpus, an offload directory, the output and the metrics file.
class Job {
 public:
  Job() : corpus_(write_word_corpus(dir_.path())) { fs::create_directory(offload_dir()); }

  [[nodiscard]] const TempDir& dir() const { return dir_; }
  [[nodiscard]] fs::path offload_dir() const { return dir_.path() / "offload"; }

  // `strait train` with the tiny model, this job's corpus and offload directory, then `args`; a
  // flag in args replaces the default (CLI11 refuses a flag given twice).
  [[nodiscard]] std::vector<std::string> train_args(const std::vector<std::string>& args) const {
    const std::vector<std::pair<std::string, std::string>> defaults = {
        {"--layers", "2"},
        {"--dim", "32"},
        {"--heads", "2"},
        {"--ctx", "32"},
        {"--microbatch-size", "2"},
        {"--eval-sequences", "8"},
        {"--sample-bytes", "8"},
        {"--data", corpus_.string()},
        {"--offload-dir", offload_dir().string()}};
    std::vector<std::string> all = {"train"};
    for (const auto& [flag, value] : defaults) {
      if (std::find(args.begin(), args.end(), flag) == args.end()) {
        all.insert(all.end(), {flag, value});
      }
    }
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

 private:
  TempDir dir_;
  fs::path corpus_;
};

// NOLINTNEXTLINE(bugprone-exception-escape): a throw clang-tidy sees inside nlohmann::json
struct Metrics {
  std::vector<json> steps;   // the per-step records, in order
  std::vector<json> rounds;  // DiLoCo's per-round records, in order
  json summary;              // the final record (eval_loss, sample, ...)
  json memory;               // the largest rank's peak memory growth (strait plan reads it)
};

// Parses the --metrics file: one JSON object per line, each with a "type": "step" records in order,
// "eval" records, DiLoCo's "round" records, and the "summary" last.
Metrics read_metrics(const fs::path& path) {
  Metrics m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json record = json::parse(line);
    const std::string type = record.at("type").get<std::string>();
    if (type == "step") {
      m.steps.push_back(std::move(record));
    } else if (type == "round") {
      m.rounds.push_back(std::move(record));
    } else if (type == "summary") {
      m.summary = std::move(record);
    } else if (type == "memory") {
      m.memory = std::move(record);
    } else {
      EXPECT_EQ(type, "eval") << line;
    }
  }
  return m;
}

// Runs `strait train` to completion with --metrics and returns the metrics (failing the test, with
// the output, when the run fails).
Metrics train(const Job& job, const std::string& name, const std::vector<std::string>& args) {
  const fs::path metrics = job.dir().path() / (name + ".jsonl");
  std::vector<std::string> all = args;
  all.insert(all.end(), {"--metrics", metrics.string()});
  Strait run(job.train_args(all), job.dir().path() / (name + ".out"));
  const int code = run.exit_code(120s);
  EXPECT_EQ(code, 0) << name << ":\n" << run.output();
  Metrics m = read_metrics(metrics);
  for (std::size_t i = 0; i < m.steps.size(); ++i) {
    EXPECT_EQ(m.steps[i].at("step").get<int>(), static_cast<int>(i) + 1) << name;
  }
  return m;
}

// A test's own arguments before or after the ones its runs share (the later of two equal options
// wins).
auto prefixed_by(const std::vector<std::string>& common) {
  return [common](std::vector<std::string> args) {
    args.insert(args.begin(), common.begin(), common.end());
    return args;
  };
}
auto followed_by(const std::vector<std::string>& common) {
  return [common](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
}

double relative_difference(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(a), std::abs(b));
}

// --- Same seed, same trajectory ------------------------------------------------------------------

// The global batch is 8 sequences of 32 bytes per step in every configuration (microbatches x
// microbatch size x replicas), so the data, the initial weights and every update are the same: the
// losses may differ only by float rounding (sums taken in other orders), far below 1e-5 relative.
TEST(StraitTrain, SameSeedGivesTheSameLossTrajectoryHoweverTheBatchIsSplit) {
  const Job job;
  const std::vector<std::string> common = {"--steps", "5", "--seed", "7"};
  const auto with = followed_by(common);
  const Metrics reference =
      train(job, "1x1", with({"--stages", "1", "--replicas", "1", "--microbatches", "8"}));
  ASSERT_EQ(reference.steps.size(), 5U);

  const std::map<std::string, std::vector<std::string>> configs = {
      {"2 stages x 1 replica, 1f1b",
       {"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule", "1f1b"}},
      {"2 stages x 2 replicas, 1f1b",
       {"--stages", "2", "--replicas", "2", "--microbatches", "4", "--schedule", "1f1b"}},
      {"2 stages x 2 replicas, gpipe",
       {"--stages", "2", "--replicas", "2", "--microbatches", "4", "--schedule", "gpipe"}},
  };
  int index = 0;
  for (const auto& [name, args] : configs) {
    const Metrics m = train(job, "config" + std::to_string(index++), with(args));
    ASSERT_EQ(m.steps.size(), 5U) << name;
    for (std::size_t s = 0; s < 5; ++s) {
      const double want = reference.steps[s].at("loss").get<double>();
      const double got = m.steps[s].at("loss").get<double>();
      EXPECT_LT(relative_difference(got, want), 1e-5)
          << name << ", step " << s + 1 << ": loss " << got << " vs " << want << " for 1 x 1";
      // The gradient norm (before clipping) and the learning rate agree as well.
      EXPECT_LT(relative_difference(m.steps[s].at("grad_norm").get<double>(),
                                    reference.steps[s].at("grad_norm").get<double>()),
                1e-5)
          << name << ", step " << s + 1;
      EXPECT_DOUBLE_EQ(m.steps[s].at("lr").get<double>(), reference.steps[s].at("lr").get<double>())
          << name << ", step " << s + 1;
    }
  }

  // The comparison can fail: another seed (other initial weights and batches) starts elsewhere.
  const Metrics other = train(
      job, "other-seed",
      {"--stages", "1", "--replicas", "1", "--microbatches", "8", "--steps", "5", "--seed", "8"});
  ASSERT_EQ(other.steps.size(), 5U);
  EXPECT_GT(relative_difference(other.steps[0].at("loss").get<double>(),
                                reference.steps[0].at("loss").get<double>()),
            1e-4);
}

// --- Training works ------------------------------------------------------------------------------

TEST(StraitTrain, FirstLossIsThatOfUniformPredictionsAndTrainingLowersIt) {
  const Job job;
  const Metrics m = train(job, "train",
                          {"--stages", "2", "--replicas", "2", "--microbatches", "4", "--steps",
                           "20", "--warmup", "5"});
  ASSERT_EQ(m.steps.size(), 20U);
  // GPT-2's initialisation (std 0.02, tied embeddings) gives logits of spread about
  // 0.02 * sqrt(dim) ~ 0.11, so the first predictions are nearly uniform over 256 bytes: the
  // cross-entropy exceeds ln 256 by about spread^2 / 2 ~ 0.01 nats.
  const double uniform = std::log(256.0);
  const double first = m.steps.front().at("loss").get<double>();
  EXPECT_NEAR(first, uniform, 0.05);

  // The text uses 29 distinct bytes (26 letters, space, '.', newline; a model that only learnt
  // which bytes occur would be at ln 29 ~ 3.4 nats): 20 steps must take the loss well below
  // uniform, on the training batches and on the held-out tail.
  double last5 = 0;
  for (std::size_t s = 15; s < 20; ++s) last5 += m.steps[s].at("loss").get<double>() / 5;
  EXPECT_LT(last5, first - 1.0) << "losses of steps 16-20 average " << last5;
  ASSERT_TRUE(m.summary.contains("eval_loss"));
  const double eval = m.summary.at("eval_loss").get<double>();
  EXPECT_LT(eval, first - 1.0);
  // The sample continues the prompt.
  EXPECT_EQ(m.summary.at("sample").get<std::string>().rfind("The ", 0), 0U) << m.summary.dump();
}

// --- What the end of a run shows ----------------------------------------------------------------

// "  NAME   NATS   BITS" as the end-of-run table prints a row (4 decimals each).
std::string fmt_figures(const std::string& name, double nats) {
  char row[160];
  std::snprintf(row, sizeof row, "  %-44s %9.4f %9.4f", name.c_str(), nats, nats / std::log(2.0));
  return row;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The held-out loss is given in bits per byte too, next to byte n-gram baselines. The training
// split's entropies are recomputed here from the corpus file (one file: its last floor(5% n) bytes
// are held out, corpus.h), with std::map counts.
TEST(StraitTrain, HeldOutLossComesInBitsNextToNgramBaselines) {
  const Job job;
  const Metrics m = train(job, "baselines",
                          {"--stages", "1", "--replicas", "1", "--microbatches", "4", "--steps",
                           "20", "--warmup", "5"});
  const json& s = m.summary;
  ASSERT_TRUE(s.contains("baselines")) << s.dump();
  const double eval = s.at("eval_loss").get<double>();
  EXPECT_NEAR(s.at("eval_bits_per_byte").get<double>(), eval / std::log(2.0), 1e-12);
  EXPECT_EQ(s.at("eval_positions").get<std::int64_t>(), 8 * 32);  // --eval-sequences x --ctx

  const std::string text = read_text(job.dir().path() / "corpus.txt");
  const std::string train_part = text.substr(0, text.size() - text.size() / 20);
  std::map<char, double> uni;
  std::map<std::pair<char, char>, double> pairs;
  std::map<char, double> rows;
  for (std::size_t i = 0; i < train_part.size(); ++i) {
    uni[train_part[i]] += 1;
    if (i + 1 < train_part.size()) {
      pairs[{train_part[i], train_part[i + 1]}] += 1;
      rows[train_part[i]] += 1;
    }
  }
  const auto n = static_cast<double>(train_part.size());
  double h1 = 0;
  for (const auto& [b, c] : uni) h1 -= c / n * std::log(c / n);
  double h2 = 0;
  for (const auto& [ab, c] : pairs) h2 -= c / (n - 1) * std::log(c / rows[ab.first]);
  const json& b = s.at("baselines");
  EXPECT_EQ(b.at("smoothing_alpha").get<double>(), 1.0);
  EXPECT_NEAR(b.at("unigram_entropy").get<double>(), h1, 1e-9);
  EXPECT_NEAR(b.at("bigram_entropy").get<double>(), h2, 1e-9);
  // Smoothing and unseen text cost a little on held-out bytes; the previous byte helps.
  const double unigram = b.at("unigram_held_out").get<double>();
  const double bigram = b.at("bigram_held_out").get<double>();
  EXPECT_GT(unigram, h1 - 0.1);
  EXPECT_LT(bigram, unigram - 0.5);

  // The printed table holds the same figures.
  const std::string out = read_text(job.dir().path() / "baselines.out");
  EXPECT_TRUE(contains(out, "held-out loss, 256 bytes")) << out;
  EXPECT_TRUE(contains(out, fmt_figures("model", eval))) << out;
  EXPECT_TRUE(contains(out, fmt_figures("bigram baseline (add-one, training counts)", bigram)))
      << out;
  EXPECT_TRUE(contains(out, fmt_figures("unigram baseline (add-one, training counts)", unigram)))
      << out;
  EXPECT_TRUE(contains(out, "model vs bigram baseline: ")) << out;
  EXPECT_TRUE(
      contains(out, "sample (top-k 200, temperature 0.8, seed 1337; 8 bytes after \"The \")"))
      << out;
}

// The sample's byte i is drawn from (--sample-seed, i) and the logits. With the initial weights
// (--steps 0), which are bit-identical for any stage split (transformer.h), every ranks layout
// writes the same bytes; another seed writes other bytes; --top-k 1 is --sample greedy.
TEST(StraitTrain, SampleIsFixedByItsSeedWhateverTheRanksLayout) {
  const Job job;
  const auto sample = [&](const std::string& name, std::vector<std::string> args) {
    args.insert(args.end(), {"--steps", "0", "--sample-bytes", "48"});
    const Metrics m = train(job, name, args);
    return m.summary.at("sample").get<std::string>();
  };
  const std::string one = sample("1x1", {"--stages", "1", "--replicas", "1"});
  EXPECT_EQ(one.rfind("The ", 0), 0U) << one;
  EXPECT_GT(one.size(), 4U + 48U - 1U) << one;
  EXPECT_EQ(sample("2x1", {"--stages", "2", "--replicas", "1"}), one);
  EXPECT_EQ(sample("2x2", {"--stages", "2", "--replicas", "2", "--microbatches", "2"}), one);
  EXPECT_EQ(sample("1x1-again", {"--stages", "1", "--replicas", "1"}), one);
  EXPECT_NE(sample("seed", {"--stages", "1", "--replicas", "1", "--sample-seed", "7"}), one);
  const std::string greedy =
      sample("greedy", {"--stages", "1", "--replicas", "1", "--sample", "greedy"});
  EXPECT_NE(greedy, one);
  EXPECT_EQ(sample("top1", {"--stages", "2", "--replicas", "1", "--top-k", "1"}), greedy);
}

// --- Activation offload --------------------------------------------------------------------------

// GPipe with 6 microbatches keeps 6 stashes per stage; offloaded (to pinned RAM, or to a swap file
// in --offload-dir) with prefetch 1 only 2 stay in the model. The stashes come back bit for bit, so
// every loss, gradient norm, the held-out loss and the sample are exactly those of the run without
// offload.
TEST(StraitTrain, ActivationOffloadLeavesTheLossTrajectoryBitIdentical) {
  const Job job;
  const std::vector<std::string> common = {"--stages",       "2", "--replicas", "1",
                                           "--microbatches", "6", "--schedule", "gpipe",
                                           "--steps",        "4", "--seed",     "7"};
  const auto with = followed_by(common);
  const Metrics none = train(job, "none", with({"--offload-activations", "none"}));
  ASSERT_EQ(none.steps.size(), 4U);
  EXPECT_EQ(none.summary.at("activation_slots"), json::array({6, 6}));
  const double bytes_none = none.summary.at("activation_bytes").get<double>();
  EXPECT_EQ(none.summary.at("activation_bytes_without_offload").get<double>(), bytes_none);

  for (const std::string store : {"cpu", "nvme"}) {
    const Metrics m = train(job, store, with({"--offload-activations", store}));
    ASSERT_EQ(m.steps.size(), 4U) << store;
    EXPECT_EQ(m.summary.at("offload_activations"), store);
    EXPECT_EQ(m.summary.at("activation_slots"), json::array({2, 2})) << store;
    EXPECT_EQ(m.summary.at("activation_slots_without_offload"), json::array({6, 6})) << store;
    EXPECT_DOUBLE_EQ(m.summary.at("activation_bytes").get<double>(), bytes_none / 3) << store;
    for (std::size_t s = 0; s < 4; ++s) {
      for (const char* key : {"loss", "grad_norm"}) {
        EXPECT_EQ(m.steps[s].at(key).get<double>(), none.steps[s].at(key).get<double>())
            << store << ": " << key << " at step " << s + 1;
      }
    }
    EXPECT_EQ(m.summary.at("eval_loss").get<double>(), none.summary.at("eval_loss").get<double>())
        << store;
    EXPECT_EQ(m.summary.at("sample"), none.summary.at("sample")) << store;
  }
  // The swap files are unlinked at once: nothing is left in the offload directory.
  EXPECT_TRUE(fs::is_empty(job.offload_dir()));
}

// --- Zero-bubble schedule and its trace ----------------------------------------------------------

// ZB-H1 splits each backward into B (input gradient) and a later W (weight gradients); W's run in
// microbatch order as 1F1B's backwards do, so the gradients are summed in the same order and the
// losses are 1F1B's bit for bit, with activation offload too. --trace writes one complete event
// per action of replica 0's ranks, W's included, which `strait schedule --from-trace` reads.
TEST(StraitTrain, ZbH1GivesOneFOneBsLossesBitForBitAndATrace) {
  const Job job;
  const std::vector<std::string> common = {"--stages",       "2", "--replicas", "1", "--steps", "3",
                                           "--microbatches", "8", "--seed",     "7"};
  const auto with = followed_by(common);
  const Metrics one = train(job, "1f1b", with({"--schedule", "1f1b"}));
  ASSERT_EQ(one.steps.size(), 3U);
  const fs::path trace = job.dir().path() / "zb.trace.json";
  const Metrics zb = train(job, "zb-h1", with({"--schedule", "zb-h1", "--trace", trace.string()}));
  // Prefetch 0: rank 0's stashes leave between F and B (at distance 1, ZB-H1 on 2 ranks would
  // save no slot and the transform makes no copies).
  const Metrics zb_off = train(
      job, "zb-h1-offload",
      with({"--schedule", "zb-h1", "--offload-activations", "cpu", "--offload-prefetch", "0"}));
  EXPECT_LT(zb_off.summary.at("activation_bytes").get<double>(),
            zb_off.summary.at("activation_bytes_without_offload").get<double>());
  for (const Metrics* m : {&zb, &zb_off}) {
    ASSERT_EQ(m->steps.size(), 3U);
    for (std::size_t s = 0; s < 3; ++s) {
      for (const char* key : {"loss", "grad_norm"}) {
        EXPECT_EQ(m->steps[s].at(key).get<double>(), one.steps[s].at(key).get<double>())
            << key << " at step " << s + 1;
      }
    }
  }
  const json doc = json::parse(strait::test::read_file(trace));
  EXPECT_EQ(doc.at("otherData").at("schedule"), "zb-h1");
  // Per rank and step: 8 F, 8 B, 8 W (rank 1; rank 0's are fused into its B's), 8 sends, 8
  // receives, ALLREDUCE_GRAD and OPTIM.
  std::map<int, int> per_rank;
  std::map<std::string, int> kinds;
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++per_rank[e.at("pid").get<int>()];
    ++kinds[e.at("cat").get<std::string>()];
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
  EXPECT_EQ(per_rank, (std::map<int, int>{{0, 3 * 34}, {1, 3 * 42}}));
  EXPECT_EQ(kinds["W"], 3 * 8);
  Strait from_trace({"schedule", "--from-trace", trace.string()}, job.dir().path() / "sched.out");
  EXPECT_EQ(from_trace.exit_code(60s), 0) << from_trace.output();
  EXPECT_TRUE(contains(from_trace.output(), "zb-h1 schedule, 2 ranks x 1 chunks, 8 microbatches"))
      << from_trace.output();
}

// A plan file (strait plan --output) sets the layout, schedule, offload and codec: the same losses
// as those flags given by hand, and the metrics carry the peak memory the planner compares with.
TEST(StraitTrain, PlanFileSetsTheLayoutAsItsFlagsWould) {
  const Job job;
  const fs::path plan = job.dir().path() / "plan.json";
  std::ofstream(plan) << R"({"plan": {"stages": 2, "replicas": 1, "schedule": "zb-h1", "chunks": 1,
    "microbatches": 4, "microbatch_size": 2, "offload_activations": "none",
    "offload_optimizer": "cpu", "codec": "none", "outer_steps": 0, "outer_codec": "none"}})";
  const std::vector<std::string> common = {"--steps", "2", "--seed", "7", "--layers", "2"};
  const auto with = followed_by(common);
  const Metrics by_hand = train(job, "by-hand",
                                with({"--stages", "2", "--replicas", "1", "--schedule", "zb-h1",
                                      "--microbatches", "4", "--microbatch-size", "2"}));
  const Metrics planned = train(job, "planned", with({"--plan", plan.string()}));
  ASSERT_EQ(planned.steps.size(), 2U);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(planned.steps[s].at("loss").get<double>(), by_hand.steps[s].at("loss").get<double>());
  }
  // Weights and gradients alone are 8 B per parameter of a stage: the peak grew by more.
  EXPECT_GT(planned.memory.at("peak_rank_growth_bytes").get<double>(), 8.0 * 100000);
  Strait bad(job.train_args({"--plan", (job.dir().path() / "missing.json").string()}),
             job.dir().path() / "bad.out");
  EXPECT_EQ(bad.exit_code(60s), 2) << bad.output();
  EXPECT_TRUE(contains(bad.output(), "cannot read it")) << bad.output();
}

// --- Several model chunks per rank: interleaved 1F1B and ZB-V
// --------------------------------------

// With 4 layers, interleaved (2 chunks per rank, stage c * P + r on rank r) and ZB-V (rank r holds
// stages r and 2P-1-r) split the model into 4 one-layer stages on 2 ranks. The global batch is
// that of the one-rank run, so the losses and gradient norms agree up to float rounding (sums in
// other orders: the tied embedding's gradient is summed over two copies, the norm over other
// parts), as for any other split. Where the split is the same the bits are too: ZB-V and
// interleaved with 2 chunks on one rank, and each schedule with its activations offloaded.
TEST(StraitTrain, InterleavedAndZbVTrainTheSameTrajectory) {
  const Job job;
  const std::vector<std::string> common = {"--steps", "4", "--seed", "7", "--layers", "4"};
  const auto with = followed_by(common);
  const Metrics reference =
      train(job, "1x1", with({"--stages", "1", "--replicas", "1", "--microbatches", "8"}));
  ASSERT_EQ(reference.steps.size(), 4U);
  const auto near = [&](const Metrics& m, const std::string& name) {
    ASSERT_EQ(m.steps.size(), 4U) << name;
    for (std::size_t s = 0; s < 4; ++s) {
      for (const char* key : {"loss", "grad_norm"}) {
        const double want = reference.steps[s].at(key).get<double>();
        const double got = m.steps[s].at(key).get<double>();
        EXPECT_LT(relative_difference(got, want), 1e-5)
            << name << ", step " << s + 1 << ": " << key << " " << got << " vs " << want;
      }
    }
    EXPECT_LT(relative_difference(m.summary.at("eval_loss").get<double>(),
                                  reference.summary.at("eval_loss").get<double>()),
              1e-5)
        << name;
  };
  const auto same_bits = [](const Metrics& a, const Metrics& b, const std::string& name) {
    ASSERT_EQ(a.steps.size(), b.steps.size()) << name;
    for (std::size_t s = 0; s < a.steps.size(); ++s) {
      for (const char* key : {"loss", "grad_norm"}) {
        EXPECT_EQ(a.steps[s].at(key).get<double>(), b.steps[s].at(key).get<double>())
            << name << ": " << key << " at step " << s + 1;
      }
    }
    EXPECT_EQ(a.summary.at("eval_loss").get<double>(), b.summary.at("eval_loss").get<double>())
        << name;
    EXPECT_EQ(a.summary.at("sample"), b.summary.at("sample")) << name;
  };

  const fs::path trace = job.dir().path() / "interleaved.trace.json";
  const Metrics inter =
      train(job, "interleaved",
            with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule",
                  "interleaved", "--chunks", "2", "--trace", trace.string()}));
  near(inter, "interleaved, 2 ranks x 2 chunks");
  const Metrics zbv =
      train(job, "zbv",
            with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule", "zbv"}));
  near(zbv, "zbv, 2 ranks");
  near(train(job, "interleaved-dp",
             with({"--stages", "2", "--replicas", "2", "--microbatches", "4", "--schedule",
                   "interleaved"})),
       "interleaved, 2 ranks x 2 replicas");
  near(
      train(job, "zbv-dp",
            with({"--stages", "2", "--replicas", "2", "--microbatches", "4", "--schedule", "zbv"})),
      "zbv, 2 ranks x 2 replicas");

  // The same split, the same bits: one rank with two chunks either way.
  same_bits(
      train(job, "interleaved-1",
            with({"--stages", "1", "--replicas", "1", "--microbatches", "8", "--schedule",
                  "interleaved"})),
      train(job, "zbv-1",
            with({"--stages", "1", "--replicas", "1", "--microbatches", "8", "--schedule", "zbv"})),
      "interleaved vs zbv on one rank");
  // Activation offload on chunked schedules: the same bits, fewer resident slots.
  const Metrics inter_off =
      train(job, "interleaved-offload",
            with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule",
                  "interleaved", "--offload-activations", "cpu"}));
  same_bits(inter_off, inter, "interleaved with offload");
  EXPECT_LT(inter_off.summary.at("activation_bytes").get<double>(),
            inter_off.summary.at("activation_bytes_without_offload").get<double>());
  const Metrics zbv_off =
      train(job, "zbv-offload",
            with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule", "zbv",
                  "--offload-activations", "nvme", "--offload-prefetch", "0"}));
  same_bits(zbv_off, zbv, "zbv with offload");
  // DualPipeV on ZB-V's split (stages r and 3 - r on rank r): the same bits, with offload too.
  same_bits(train(job, "dualpipev",
                  with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule",
                        "dualpipev"})),
            zbv, "dualpipev vs zbv");
  same_bits(train(job, "dualpipev-offload",
                  with({"--stages", "2", "--replicas", "1", "--microbatches", "8", "--schedule",
                        "dualpipev", "--offload-activations", "cpu"})),
            zbv, "dualpipev with offload vs zbv");
  EXPECT_LT(zbv_off.summary.at("activation_bytes").get<double>(),
            zbv_off.summary.at("activation_bytes_without_offload").get<double>());

  // The trace names the model stage of every action: rank r ran stages r and r + 2.
  const json doc = json::parse(strait::test::read_file(trace));
  EXPECT_EQ(doc.at("otherData").at("schedule"), "interleaved");
  std::map<int, std::set<int>> stages_of_rank;
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") != "F") continue;
    stages_of_rank[e.at("pid").get<int>()].insert(e.at("args").at("stage").get<int>());
  }
  EXPECT_EQ(stages_of_rank, (std::map<int, std::set<int>>{{0, {0, 2}}, {1, {1, 3}}}));
}

// --- Uneven splits (--stage-layers) --------------------------------------------------------------

// Where the pipeline is cut does not change the model's math: every layer runs the same kernels on
// the same inputs, and the tied embedding's gradient is the sum of its two copies' (a + b == b +
// a), so with clipping off (the global norm is summed over other parts) uneven splits of 4 layers
// into 2 or 3 stages give the even 2-stage split's losses, held-out loss and sample bit for bit
// (on the same schedule, 1F1B: GPipe accumulates the microbatches in another order).
// With clipping the norm's rounding differs, so they agree with one stage up to float rounding, as
// any split does. A split that does not fit the layers or the stages is refused, naming the fix.
TEST(StraitTrain, UnevenStageLayersTrainTheEvenSplitsLossesBitForBit) {
  const Job job;
  const std::vector<std::string> common = {"--steps",        "4", "--seed",      "7",
                                           "--layers",       "4", "--replicas",  "1",
                                           "--microbatches", "8", "--grad-clip", "0"};
  const auto with = followed_by(common);
  const Metrics even = train(job, "even", with({"--stages", "2"}));
  ASSERT_EQ(even.steps.size(), 4U);
  const std::map<std::string, std::vector<std::string>> splits = {
      {"3,1", {"--stages", "2", "--stage-layers", "3,1"}},
      {"1,3", {"--stages", "2", "--stage-layers", "1,3"}},
      {"2,1,1", {"--stages", "3", "--stage-layers", "2,1,1"}},
      {"1,2,1", {"--stages", "3", "--stage-layers", "1,2,1"}},
  };
  int index = 0;
  for (const auto& [name, args] : splits) {
    const Metrics m = train(job, "split" + std::to_string(index++), with(args));
    ASSERT_EQ(m.steps.size(), 4U) << name;
    for (std::size_t s = 0; s < 4; ++s) {
      EXPECT_EQ(m.steps[s].at("loss").get<double>(), even.steps[s].at("loss").get<double>())
          << name << ", step " << s + 1;
    }
    EXPECT_EQ(m.summary.at("eval_loss").get<double>(), even.summary.at("eval_loss").get<double>())
        << name;
    EXPECT_EQ(m.summary.at("sample"), even.summary.at("sample")) << name;
  }
  // With clipping: against one stage, as for any split.
  const auto clipped = [&](const std::vector<std::string>& args) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--steps", "4", "--seed", "7", "--layers", "4", "--replicas", "1",
                       "--microbatches", "8"});
    return a;
  };
  const Metrics one = train(job, "one", clipped({"--stages", "1"}));
  const Metrics uneven =
      train(job, "uneven-clipped", clipped({"--stages", "2", "--stage-layers", "3,1"}));
  ASSERT_EQ(uneven.steps.size(), 4U);
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_LT(relative_difference(uneven.steps[s].at("loss").get<double>(),
                                  one.steps[s].at("loss").get<double>()),
              1e-5)
        << "step " << s + 1;
  }
  // The comparison can fail: another seed starts elsewhere.
  EXPECT_NE(one.steps[0].at("loss").get<double>(),
            train(job, "seed8",
                  {"--stages", "2", "--stage-layers", "3,1", "--layers", "4", "--replicas", "1",
                   "--microbatches", "8", "--steps", "1", "--seed", "8"})
                .steps.at(0)
                .at("loss")
                .get<double>());

  for (const std::string bad : {"3,2", "4,0", "2,1"}) {
    Strait run(job.train_args({"--layers", "4", "--stages", "2", "--replicas", "1",
                               "--stage-layers", bad, "--steps", "1"}),
               job.dir().path() / ("bad" + bad + ".out"));
    EXPECT_NE(run.exit_code(kQuick), 0) << bad;
    EXPECT_TRUE(contains(run.output(), "--stage-layers " + bad)) << run.output();
    EXPECT_TRUE(contains(run.output(), "summing to --layers")) << run.output();
  }
}

// --- Placement (--placement) ---------------------------------------------------------------------

// Which world rank runs each (replica, stage) slot does not change the math: each pipeline's
// stages exchange the same activations, each stage's data-parallel group is ordered by replica as
// with the identity, and the job-wide sums add the same two replicas' figures. So with clipping off
// any permutation gives the identity's losses, held-out loss and sample bit for bit (2 stages x 2
// replicas; also with an uneven split). Rank 0 says which slot it runs (the proof that the
// permutation took effect), and bad values are refused, naming what is wrong.
TEST(StraitTrain, PlacementTrainsTheIdentitysLossesBitForBit) {
  const Job job;
  const std::vector<std::string> common = {
      "--steps",    "4", "--seed",         "7", "--layers",    "4", "--stages", "2",
      "--replicas", "2", "--microbatches", "4", "--grad-clip", "0"};
  const auto with = followed_by(common);
  const Metrics identity = train(job, "identity", with({}));
  ASSERT_EQ(identity.steps.size(), 4U);
  // placement -> the slot rank 0 runs (slot i of 3,2,1,0 is rank 3 - i: rank 0 runs slot 3).
  const std::vector<std::pair<std::string, std::string>> placements = {
      {"3,2,1,0", "replica 1's stage 1"},
      {"0,2,1,3", "replica 0's stage 0"},
      {"1,3,0,2", "replica 1's stage 0"}};
  int index = 0;
  for (const auto& [placement, slot] : placements) {
    const std::string name = "placement" + std::to_string(index++);
    const Metrics m = train(job, name, with({"--placement", placement}));
    ASSERT_EQ(m.steps.size(), 4U) << placement;
    for (std::size_t s = 0; s < 4; ++s) {
      EXPECT_EQ(m.steps[s].at("loss").get<double>(), identity.steps[s].at("loss").get<double>())
          << placement << ", step " << s + 1;
    }
    EXPECT_EQ(m.summary.at("eval_loss").get<double>(),
              identity.summary.at("eval_loss").get<double>())
        << placement;
    EXPECT_EQ(m.summary.at("sample"), identity.summary.at("sample")) << placement;
    const std::string out = strait::test::read_file(job.dir().path() / (name + ".out"));
    EXPECT_TRUE(contains(out, "placement (--placement " + placement + "): rank 0 runs " + slot))
        << out;
  }
  // An uneven split with the short stage placed on ranks 0 and 1 (the slow ones, say).
  const Metrics uneven = train(job, "uneven", with({"--stage-layers", "3,1"}));
  const Metrics placed =
      train(job, "uneven-placed", with({"--stage-layers", "3,1", "--placement", "2,0,3,1"}));
  ASSERT_EQ(placed.steps.size(), 4U);
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(placed.steps[s].at("loss").get<double>(), uneven.steps[s].at("loss").get<double>())
        << "step " << s + 1;
  }

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--placement", "0,1,2"}, "--placement 0,1,2 has 3 entries, but --stages 2 x --replicas 2"},
      {{"--placement", "0,1,2,2"}, "--placement 0,1,2,2 is not a permutation: rank 2 runs two"},
      {{"--placement", "0,1,2,4"}, "rank 4 is outside the world's ranks 0..3"},
      {{"--placement", "3,2,1,0", "--elastic", "--outer-steps", "2"},
       "--placement 3,2,1,0 with --elastic"},
      {{"--placement", "1,0", "--stages", "1", "--outer-steps", "2", "--quorum", "2"},
       "--placement 1,0 with --quorum"}};
  index = 0;
  for (const auto& [args, message] : bad) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--layers", "4", "--replicas", "2", "--steps", "1"});
    if (std::find(a.begin(), a.end(), "--stages") == a.end()) a.insert(a.end(), {"--stages", "2"});
    Strait run(job.train_args(a), job.dir().path() / ("bad-placement" + std::to_string(index++)));
    EXPECT_NE(run.exit_code(kQuick), 0) << message;
    EXPECT_TRUE(contains(run.output(), message)) << run.output();
  }
}

TEST(StraitTrainErrors, ChunkedSchedulesNeedALayerPerStageAndAMicrobatchCountThatFits) {
  const Job job;
  // 2 layers cannot make 2 ranks x 2 chunks = 4 stages.
  Strait layers(job.train_args({"--stages", "2", "--replicas", "1", "--schedule", "zbv"}),
                job.dir().path() / "layers.txt");
  EXPECT_EQ(layers.exit_code(kQuick), 2) << layers.output();
  EXPECT_TRUE(contains(layers.output(),
                       "splits the model into 2 stages x 2 chunks = 4 pipeline stages but "
                       "--layers is 2"))
      << layers.output();
  EXPECT_TRUE(contains(layers.output(), "use --layers >= 4")) << layers.output();
  // Interleaved groups the microbatches by P: 3 on 2 ranks is refused with the counts that fit.
  Strait mb(job.train_args({"--stages", "2", "--replicas", "1", "--layers", "4", "--schedule",
                            "interleaved", "--microbatches", "3"}),
            job.dir().path() / "mb.txt");
  EXPECT_EQ(mb.exit_code(kQuick), 2) << mb.output();
  EXPECT_TRUE(contains(mb.output(), "3 microbatches is not a multiple of the 2 stages"))
      << mb.output();
  EXPECT_TRUE(contains(mb.output(), "use 4 microbatches or 2, or --chunks 1")) << mb.output();
  // ZB-V is a V of exactly two chunks.
  Strait v(job.train_args({"--stages", "2", "--replicas", "1", "--layers", "6", "--schedule", "zbv",
                           "--chunks", "3"}),
           job.dir().path() / "v.txt");
  EXPECT_EQ(v.exit_code(kQuick), 2) << v.output();
  EXPECT_TRUE(contains(v.output(),
                       "zbv schedule: 3 chunks per rank asked for, but it runs "
                       "exactly 2"))
      << v.output();
  // DiLoCo does not keep ZB-V's two local copies of the tied embedding equal: refused.
  Strait outer(job.train_args({"--stages", "2", "--replicas", "2", "--layers", "4", "--schedule",
                               "zbv", "--outer-steps", "2"}),
               job.dir().path() / "outer.txt");
  EXPECT_EQ(outer.exit_code(kQuick), 2) << outer.output();
  EXPECT_TRUE(contains(outer.output(),
                       "--outer-steps with --schedule zbv --stages 2: the first "
                       "and the last model stage are chunks of one rank"))
      << outer.output();
}

// --- Compressed gradient averages ----------------------------------------------------------------

// --codec int8 after 4 uncompressed steps: those steps are the uncompressed run's exactly (same
// losses, same bytes); afterwards each rank sends int8 blocks (1 byte per element plus a 4-byte
// scale per 256), about a quarter of the fp32 bytes, and the loss follows the uncompressed run's
// closely without being equal to it (so the codec was really used).
TEST(StraitTrain, CodecTakesOverAfterItsWarmupSendsAQuarterOfTheBytesAndStillTrains) {
  const Job job;
  const std::vector<std::string> common = {"--stages", "1", "--replicas",     "2", "--steps", "16",
                                           "--warmup", "2", "--microbatches", "4"};
  const auto with = prefixed_by(common);
  const Metrics plain = train(job, "plain", with({}));
  const Metrics int8 = train(job, "int8", with({"--codec", "int8", "--codec-warmup", "4"}));
  ASSERT_EQ(plain.steps.size(), 16U);
  ASSERT_EQ(int8.steps.size(), 16U);
  EXPECT_EQ(int8.summary.at("codec").get<std::string>(), "int8");
  EXPECT_EQ(plain.summary.at("codec").get<std::string>(), "");
  const auto bytes = [](const Metrics& m, std::size_t s) {
    return m.steps[s].at("allreduce_bytes").get<double>();
  };
  const auto loss = [](const Metrics& m, std::size_t s) {
    return m.steps[s].at("loss").get<double>();
  };
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(bytes(int8, s), bytes(plain, s)) << "warm-up step " << s + 1;
  }
  // A step's loss comes before its gradient average: step 5's is still the uncompressed one's.
  for (std::size_t s = 0; s < 5; ++s) {
    EXPECT_EQ(loss(int8, s), loss(plain, s)) << "step " << s + 1;
  }
  for (std::size_t s = 4; s < 16; ++s) {
    const double ratio = bytes(int8, s) / bytes(plain, s);
    EXPECT_GT(ratio, 0.25) << "step " << s + 1;
    EXPECT_LT(ratio, 0.26) << "step " << s + 1;
  }
  EXPECT_NE(loss(int8, 15), loss(plain, 15));
  EXPECT_LT(relative_difference(int8.summary.at("eval_loss").get<double>(),
                                plain.summary.at("eval_loss").get<double>()),
            0.05);
}

// --freeze-variance on freezes AdamW's v when the codec takes over: on and off (the default) give
// the same steps up to the codec's first update and different ones after it.
TEST(StraitTrain, FreezeVarianceAppliesFromTheCodecsFirstStep) {
  const Job job;
  const std::vector<std::string> common = {
      "--stages", "1",    "--replicas",     "2", "--steps",      "10",           "--warmup", "2",
      "--codec",  "topk", "--codec-warmup", "4", "--codec-args", "fraction=0.05"};
  const auto with = prefixed_by(common);
  const Metrics plain = train(job, "default", with({}));
  const Metrics on = train(job, "on", with({"--freeze-variance", "on"}));
  const Metrics off = train(job, "off", with({"--freeze-variance", "off"}));
  EXPECT_EQ(plain.summary.at("freeze_variance_after").get<int>(), 0);
  EXPECT_EQ(on.summary.at("freeze_variance_after").get<int>(), 4);
  EXPECT_EQ(off.summary.at("freeze_variance_after").get<int>(), 0);
  const auto loss = [](const Metrics& m, std::size_t s) {
    return m.steps[s].at("loss").get<double>();
  };
  ASSERT_EQ(on.steps.size(), 10U);
  ASSERT_EQ(off.steps.size(), 10U);
  // Step 5 is the first with a compressed average and a frozen v; its loss comes before either,
  // step 6's after.
  for (std::size_t s = 0; s < 5; ++s) EXPECT_EQ(loss(on, s), loss(off, s)) << "step " << s + 1;
  EXPECT_NE(loss(on, 5), loss(off, 5));
  EXPECT_EQ(loss(off, 9), loss(plain, 9));
}

// --compress momentum (1-bit Adam): with a near-lossless codec (bf16) and no clipping it is the
// same training as averaging the gradients with AdamW's variance frozen at the switch, so the
// two loss trajectories agree to bf16's rounding (the gradient the optimizer gets is the average
// one); the sync compresses the optimizer's own m (train/data_parallel_sync.h reads it from the
// AdamW state, its one owner). Before the switch both are the plain run.
TEST(StraitTrain, MomentumCompressionTracksTheGradientAverageWithAFrozenVariance) {
  const Job job;
  const std::vector<std::string> common = {
      "--stages", "1",    "--replicas",     "2", "--steps",     "16", "--warmup", "2",
      "--codec",  "bf16", "--codec-warmup", "4", "--grad-clip", "0"};
  const auto with = prefixed_by(common);
  const Metrics gradient = train(job, "gradient", with({"--freeze-variance", "on"}));
  const Metrics momentum = train(job, "momentum", with({"--compress", "momentum"}));
  EXPECT_EQ(momentum.summary.at("compress").get<std::string>(), "momentum");
  EXPECT_EQ(momentum.summary.at("freeze_variance_after").get<int>(), 4);
  const auto loss = [](const Metrics& m, std::size_t s) {
    return m.steps[s].at("loss").get<double>();
  };
  ASSERT_EQ(gradient.steps.size(), 16U);
  ASSERT_EQ(momentum.steps.size(), 16U);
  for (std::size_t s = 0; s < 5; ++s) {
    EXPECT_EQ(loss(momentum, s), loss(gradient, s)) << "step " << s + 1;
  }
  double largest = 0;
  for (std::size_t s = 5; s < 16; ++s) {
    largest = std::max(largest, relative_difference(loss(momentum, s), loss(gradient, s)));
  }
  EXPECT_GT(largest, 0.0);  // the momentum really went through the codec
  EXPECT_LT(largest, 2e-3);

  // One replica has no average to compress: the run is the plain one with v frozen at the switch.
  const std::vector<std::string> alone = {"--stages",       "1", "--replicas", "1",
                                          "--steps",        "8", "--codec",    "onebit",
                                          "--codec-warmup", "4"};
  std::vector<std::string> frozen = alone, momentum_alone = alone;
  frozen.insert(frozen.end(), {"--freeze-variance", "on"});
  momentum_alone.insert(momentum_alone.end(), {"--compress", "momentum"});
  const Metrics a = train(job, "alone-frozen", frozen);
  const Metrics b = train(job, "alone-momentum", momentum_alone);
  ASSERT_EQ(b.steps.size(), 8U);
  EXPECT_EQ(a.summary.at("eval_loss").get<double>(), b.summary.at("eval_loss").get<double>());
}

// --- DiLoCo (--outer-steps)
// ------------------------------------------------------------------------

// With one replica the average is the replica's own pseudo-gradient, so outer lr 1 and momentum 0
// put back the weights the inner steps reached (w_start - (w_start - w) = w up to one rounding):
// the trajectory is plain training's, which also shows that the inner AdamW keeps its moments
// across rounds (resetting them would change every step after the first round).
TEST(StraitTrain, DiLoCoWithOneReplicaOuterLrOneAndNoMomentumIsPlainTraining) {
  const Job job;
  const std::vector<std::string> common = {"--stages", "2", "--replicas",     "1", "--steps", "8",
                                           "--warmup", "2", "--microbatches", "4"};
  const auto with = prefixed_by(common);
  const Metrics plain = train(job, "plain", with({}));
  const Metrics diloco = train(
      job, "diloco", with({"--outer-steps", "3", "--outer-lr", "1", "--outer-momentum", "0"}));
  const Metrics nesterov = train(job, "nesterov", with({"--outer-steps", "3"}));
  ASSERT_EQ(plain.steps.size(), 8U);
  ASSERT_EQ(diloco.steps.size(), 8U);
  ASSERT_EQ(nesterov.steps.size(), 8U);
  ASSERT_EQ(diloco.rounds.size(), 3U);  // steps 1-3, 4-6, 7-8
  EXPECT_EQ(diloco.rounds[2].at("first_step").get<int>(), 7);
  EXPECT_EQ(diloco.rounds[2].at("last_step").get<int>(), 8);
  for (std::size_t s = 0; s < 8; ++s) {
    const double want = plain.steps[s].at("loss").get<double>();
    EXPECT_LT(relative_difference(diloco.steps[s].at("loss").get<double>(), want), 1e-5)
        << "step " << s + 1;
  }
  // The comparison can fail: DiLoCo's defaults (outer lr 0.7, Nesterov 0.9) move elsewhere after
  // the first round.
  EXPECT_EQ(nesterov.steps[2].at("loss").get<double>(), plain.steps[2].at("loss").get<double>());
  EXPECT_GT(relative_difference(nesterov.steps[7].at("loss").get<double>(),
                                plain.steps[7].at("loss").get<double>()),
            1e-4);
}

// The outer step of a replica split into 2 stages (the tied embedding averaged by two groups, then
// once more between the stages) gives the trajectory of the same replica in 1 stage.
TEST(StraitTrain, DiLoCoTrajectoryDoesNotDependOnTheStagesOfAReplica) {
  const Job job;
  const std::vector<std::string> common = {"--replicas",    "2", "--steps",        "6",
                                           "--warmup",      "2", "--microbatches", "4",
                                           "--outer-steps", "2"};
  const auto with = prefixed_by(common);
  const Metrics one = train(job, "one", with({"--stages", "1"}));
  const Metrics two = train(job, "two", with({"--stages", "2"}));
  ASSERT_EQ(one.steps.size(), 6U);
  ASSERT_EQ(two.steps.size(), 6U);
  for (std::size_t s = 0; s < 6; ++s) {
    EXPECT_LT(relative_difference(two.steps[s].at("loss").get<double>(),
                                  one.steps[s].at("loss").get<double>()),
              1e-5)
        << "step " << s + 1;
  }
  EXPECT_LT(relative_difference(two.summary.at("eval_loss").get<double>(),
                                one.summary.at("eval_loss").get<double>()),
            1e-5);
}

// H = 4 with an int8 outer average: between replicas, a quarter of the rounds of a quarter of the
// bytes (int8 and a scale per 256 values) of plain data parallelism, and it still trains.
TEST(StraitTrain, DiLoCoWithInt8SendsASixteenthOfTheBytesBetweenReplicasAndStillTrains) {
  const Job job;
  const std::vector<std::string> common = {"--stages", "1", "--replicas",     "2", "--steps", "16",
                                           "--warmup", "2", "--microbatches", "4"};
  const auto with = prefixed_by(common);
  const Metrics plain = train(job, "plain", with({}));
  const Metrics diloco =
      train(job, "diloco", with({"--outer-steps", "4", "--outer-codec", "int8"}));
  ASSERT_EQ(plain.steps.size(), 16U);
  ASSERT_EQ(diloco.steps.size(), 16U);
  double plain_bytes = 0, outer_bytes = 0;
  for (std::size_t s = 0; s < 16; ++s) {
    plain_bytes += plain.steps[s].at("allreduce_bytes").get<double>();
    outer_bytes += diloco.steps[s].at("outer_bytes").get<double>();
    // One stage: nothing else crosses between ranks, and nothing at all inside a round.
    EXPECT_EQ(diloco.steps[s].at("allreduce_bytes").get<double>(),
              diloco.steps[s].at("outer_bytes").get<double>());
    if ((s + 1) % 4 != 0) {
      EXPECT_EQ(diloco.steps[s].at("outer_bytes").get<double>(), 0.0) << "step " << s + 1;
    }
  }
  EXPECT_EQ(diloco.summary.at("outer_bytes").get<double>(), outer_bytes);
  const double ratio = outer_bytes / plain_bytes;
  EXPECT_GT(ratio, 1.0 / 16 * 0.99);
  EXPECT_LT(ratio, 1.0 / 16 * 1.03);
  ASSERT_EQ(diloco.rounds.size(), 4U);
  for (const json& r : diloco.rounds) EXPECT_EQ(r.at("replicas_in").get<int>(), 2);
  EXPECT_EQ(diloco.summary.at("outer_codec").get<std::string>(),
            "int8:block=256,stochastic=0,seed=0");
  // It trains, no worse than the issue's bar (within 3% of data parallelism's held-out loss; on
  // this short run the outer Nesterov step even gets ahead of it), and int8 costs next to
  // nothing against the uncompressed outer average.
  const Metrics exact = train(job, "exact", with({"--outer-steps", "4"}));
  const double eval = diloco.summary.at("eval_loss").get<double>();
  EXPECT_LT(eval, diloco.steps[0].at("loss").get<double>() - 0.3);
  EXPECT_LT(eval, 1.03 * plain.summary.at("eval_loss").get<double>());
  EXPECT_LT(relative_difference(eval, exact.summary.at("eval_loss").get<double>()), 0.01);
  EXPECT_NE(eval, exact.summary.at("eval_loss").get<double>());  // the codec was used
}

// --outer-state nvme keeps the global weights and the outer momentum in a file between rounds:
// the same bits as keeping them in RAM.
TEST(StraitTrain, DiLoCoOuterStateOnNvmeGivesTheSameBitsAsInRam) {
  const Job job;
  const std::vector<std::string> common = {
      "--stages",       "2", "--replicas",    "2", "--steps",       "7",    "--warmup",       "2",
      "--microbatches", "4", "--outer-steps", "3", "--outer-codec", "int8", "--outer-overlap"};
  const auto with = prefixed_by(common);
  const Metrics ram = train(job, "ram", with({}));
  const Metrics nvme = train(job, "nvme", with({"--outer-state", "nvme"}));
  ASSERT_EQ(ram.steps.size(), 7U);
  ASSERT_EQ(nvme.steps.size(), 7U);
  for (std::size_t s = 0; s < 7; ++s) {
    EXPECT_EQ(nvme.steps[s].at("loss").get<double>(), ram.steps[s].at("loss").get<double>())
        << "step " << s + 1;
  }
  EXPECT_EQ(nvme.summary.at("eval_loss").get<double>(), ram.summary.at("eval_loss").get<double>());
  EXPECT_EQ(nvme.summary.at("outer_state").get<std::string>(), "nvme");
  EXPECT_EQ(ram.summary.at("outer_state").get<std::string>(), "cpu");
}

// --outer-fragments 2 with H = 4: the stage's two halves sync in turn, two steps apart (the tied
// embedding with the first half), each sync sending about half of a whole one; the run trains.
TEST(StraitTrain, OuterFragmentsSyncInTurn) {
  const Job job;
  const Metrics m = train(
      job, "fragments",
      {"--stages", "2", "--replicas", "2", "--steps", "10", "--warmup", "2", "--microbatches", "4",
       "--outer-steps", "4", "--outer-fragments", "2", "--outer-codec", "int8", "--outer-overlap"});
  ASSERT_EQ(m.steps.size(), 10U);
  // Fragment 0 ends rounds at steps 4 and 8, fragment 1 at 2, 6 and 10, both at the last (10).
  std::vector<int> last_steps, synced;
  for (const json& r : m.rounds) {
    last_steps.push_back(r.at("last_step").get<int>());
    synced.push_back(r.at("fragments_synced").get<int>());
  }
  EXPECT_EQ(last_steps, (std::vector<int>{2, 4, 6, 8, 10}));
  EXPECT_EQ(synced, (std::vector<int>{1, 1, 1, 1, 2}));
  EXPECT_EQ(m.summary.at("outer_fragments").get<int>(), 2);
  EXPECT_LT(m.summary.at("eval_loss").get<double>(), m.steps[0].at("loss").get<double>() - 0.2);
}

// --outer-overlap --outer-delay 0: round t's average is applied at the end of round t + 1, the
// last round's at once; until the first outer update the run is the non-overlapped one's, step for
// step. With the default delay (1) it is applied one step after its round: the two runs agree up to
// that step and part there.
TEST(StraitTrain, OuterOverlapAppliesEachRoundsAverageOneRoundLateOrAfterItsDelay) {
  const Job job;
  const std::vector<std::string> common = {
      "--stages",       "2", "--replicas",    "2", "--steps",       "10",  "--warmup", "2",
      "--microbatches", "4", "--outer-steps", "3", "--outer-codec", "int8"};
  const auto with = prefixed_by(common);
  const Metrics blocking = train(job, "blocking", with({}));
  const Metrics overlap = train(job, "overlap", with({"--outer-overlap", "--outer-delay", "0"}));
  const Metrics delay1 = train(job, "delay1", with({"--outer-overlap"}));
  ASSERT_EQ(overlap.steps.size(), 10U);
  ASSERT_EQ(overlap.rounds.size(), 4U);  // steps 1-3, 4-6, 7-9, 10
  ASSERT_EQ(blocking.rounds.size(), 4U);
  const int late[4] = {0, 1, 2, 4}, now[4] = {1, 2, 3, 4};
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(overlap.rounds[r].at("applied_rounds").get<int>(), late[r]) << "round " << r + 1;
    EXPECT_EQ(blocking.rounds[r].at("applied_rounds").get<int>(), now[r]) << "round " << r + 1;
  }
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(overlap.steps[s].at("loss").get<double>(), blocking.steps[s].at("loss").get<double>())
        << "step " << s + 1;
  }
  EXPECT_NE(overlap.steps[3].at("loss").get<double>(), blocking.steps[3].at("loss").get<double>());
  EXPECT_TRUE(overlap.summary.at("outer_overlap").get<bool>());
  EXPECT_EQ(overlap.summary.at("outer_delay").get<int>(), 0);
  EXPECT_EQ(delay1.summary.at("outer_delay").get<int>(), 1);
  // Round 0 ends at step 3; step 4 computes from the replica's own weights in both runs, and the
  // average arrives at the end of step 4 with delay 1 only.
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(delay1.steps[s].at("loss").get<double>(), overlap.steps[s].at("loss").get<double>())
        << "step " << s + 1;
  }
  EXPECT_NE(delay1.steps[4].at("loss").get<double>(), overlap.steps[4].at("loss").get<double>());
  EXPECT_LT(overlap.summary.at("eval_loss").get<double>(),
            overlap.steps[0].at("loss").get<double>() - 0.2);
}

// --- Bad input: a clear error, quickly -----------------------------------------------------------

// The launching `strait train` checks before starting any rank: nothing of the form
// "strait train: rank N" (a rank's report) or "strait run:" (the launcher's) may appear.
void expect_rejected_before_launch(Strait& run, const std::vector<std::string>& message_parts) {
  const int code = run.exit_code(kQuick);
  const std::string out = run.output();
  EXPECT_EQ(code, 2) << out;  // InvalidArgument
  for (const auto& part : message_parts)
    EXPECT_TRUE(contains(out, part)) << part << " in:\n" << out;
  EXPECT_FALSE(contains(out, "strait train: rank")) << out;
  EXPECT_FALSE(contains(out, "strait run:")) << out;
}

TEST(StraitTrainErrors, SamplingSettingsOutOfRange) {
  const Job job;
  Strait temperature(job.train_args({"--steps", "1", "--temperature", "0"}),
                     job.dir().path() / "temperature");
  expect_rejected_before_launch(temperature,
                                {"--temperature 0 must be a finite number > 0", "--sample greedy"});
  Strait top_k(job.train_args({"--steps", "1", "--top-k", "0"}), job.dir().path() / "top-k");
  expect_rejected_before_launch(top_k, {"--top-k 0 must be at least 1"});
}

TEST(StraitTrainErrors, DataPathThatDoesNotExist) {
  const Job job;
  const std::string missing = (job.dir().path() / "no-such-corpus").string();
  Strait run(job.train_args({"--steps", "1", "--data", missing}), job.dir().path() / "out");
  expect_rejected_before_launch(run, {"data path " + missing + " does not exist", "pass --data"});
}

TEST(StraitTrainErrors, DataDirectoryWithoutTextFiles) {
  const Job job;
  const fs::path empty = job.dir().path() / "empty";
  fs::create_directory(empty);
  Strait run(job.train_args({"--steps", "1", "--data", empty.string()}), job.dir().path() / "out");
  expect_rejected_before_launch(
      run, {"data directory " + empty.string() + " has no usable text files", "pass --data"});
}

TEST(StraitTrainErrors, MoreStagesThanLayers) {
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--stages", "3", "--replicas", "1"}),
             job.dir().path() / "out");
  expect_rejected_before_launch(
      run, {"--stages 3 is more than --layers 2", "use at most 2 stages or more layers"});
}

TEST(StraitTrainErrors, UnknownOptimizerPlacementListsTheChoices) {
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--offload-optimizer", "gpu"}),
             job.dir().path() / "out");
  expect_rejected_before_launch(run, {"--offload-optimizer gpu", "use cpu", "or nvme"});
}

TEST(StraitTrainErrors, OffloadDirectoryThatDoesNotExist) {
  const Job job;
  const std::string missing = (job.dir().path() / "no-such-dir").string();
  Strait run(
      job.train_args({"--steps", "1", "--offload-optimizer", "nvme", "--offload-dir", missing}),
      job.dir().path() / "out");
  expect_rejected_before_launch(
      run, {"offload directory " + missing + " does not exist", "--offload-dir"});
}

// With the state in RAM the directory is not needed, and a user who passed one is told so.
TEST(StraitTrainErrors, OffloadDirectoryIsUnusedWithTheStateInRam) {
  const Job job;
  const std::string missing = (job.dir().path() / "no-such-dir").string();
  Strait run(job.train_args(
                 {"--steps", "1", "--stages", "1", "--replicas", "1", "--offload-dir", missing}),
             job.dir().path() / "out");
  const int code = run.exit_code(kQuick);
  const std::string out = run.output();
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "--offload-dir is unused")) << out;
  EXPECT_TRUE(contains(out, "--offload-optimizer nvme")) << out;
}

TEST(StraitTrainErrors, OffloadDirectoryThatIsNotWritable) {
  // Root ignores permission bits, so an unwritable directory is a read-only file system.
  const strait::test::ScratchMount ro("tmpfs", MS_RDONLY, "size=1m");
  if (!ro.ok()) GTEST_SKIP() << "cannot mount a read-only tmpfs: " << ro.error();
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--offload-optimizer", "nvme", "--offload-dir",
                             ro.path().string()}),
             job.dir().path() / "out");
  expect_rejected_before_launch(
      run, {"offload directory " + ro.path().string() + " is not writable (Read-only file system)",
            "pass --offload-dir with a writable directory"});
}

TEST(StraitTrainErrors, WorldSizeThatIsNotStagesTimesReplicas) {
  const Job job;
  // --kill-grace lets every rank report the mistake itself before the launcher would stop the
  // others; the launcher still returns as soon as all have exited, so a rank stuck waiting for a
  // fourth one would show as a timeout here (kQuick < the grace).
  std::vector<std::string> args = {"run", "-n", "3", "--kill-grace", "60", "--", STRAIT_BIN};
  const auto train_args = job.train_args({"--steps", "1", "--stages", "2", "--replicas", "2"});
  args.insert(args.end(), train_args.begin(), train_args.end());
  Strait run(args, job.dir().path() / "out");
  const int code = run.exit_code(kQuick);
  const std::string out = run.output();
  EXPECT_EQ(code, 2) << out;  // the first failed rank's status: InvalidArgument
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(out, "strait train: rank " + std::to_string(r) +
                                  ": InvalidArgument: the job has 3 ranks (WORLD_SIZE=3) but "
                                  "--stages 2 x --replicas 2 needs 4: launch 4 ranks"))
        << "rank " << r << " in:\n"
        << out;
    EXPECT_TRUE(contains(out, "strait run: rank " + std::to_string(r) + " (pid ")) << out;
  }
}

TEST(StraitTrainErrors, UnknownCodecListsTheCodecs) {
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--codec", "int9"}), job.dir().path() / "out");
  expect_rejected_before_launch(run, {"int9", "int8", "topk"});
}

TEST(StraitTrainErrors, CodecArgsWithoutCodec) {
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--codec-args", "block=64"}),
             job.dir().path() / "out");
  expect_rejected_before_launch(run, {"--codec-args block=64 given without --codec"});
}

TEST(StraitTrainErrors, UnknownCodecArgumentNamesIt) {
  const Job job;
  Strait run(job.train_args({"--steps", "1", "--codec", "int8", "--codec-args", "blok=64"}),
             job.dir().path() / "out");
  expect_rejected_before_launch(run, {"blok", "block"});
}

TEST(StraitTrainErrors, FreezeVarianceWithoutACodecOrWarmup) {
  const Job job;
  Strait no_codec(job.train_args({"--steps", "1", "--freeze-variance", "on"}),
                  job.dir().path() / "out1");
  expect_rejected_before_launch(no_codec, {"--freeze-variance on needs --codec"});
  Strait no_warmup(job.train_args({"--steps", "1", "--codec", "onebit", "--codec-warmup", "0",
                                   "--freeze-variance", "on"}),
                   job.dir().path() / "out2");
  expect_rejected_before_launch(no_warmup, {"--freeze-variance on needs --codec-warmup >= 1"});
}

TEST(StraitTrainErrors, OffloadPrefetchBelowZero) {
  const Job job;
  Strait run(
      job.train_args({"--steps", "1", "--offload-activations", "cpu", "--offload-prefetch", "-1"}),
      job.dir().path() / "out");
  expect_rejected_before_launch(run, {"--offload-prefetch -1 must be >= 0"});
}

TEST(StraitTrainErrors, MomentumCompressionNeedsACodecAFrozenVarianceAndAWarmup) {
  const Job job;
  Strait no_codec(job.train_args({"--steps", "1", "--compress", "momentum"}),
                  job.dir().path() / "out1");
  expect_rejected_before_launch(no_codec, {"--compress momentum needs --codec"});
  Strait unfrozen(job.train_args({"--steps", "1", "--codec", "onebit", "--compress", "momentum",
                                  "--freeze-variance", "off"}),
                  job.dir().path() / "out2");
  expect_rejected_before_launch(unfrozen, {"drop --freeze-variance off"});
  Strait no_warmup(job.train_args({"--steps", "1", "--codec", "onebit", "--compress", "momentum",
                                   "--codec-warmup", "0"}),
                   job.dir().path() / "out3");
  expect_rejected_before_launch(no_warmup, {"--compress momentum needs --codec-warmup >= 1"});
}

TEST(StraitTrainErrors, DiLoCoSettingsOutOfPlace) {
  const Job job;
  Strait codec(job.train_args({"--steps", "1", "--outer-steps", "4", "--codec", "int8"}),
               job.dir().path() / "codec");
  expect_rejected_before_launch(codec, {"--codec int8", "--outer-codec"});
  Strait overlap(job.train_args({"--steps", "1", "--outer-overlap"}), job.dir().path() / "overlap");
  expect_rejected_before_launch(overlap, {"--outer-overlap", "pass --outer-steps"});
  Strait topk(job.train_args({"--steps", "1", "--outer-steps", "2", "--outer-codec", "topk"}),
              job.dir().path() / "topk");
  expect_rejected_before_launch(topk, {"--outer-codec \"topk\"", "none, bf16, int8, int4"});
  Strait momentum(job.train_args({"--steps", "1", "--outer-steps", "2", "--outer-momentum", "1"}),
                  job.dir().path() / "momentum");
  expect_rejected_before_launch(momentum, {"--outer-momentum 1 must be in [0, 1)"});
  Strait fragments(job.train_args({"--steps", "1", "--outer-steps", "2", "--outer-fragments", "3"}),
                   job.dir().path() / "fragments");
  expect_rejected_before_launch(fragments, {"--outer-fragments 3 must be between 1 and"});
}

// --- A rank killed mid-step ----------------------------------------------------------------------

// The ranks of a running job by rank (the launcher's children with RANK in their environment),
// once the first step line shows every rank inside the training loop; empty after 60 s without.
std::map<int, pid_t> ranks_in_training(const Strait& run) {
  const auto deadline = Clock::now() + 60s;
  while (!contains(run.output(), "\nstep ") && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  std::map<int, pid_t> ranks;
  if (!contains(run.output(), "\nstep ")) return ranks;
  for (const pid_t child : child_processes(run.pid())) {
    const auto env = process_environment(child);
    if (const auto it = env.find("RANK"); it != env.end()) ranks[std::stoi(it->second)] = child;
  }
  return ranks;
}

// What a user reads holds strait's messages only: no line from UCX's own printer ("UCX  WARN")
// and none of strait's "ucx:" debug lines.
void expect_no_ucx_line(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    EXPECT_FALSE(contains(line, "UCX") || contains(line, "ucx:")) << line << "\nin:\n" << out;
  }
}

TEST(StraitTrainErrors, ARankKilledMidStepEndsTheJobAndLeavesNoProcessBehind) {
  const Job job;
  // Every process of this job, the ranks and anything they start, inherits this marker.
  const std::string marker = job.dir().str();
  // Far more steps than can run before the kill, so the job cannot finish first on any machine.
  Strait run(job.train_args(
                 {"--steps", "1000000", "--stages", "2", "--replicas", "2", "--microbatches", "4"}),
             job.dir().path() / "out", {"STRAIT_TEST_JOB=" + marker});
  const std::map<int, pid_t> ranks = ranks_in_training(run);
  ASSERT_EQ(ranks.size(), 4U) << run.output();
  const pid_t victim = ranks.at(1);
  ASSERT_EQ(kill(victim, SIGKILL), 0);

  const int code = run.exit_code(kQuick);
  const std::string out = run.output();
  // Usually 128 + 9 (rank 1 is the first failure the launcher sees); a rank that noticed the lost
  // peer and exited before the launcher reaped rank 1 may come first.
  EXPECT_NE(code, 0) << out;
  EXPECT_TRUE(contains(out, "strait run: rank 1 (pid " + std::to_string(victim) +
                                ") was killed by signal 9 (SIGKILL)"))
      << out;
  for (const auto& [rank, pid] : ranks) {
    EXPECT_FALSE(process_exists(pid)) << "rank " << rank << " (pid " << pid << ") is still alive";
  }
  EXPECT_TRUE(processes_with_environment("STRAIT_TEST_JOB", marker).empty())
      << "processes of the job are left behind";
  expect_no_ucx_line(out);
}

// A stopped rank (SIGSTOP) cannot fail by itself: its peers' collectives time out (--timeout 2),
// and the launcher's summary names the timeout and the suspended rank, with no UCX line.
TEST(StraitTrainErrors, AStoppedRankTimesOutItsPeersAndTheSummaryNamesIt) {
  const Job job;
  const std::string marker = job.dir().str();
  Strait run(job.train_args({"--steps", "1000000", "--stages", "2", "--replicas", "2",
                             "--microbatches", "4", "--timeout", "2"}),
             job.dir().path() / "out", {"STRAIT_TEST_JOB=" + marker});
  const std::map<int, pid_t> ranks = ranks_in_training(run);
  ASSERT_EQ(ranks.size(), 4U) << run.output();
  ASSERT_EQ(kill(ranks.at(1), SIGSTOP), 0);

  const int code = run.exit_code(kQuick);
  const std::string out = run.output();
  EXPECT_NE(code, 0) << out;
  EXPECT_TRUE(contains(out, "Timeout: ")) << out;
  EXPECT_TRUE(contains(out, "rank 1")) << out;
  EXPECT_TRUE(contains(out, "failed first ==========")) << out;
  EXPECT_TRUE(contains(out, "rank 1: was suspended by SIGSTOP at")) << out;
  for (const auto& [rank, pid] : ranks) {
    EXPECT_FALSE(process_exists(pid)) << "rank " << rank << " (pid " << pid << ") is still alive";
  }
  EXPECT_TRUE(processes_with_environment("STRAIT_TEST_JOB", marker).empty())
      << "processes of the job are left behind";
  expect_no_ucx_line(out);
}

}  // namespace
