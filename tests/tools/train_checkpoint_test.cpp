// `strait train --save / --save-every / --resume` end to end (spawns the built binary, real ranks
// on loopback): a resumed run continues bit-identically to one that never stopped (also with the
// optimizer state moved from RAM to NVMe), a checkpoint saved with 2 stages resumes with 1 or 4,
// a corrupted shard is reported by its checksum, a model that does not fit is named, and a job
// killed with SIGKILL while it saves every step leaves a checkpoint that resumes; a DiLoCo run
// (--outer-steps) resumed mid-round continues bit-identically too.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/process.h"
#include "tests/common/small_model.h"
#include "tests/common/strait_process.h"
#include "tests/common/word_corpus.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::contains;
using strait::test::TempDir;

using strait::test::Strait;

using strait::test::write_word_corpus;

class Job {
 public:
  Job() : corpus_(write_word_corpus(dir_.path())) { fs::create_directory(dir_.path() / "offload"); }
  [[nodiscard]] fs::path path(const std::string& name) const { return dir_.path() / name; }

  // A tiny model (4 layers so that 1, 2 and 4 stages divide it), then `extra`: "--flag value"
  // pairs, a later pair replacing an earlier one of the same flag (CLI11 refuses repeats); an
  // empty value passes a flag that takes none (--outer-overlap).
  [[nodiscard]] std::vector<std::string> args(const std::vector<std::string>& extra) const {
    std::vector<std::string> pairs =
        strait::test::joined({}, strait::test::small_model_flags(4),
                             {"--microbatch-size", "2", "--eval-sequences", "8", "--sample-bytes",
                              "8", "--warmup", "2", "--blas-threads", "1", "--data",
                              corpus_.string(), "--offload-dir", path("offload").string()});
    pairs.insert(pairs.end(), extra.begin(), extra.end());
    std::vector<std::string> all = {"train"};
    for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
      bool later = false;
      for (std::size_t j = i + 2; j + 1 < pairs.size(); j += 2)
        later = later || pairs[j] == pairs[i];
      if (later) continue;
      all.push_back(pairs[i]);
      if (!pairs[i + 1].empty()) all.push_back(pairs[i + 1]);
    }
    return all;
  }

  // Runs to completion; returns the per-step records of --metrics.
  std::vector<json> train(const std::string& name, const std::vector<std::string>& extra) const {
    std::vector<std::string> a = args(extra);
    a.insert(a.end(), {"--metrics", path(name + ".jsonl").string()});
    Strait run(a, path(name + ".out"));
    const int code = run.exit_code(120s);
    EXPECT_EQ(code, 0) << name << ":\n" << run.output();
    std::vector<json> steps;
    std::ifstream in(path(name + ".jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      json r = json::parse(line);
      if (r["type"] == "step") steps.push_back(std::move(r));
    }
    return steps;
  }

  // Runs expecting failure; returns the output.
  std::string fail(const std::string& name, const std::vector<std::string>& extra) const {
    Strait run(args(extra), path(name + ".out"));
    const int code = run.exit_code(60s);
    EXPECT_NE(code, 0) << name << ":\n" << run.output();
    return run.output();
  }

 private:
  TempDir dir_;
  fs::path corpus_;
};

// Every tensor's checksum in a step directory's manifest, by name.
std::map<std::string, std::string> checksums(const fs::path& step_dir) {
  std::ifstream in(step_dir / "manifest.json");
  const json m = json::parse(in);
  std::map<std::string, std::string> out;
  for (const json& t : m["tensors"]) out[t["name"]] = t["xxh3_64"];
  return out;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(StraitTrainCheckpoint, ResumedRunContinuesBitIdenticallyToOneThatNeverStopped) {
  const Job job;
  const std::vector<std::string> split = {"--stages",       "2", "--replicas", "2",
                                          "--microbatches", "2", "--steps",    "6"};
  const auto full =
      job.train("full", with(split, {"--save", job.path("full").string(), "--save-every", "3"}));
  ASSERT_EQ(full.size(), 6U);
  ASSERT_TRUE(fs::exists(job.path("full") / "step-00000003" / "manifest.json"));
  ASSERT_TRUE(fs::exists(job.path("full") / "step-00000006" / "manifest.json"));

  // From step 3, once with the moments in RAM and once on NVMe.
  for (const std::string where : {"cpu", "nvme"}) {
    const auto resumed = job.train(
        "resumed-" + where,
        with(split, {"--resume", (job.path("full") / "step-00000003").string(), "--save",
                     job.path("resumed-" + where).string(), "--offload-optimizer", where}));
    ASSERT_EQ(resumed.size(), 3U) << where;
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(resumed[i]["step"], full[i + 3]["step"]);
      // Bit-identical: the JSON doubles round-trip exactly.
      EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>())
          << where << ", step " << i + 4;
      EXPECT_EQ(resumed[i]["grad_norm"].get<double>(), full[i + 3]["grad_norm"].get<double>())
          << where << ", step " << i + 4;
    }
    // And so are the final weights and moments.
    EXPECT_EQ(checksums(job.path("resumed-" + where) / "step-00000006"),
              checksums(job.path("full") / "step-00000006"))
        << where;
  }
  // The --save directory itself resumes from what `latest` names (step 6).
  const auto later =
      job.train("later", with(split, {"--steps", "8", "--resume", job.path("full").string()}));
  ASSERT_EQ(later.size(), 2U);
  EXPECT_EQ(later[0]["step"], 7);
  // It says that the learning-rate schedule is no longer the saved run's.
  const std::string out = strait::test::read_file(job.path("later.out"));
  EXPECT_TRUE(contains(out,
                       "note: --steps (the cosine schedule's length) 8 differs from the "
                       "checkpoint's 6"))
      << out;
}

TEST(StraitTrainCheckpoint, TwoStageCheckpointResumesWithOneOrFourStages) {
  const Job job;
  const auto saved = job.train("two", {"--stages", "2", "--replicas", "1", "--microbatches", "8",
                                       "--steps", "3", "--save", job.path("two").string()});
  ASSERT_EQ(saved.size(), 3U);
  const auto original = checksums(job.path("two") / "step-00000003");
  // Every parameter once, with its two moments: 2 + 12 per layer + 2 names, times 3.
  EXPECT_EQ(original.size(), 3U * (2 + 12 * 4 + 2));
  for (const std::string stages : {"1", "4"}) {
    // Loading and saving again at once gives back the same bits, whatever the split.
    const std::string name = "resaved-" + stages;
    (void)job.train(name,
                    {"--stages", stages, "--replicas", "1", "--microbatches", "8", "--steps", "3",
                     "--resume", job.path("two").string(), "--save", job.path(name).string()});
    EXPECT_EQ(checksums(job.path(name) / "step-00000003"), original) << stages << " stages";
    std::ifstream in(job.path(name) / "step-00000003" / "manifest.json");
    EXPECT_EQ(json::parse(in)["files"].size(), std::stoul(stages));
  }
  // Training on from there matches the 2-stage run up to float rounding (sums in other orders).
  const auto two_on =
      job.train("two-on", {"--stages", "2", "--replicas", "1", "--microbatches", "8", "--steps",
                           "5", "--resume", job.path("two").string()});
  const auto four_on =
      job.train("four-on", {"--stages", "4", "--replicas", "1", "--microbatches", "8", "--steps",
                            "5", "--resume", job.path("two").string()});
  ASSERT_EQ(two_on.size(), 2U);
  ASSERT_EQ(four_on.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    const double a = two_on[i]["loss"].get<double>(), b = four_on[i]["loss"].get<double>();
    EXPECT_LT(std::abs(a - b) / std::abs(a), 1e-5) << "step " << i + 4;
  }
}

// An uneven split (--stage-layers) is recorded in the checkpoint's meta. The same split resumes
// bit-identically to a run that never stopped; another split loads the same tensors by name (saved
// again at once: the same bits) and the log says the split changed. DiLoCo's fragments cut each
// stage's parameters, so its checkpoint refuses another split, naming it.
TEST(StraitTrainCheckpoint, UnevenSplitIsRecordedAndResumes) {
  const Job job;
  const std::vector<std::string> uneven = {"--stages",       "2", "--replicas",     "1",
                                           "--microbatches", "8", "--stage-layers", "3,1"};
  const auto full = job.train("full", with(uneven, {"--steps", "5"}));
  ASSERT_EQ(full.size(), 5U);
  (void)job.train("saved", with(uneven, {"--steps", "3", "--save", job.path("saved").string()}));
  const std::string step3 = (job.path("saved") / "step-00000003").string();
  {
    std::ifstream in(fs::path(step3) / "manifest.json");
    EXPECT_EQ(json::parse(in)["meta"]["saved_by"]["stage_layers"], json({3, 1}));
  }
  const auto resumed = job.train("resumed", with(uneven, {"--steps", "5", "--resume", step3}));
  ASSERT_EQ(resumed.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>()) << i + 4;
  }
  const auto original = checksums(step3);
  for (const std::string split : {"1,3", "2,2"}) {
    const std::string name = "resaved-" + split;
    (void)job.train(name, with(uneven, {"--stage-layers", split, "--steps", "3", "--resume", step3,
                                        "--save", job.path(name).string()}));
    EXPECT_EQ(checksums(job.path(name) / "step-00000003"), original) << split;
    const std::string out = strait::test::read_file(job.path(name + ".out"));
    EXPECT_TRUE(
        contains(out, "the layers per stage [" + split + "] differ from the checkpoint's [3,1]"))
        << out;
  }

  const std::vector<std::string> diloco = {"--stages",       "2",  "--replicas",    "2",
                                           "--microbatches", "2",  "--outer-steps", "2",
                                           "--stage-layers", "1,3"};
  (void)job.train("diloco", with(diloco, {"--steps", "2", "--save", job.path("diloco").string()}));
  const std::string other =
      job.fail("diloco-even", with(diloco, {"--stage-layers", "2,2", "--steps", "4", "--resume",
                                            (job.path("diloco") / "step-00000002").string()}));
  EXPECT_TRUE(contains(other, "--stage-layers [2,2] (the checkpoint has [1,3])")) << other;
}

// A placement (--placement) is recorded in the checkpoint's meta, and a resume with another one
// loads each (replica, stage) slot's own tensors by name, whichever rank now runs it: a plain run
// saved with 3,2,1,0 and resumed with the identity continues bit-identically to an identity run
// that never stopped (clipping off), and says the placement changed; so does DiLoCo saved
// mid-round, whose per-replica tensors sit in the shards of the world ranks that saved them.
TEST(StraitTrainCheckpoint, PlacementIsRecordedAndAnotherOneResumes) {
  const Job job;
  const std::vector<std::string> layout = {"--stages",       "2", "--replicas",  "2",
                                           "--microbatches", "2", "--grad-clip", "0"};
  const auto full = job.train("full", with(layout, {"--steps", "5"}));
  ASSERT_EQ(full.size(), 5U);
  (void)job.train("saved", with(layout, {"--placement", "3,2,1,0", "--steps", "3", "--save",
                                         job.path("saved").string()}));
  const std::string step3 = (job.path("saved") / "step-00000003").string();
  {
    std::ifstream in(fs::path(step3) / "manifest.json");
    EXPECT_EQ(json::parse(in)["meta"]["saved_by"]["placement"], json({3, 2, 1, 0}));
  }
  const auto resumed = job.train("resumed", with(layout, {"--steps", "5", "--resume", step3}));
  ASSERT_EQ(resumed.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>()) << i + 4;
  }
  const std::string out = strait::test::read_file(job.path("resumed.out"));
  EXPECT_TRUE(contains(out, "the placement [0,1,2,3] differs from the checkpoint's [3,2,1,0]"))
      << out;

  // DiLoCo (H = 2) saved mid-round (after step 3) by 1,3,0,2 resumes under 3,2,1,0.
  const std::vector<std::string> diloco = with(layout, {"--outer-steps", "2", "--steps", "4"});
  const auto diloco_full =
      job.train("diloco-full", with(diloco, {"--placement", "1,3,0,2", "--save",
                                             job.path("diloco").string(), "--save-every", "3"}));
  ASSERT_EQ(diloco_full.size(), 4U);
  const auto diloco_resumed =
      job.train("diloco-resumed", with(diloco, {"--placement", "3,2,1,0", "--resume",
                                                (job.path("diloco") / "step-00000003").string()}));
  ASSERT_EQ(diloco_resumed.size(), 1U);
  EXPECT_EQ(diloco_resumed[0]["loss"].get<double>(), diloco_full[3]["loss"].get<double>());
}

// A checkpoint does not depend on how the schedule placed the layers: one saved by interleaved 1F1B
// (2 ranks x 2 chunks: rank 0 holds layers 0 and 2) or ZB-V (rank 0 holds layers 0 and 3 and both
// wte copies) holds every tensor once, under its global name, one shard per rank. Interleaved
// resumes itself bit-identically, and 1F1B (2 stages of two layers) loads it to the same bits and
// trains on as interleaved does, up to float rounding.
TEST(StraitTrainCheckpoint, InterleavedOrZbVCheckpointResumesWithOneFOneB) {
  const Job job;
  const std::vector<std::string> inter = {"--stages",       "2", "--replicas", "1",
                                          "--microbatches", "8", "--schedule", "interleaved"};
  const auto full = job.train(
      "inter",
      with(inter, {"--steps", "5", "--save", job.path("inter").string(), "--save-every", "3"}));
  ASSERT_EQ(full.size(), 5U);
  const fs::path at3 = job.path("inter") / "step-00000003";
  const auto original = checksums(at3);
  EXPECT_EQ(original.size(), 3U * (2 + 12 * 4 + 2));
  {
    std::ifstream in(at3 / "manifest.json");
    EXPECT_EQ(json::parse(in)["files"].size(), 2U);
  }
  // Interleaved from step 3: the uninterrupted run's bits.
  const auto again =
      job.train("inter-again", with(inter, {"--steps", "5", "--resume", at3.string()}));
  ASSERT_EQ(again.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i]["loss"].get<double>(), full[i + 3]["loss"].get<double>()) << i + 4;
    EXPECT_EQ(again[i]["grad_norm"].get<double>(), full[i + 3]["grad_norm"].get<double>()) << i + 4;
  }
  // 1F1B loads and saves it again as it was, and trains on as interleaved did.
  const std::vector<std::string> one = {"--stages",       "2", "--replicas", "1",
                                        "--microbatches", "8", "--schedule", "1f1b"};
  (void)job.train("resaved-1f1b", with(one, {"--steps", "3", "--resume", at3.string(), "--save",
                                             job.path("resaved-1f1b").string()}));
  EXPECT_EQ(checksums(job.path("resaved-1f1b") / "step-00000003"), original);
  const auto on = job.train("1f1b-on", with(one, {"--steps", "5", "--resume", at3.string()}));
  ASSERT_EQ(on.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    const double a = on[i]["loss"].get<double>(), b = full[i + 3]["loss"].get<double>();
    EXPECT_LT(std::abs(a - b) / std::abs(b), 1e-5) << "step " << i + 4;
  }
  // ZB-V too: its rank 0 holds both copies of wte and saves one.
  (void)job.train("resaved-zbv", {"--stages", "2", "--replicas", "1", "--microbatches", "8",
                                  "--schedule", "zbv", "--steps", "3", "--resume", at3.string(),
                                  "--save", job.path("resaved-zbv").string()});
  EXPECT_EQ(checksums(job.path("resaved-zbv") / "step-00000003"), original);
}

TEST(StraitTrainCheckpoint, CorruptedShardIsReportedByItsChecksum) {
  const Job job;
  (void)job.train("saved", {"--stages", "2", "--replicas", "1", "--microbatches", "4", "--steps",
                            "2", "--save", job.path("saved").string()});
  const fs::path shard = job.path("saved") / "step-00000002" / "shard-1.ckpt";
  {
    // The last byte of the file belongs to its last tensor's data.
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  const std::string out =
      job.fail("corrupt", {"--stages", "2", "--replicas", "1", "--microbatches", "4", "--steps",
                           "3", "--resume", job.path("saved").string()});
  EXPECT_TRUE(contains(out, "fails its checksum")) << out;
  EXPECT_TRUE(contains(out, "shard-1.ckpt")) << out;
  EXPECT_TRUE(contains(out, "optimizer.exp_avg_sq.ln_f.bias")) << out;
}

TEST(StraitTrainCheckpoint, ModelOrSeedThatDoesNotFitIsNamed) {
  const Job job;
  (void)job.train("saved", {"--stages", "1", "--replicas", "1", "--microbatches", "4", "--steps",
                            "1", "--save", job.path("saved").string()});
  const std::string dim = job.fail("dim", {"--stages", "1", "--replicas", "1", "--steps", "2",
                                           "--dim", "64", "--resume", job.path("saved").string()});
  EXPECT_TRUE(contains(dim, "--dim 64 (the checkpoint has 32)")) << dim;
  const std::string seed =
      job.fail("seed", {"--stages", "1", "--replicas", "1", "--steps", "2", "--seed", "9",
                        "--resume", job.path("saved").string()});
  EXPECT_TRUE(contains(seed, "pass --seed 1337")) << seed;
  const std::string missing =
      job.fail("missing", {"--steps", "2", "--resume", job.path("nothing").string()});
  EXPECT_TRUE(contains(missing, "is not a directory")) << missing;
  const std::string codec =
      job.fail("codec", {"--steps", "2", "--codec", "int8", "--save", job.path("c").string()});
  EXPECT_TRUE(contains(codec, "drop --codec")) << codec;
  const std::string outer =
      job.fail("outer", {"--steps", "2", "--outer-steps", "2", "--outer-codec", "int8", "--save",
                         job.path("o").string()});
  EXPECT_TRUE(contains(outer, "use --outer-codec none with checkpoints")) << outer;
}

// DiLoCo (--outer-steps): the replicas' own weights and moments, the outer momentum and global
// weights, and with --outer-overlap each replica's round start and the average still to be
// applied, are in the checkpoint; a run resumed mid-round (H = 3, saved after step 4) continues
// bit-identically to one that never stopped, with the outer state in RAM and on NVMe, and with
// SparseLoCo (each replica's error feedback saved as its own).
TEST(StraitTrainCheckpoint, ResumedDiLoCoRunContinuesBitIdentically) {
  const Job job;
  const std::vector<std::string> split = {"--stages",       "2", "--replicas", "2",
                                          "--microbatches", "2", "--steps",    "8",
                                          "--outer-steps",  "3"};
  struct Variant {
    std::string name;
    std::vector<std::string> extra;
  };
  const std::vector<Variant> variants = {
      {"plain", {}},
      {"overlap",
       {"--outer-overlap", "", "--outer-eager", "", "--outer-delay", "2", "--outer-fragments", "3",
        "--outer-state", "nvme"}},
      // SparseLoCo: each replica's error feedback is its own, saved per replica.
      {"sparseloco",
       {"--outer-codec", "sparseloco:density=0.05,chunk=256", "--outer-momentum", "0"}}};
  for (const Variant& v : variants) {
    const auto full = job.train(
        "full-" + v.name,
        with(with(split, v.extra), {"--save", job.path(v.name).string(), "--save-every", "4"}));
    ASSERT_EQ(full.size(), 8U) << v.name;
    const fs::path mid = job.path(v.name) / "step-00000004";
    ASSERT_TRUE(fs::exists(mid / "manifest.json")) << v.name;
    // Every replica's own state and the outer state are there, one shard per rank.
    const auto names = checksums(mid);
    EXPECT_TRUE(names.contains("replica.1.h.0.attn.c_attn.weight")) << v.name;
    EXPECT_TRUE(names.contains("replica.1.optimizer.exp_avg_sq.ln_f.bias")) << v.name;
    EXPECT_TRUE(names.contains("outer.momentum.wte")) << v.name;
    EXPECT_TRUE(names.contains("outer.global.h.3.mlp.c_fc.weight")) << v.name;
    EXPECT_EQ(names.contains("outer.pending.wpe"), v.name == "overlap") << v.name;
    EXPECT_EQ(names.contains("replica.1.outer.start.wpe"), v.name == "overlap") << v.name;
    EXPECT_EQ(names.contains("replica.1.outer.momentum.wte"), v.name == "sparseloco") << v.name;
    // Eager overlap: each replica's last pseudo-gradient and the last average.
    EXPECT_EQ(names.contains("replica.1.outer.last_average.wpe"), v.name == "overlap") << v.name;
    EXPECT_EQ(names.contains("outer.own.wpe"), v.name == "overlap") << v.name;
    {
      std::ifstream in(mid / "manifest.json");
      EXPECT_EQ(json::parse(in)["files"].size(), 4U) << v.name;
    }
    // Replicas differ mid-round: replica 1's weights are its own.
    EXPECT_NE(names.at("replica.1.h.0.attn.c_attn.weight"), names.at("h.0.attn.c_attn.weight"))
        << v.name;

    const auto resumed = job.train(
        "resumed-" + v.name, with(with(split, v.extra), {"--resume", mid.string(), "--save",
                                                         job.path("resumed-" + v.name).string()}));
    ASSERT_EQ(resumed.size(), 4U) << v.name;
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(resumed[i]["step"], full[i + 4]["step"]);
      EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i + 4]["loss"].get<double>())
          << v.name << ", step " << i + 5;
      EXPECT_EQ(resumed[i]["grad_norm"].get<double>(), full[i + 4]["grad_norm"].get<double>())
          << v.name << ", step " << i + 5;
    }
    EXPECT_EQ(checksums(job.path("resumed-" + v.name) / "step-00000008"),
              checksums(job.path(v.name) / "step-00000008"))
        << v.name;
  }
  // A different split, or no --outer-steps, is refused by name.
  const fs::path mid = job.path("plain") / "step-00000004";
  const std::string replicas =
      job.fail("replicas",
               with(split, {"--replicas", "1", "--microbatches", "4", "--resume", mid.string()}));
  EXPECT_TRUE(contains(replicas, "--replicas 1 (the checkpoint has 2)")) << replicas;
  const std::string plain =
      job.fail("no-outer", {"--stages", "2", "--replicas", "2", "--microbatches", "2", "--steps",
                            "8", "--resume", mid.string()});
  EXPECT_TRUE(contains(plain, "pass --outer-steps 3")) << plain;
  const std::string overlap =
      job.fail("overlap-differs", with(split, {"--outer-overlap", "", "--resume", mid.string()}));
  EXPECT_TRUE(contains(overlap, "--outer-overlap true (the checkpoint has false)")) << overlap;
  // The overlapped run's pending average arrives --outer-delay steps after its round: a different
  // delay is refused by name.
  const std::string delay = job.fail(
      "delay-differs", with(split, {"--outer-overlap", "", "--outer-eager", "", "--outer-fragments",
                                    "3", "--outer-state", "nvme", "--resume",
                                    (job.path("overlap") / "step-00000004").string()}));
  EXPECT_TRUE(contains(delay, "--outer-delay 1 (the checkpoint has 2)")) << delay;
  const std::string codec =
      job.fail("codec-differs", with(split, {"--outer-codec", "sparseloco", "--outer-momentum", "0",
                                             "--resume", mid.string()}));
  EXPECT_TRUE(contains(codec, "--outer-codec \"sparseloco\" (the checkpoint has \"none\")"))
      << codec;
}

// The whole job (launcher and ranks) is killed with SIGKILL while it saves every step; what
// `latest` names must resume.
TEST(StraitTrainCheckpoint, JobKilledWhileSavingEveryStepLeavesACheckpointThatResumes) {
  const Job job;
  const fs::path dir = job.path("saves");
  {
    Strait run(job.args({"--stages", "2", "--replicas", "1", "--microbatches", "4", "--steps",
                         "100000", "--save", dir.string(), "--save-every", "1"}),
               job.path("killed.out"));
    ASSERT_TRUE(strait::test::wait_for_files({dir / "latest"}, 60s)) << run.output();
    std::this_thread::sleep_for(300ms);
    ::kill(run.pid(), SIGKILL);  // the launcher; its ranks die with it (parent-death signal)
    (void)run.exit_code(30s);
  }
  std::this_thread::sleep_for(500ms);  // ranks still inside a save finish dying
  std::ifstream in(dir / "latest");
  std::string name;
  in >> name;
  ASSERT_TRUE(name.starts_with("step-")) << name;
  const int step = std::stoi(name.substr(5));
  const auto resumed =
      job.train("resumed", {"--stages", "1", "--replicas", "1", "--microbatches", "8", "--steps",
                            std::to_string(step + 1), "--resume", dir.string()});
  EXPECT_EQ(resumed.size(), 1U);
}

}  // namespace
