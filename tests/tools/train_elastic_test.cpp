// `strait train --elastic` end to end (spawns the built binary: the launcher hosts the store, real
// ranks on loopback, heartbeats on): a replica killed by SIGKILL in each phase of a round (inner
// step, the outer average in flight, after the outer step) is dropped at the round boundary and the
// survivors finish with identical weights; a process started with --join is admitted at a round
// boundary with the survivors' state; --min-replicas stops the job after a checkpoint that resumes.
//
// References, computed from other runs rather than from what a run reports about itself: with
// 3 replicas, H = 2 and replica 2 lost, the survivors' weights depend only on which rounds it took
// part in: killed in round 2's inner steps, in round 1 only; killed at the start of round 3, in
// rounds 1 and 2 (the two must differ). Killed during round 2's average or right after its outer
// step, it is in one or the other, depending on whether its last messages reached the survivors
// (who then either all completed the average, or redo it without it): the survivors must end on
// one of the two references, bit for bit, never on a mixture. Test hooks:
// STRAIT_TRAIN_FAULT=ID:STEP:PHASE kills replica ID (SIGKILL) at step STEP (1-based) in PHASE;
// STRAIT_TRAIN_AWAIT_JOINER=STEP holds that round boundary (within the timeout) until a joiner
// waits, so that the joiner is admitted however loaded the machine is.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/elastic_log.h"
#include "tests/common/process.h"
#include "tests/common/strait_process.h"
#include "tests/common/word_corpus.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::contains;
using strait::test::TempDir;

using strait::test::Strait;

// Generous on a loaded 2-core machine: a lost peer is known from its exit or its heartbeat (1 s),
// long before this.
std::vector<std::string> base_env() {
  return {"STRAIT_TIMEOUT_S=60"};
}

// `env` and the launcher's store as printed in `text` ("MASTER_ADDR=A MASTER_PORT=P"), for a
// joiner; empty when `text` has none.
std::vector<std::string> env_at_launchers_store(const std::string& text,
                                                std::vector<std::string> env = base_env()) {
  static const std::regex kStore(R"(MASTER_ADDR=(\S+) MASTER_PORT=(\d+))");
  std::smatch m;
  if (!std::regex_search(text, m, kStore)) return {};
  env.emplace_back("MASTER_ADDR=" + m[1].str());
  env.emplace_back("MASTER_PORT=" + m[2].str());
  return env;
}

class Job {
 public:
  Job() : corpus_(strait::test::write_word_corpus(dir_.path())) {}
  [[nodiscard]] fs::path path(const std::string& name) const { return dir_.path() / name; }

  // A tiny whole-model replica (stages 1), DiLoCo rounds of 2 steps, then `extra`.
  [[nodiscard]] std::vector<std::string> args(const std::vector<std::string>& extra) const {
    std::vector<std::string> a = {"train", "--layers",          "2",      "--dim",
                                  "32",    "--heads",           "2",      "--ctx",
                                  "32",    "--microbatch-size", "2",      "--microbatches",
                                  "2",     "--eval-sequences",  "8",      "--sample-bytes",
                                  "8",     "--warmup",          "2",      "--blas-threads",
                                  "1",     "--stages",          "1",      "--outer-steps",
                                  "2",     "--elastic",         "--data", corpus_.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

 private:
  TempDir dir_;
  fs::path corpus_;
};

// "elastic: replica ID (...) ends after step S with weights xxh3 H": ID -> H, and every S.
struct Ends {
  std::map<int, std::string> weights;
  std::vector<int> steps;
};
Ends final_weights(const std::string& out) {
  static const std::regex kLine(
      R"(elastic: replica (\d+) \(rank \d+ of \d+, generation \d+\) ends after step (\d+) with )"
      R"(weights xxh3 ([0-9a-f]{16}))");
  Ends e;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), kLine); it != std::sregex_iterator();
       ++it) {
    e.weights[std::stoi((*it)[1])] = (*it)[3];
    e.steps.push_back(std::stoi((*it)[2]));
  }
  return e;
}

// The "step" records of --metrics, by step number.
std::vector<int> metric_steps(const fs::path& path) {
  std::vector<int> steps;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const json r = json::parse(line);
    if (r["type"] == "step") steps.push_back(r["step"].get<int>());
  }
  return steps;
}

// The "replicas_in_step" of each "step" record: how many replicas computed it.
std::vector<int> replicas_per_step(const fs::path& path) {
  std::vector<int> in;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    const json r = json::parse(line);
    if (r["type"] == "step") in.push_back(r.value("replicas_in_step", -1));
  }
  return in;
}

std::vector<int> one_to(int n) {
  std::vector<int> v;
  for (int i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

TEST(StraitTrainElastic, ReplicaKilledInAnyPhaseIsDroppedAndSurvivorsAgree) {
  const Job job;
  struct Case {
    std::string name;
    std::string fault;  // ID:STEP:PHASE
  };
  const std::vector<Case> cases = {{"inner", "2:3:inner"},
                                   {"allreduce", "2:4:allreduce"},
                                   {"outer", "2:4:outer"},
                                   {"next-round", "2:5:inner"}};
  std::map<std::string, std::string> weights;
  for (const Case& c : cases) {
    const fs::path out = job.path(c.name + ".out");
    const fs::path metrics = job.path(c.name + ".jsonl");
    std::vector<std::string> env = base_env();
    env.emplace_back("STRAIT_TRAIN_FAULT=" + c.fault);
    Strait run(job.args({"--replicas", "3", "--steps", "8", "--metrics", metrics.string()}), out,
               env);
    const int status = run.wait(180s);
    const std::string text = run.output();
    // The launcher's status is 0: the survivors finished the job.
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << c.name << ":\n" << text;
    EXPECT_TRUE(contains(text, "lost replica 2 (2 of 3 ranks left)")) << c.name << ":\n" << text;
    EXPECT_TRUE(contains(text, "replicas 0,1 in (2 of 3, generation 1)")) << c.name << ":\n"
                                                                          << text;
    const Ends ends = final_weights(text);
    ASSERT_EQ(ends.weights.size(), 2U) << c.name << ":\n" << text;
    ASSERT_TRUE(ends.weights.contains(0) && ends.weights.contains(1)) << c.name;
    EXPECT_EQ(ends.weights.at(0), ends.weights.at(1)) << c.name << ": survivors differ";
    EXPECT_EQ(ends.steps, std::vector<int>({8, 8})) << c.name;
    // Every step once in rank 0's record, none lost or repeated by the re-formation.
    EXPECT_EQ(metric_steps(metrics), one_to(8)) << c.name;
    weights[c.name] = ends.weights.at(0);
  }
  // The references: round 2 without replica 2 (killed inside it) or with it (killed before
  // round 3); they differ.
  const std::string without = weights["inner"];
  const std::string with = weights["next-round"];
  EXPECT_NE(without, with);
  // Killed during round 2's average, or just after its own outer step (its last messages may not
  // have reached the others yet): the survivors either all completed the average with it, or
  // redid it without it. Either way they end on one of the references, never on a mixture.
  for (const char* phase : {"allreduce", "outer"}) {
    EXPECT_TRUE(weights[phase] == without || weights[phase] == with)
        << phase << ": " << weights[phase] << ", references " << without << " and " << with;
  }
}

TEST(StraitTrainElastic, JoinerIsAdmittedAtARoundBoundaryWithTheSurvivorsState) {
  const Job job;
  std::vector<std::string> env = base_env();
  env.emplace_back("STRAIT_TRAIN_FAULT=1:3:inner");
  env.emplace_back("STRAIT_TRAIN_AWAIT_JOINER=6");
  const fs::path metrics = job.path("job.jsonl");
  Strait run(job.args({"--replicas", "2", "--steps", "12", "--metrics", metrics.string()}),
             job.path("job.out"), env);
  // The launcher prints where its store is; the joiner goes there once replica 1 is gone (the
  // job then holds the boundary of step 6 until the joiner waits).
  std::string text = strait::test::wait_for_output(run, "lost replica 1", 120s);
  const std::vector<std::string> joiner_env = env_at_launchers_store(text);
  ASSERT_FALSE(joiner_env.empty()) << text;
  ASSERT_TRUE(contains(text, "lost replica 1 (1 of 2 ranks left)")) << text;
  Strait joiner(job.args({"--replicas", "2", "--steps", "12", "--join"}), job.path("joiner.out"),
                joiner_env);
  const int joiner_status = joiner.wait(180s);
  const int status = run.wait(180s);
  text = run.output();
  const std::string joined = joiner.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  ASSERT_TRUE(WIFEXITED(joiner_status) && WEXITSTATUS(joiner_status) == 0) << joined;
  strait::test::expect_joiner_admitted_after_step_6_with_the_sent_state(text, joined);
  // Both end on the same weights after all 12 steps.
  const Ends survivor = final_weights(text);
  const Ends newcomer = final_weights(joined);
  ASSERT_EQ(survivor.weights.size(), 1U) << text;
  ASSERT_EQ(newcomer.weights.size(), 1U) << joined;
  ASSERT_TRUE(survivor.weights.contains(0) && newcomer.weights.contains(2));
  EXPECT_EQ(survivor.weights.at(0), newcomer.weights.at(2));
  EXPECT_EQ(newcomer.steps, std::vector<int>({12}));
  EXPECT_EQ(metric_steps(metrics), one_to(12));
  // Who computed each step: both for round 1; replica 0 alone from the step replica 1 died in
  // (its aggregate fails, so it reports its own) to step 6, at whose end the joiner arrives (it
  // did not compute step 6); both again from step 7. Replica 1 dies early in step 3, so replica 0
  // may see it gone before its own exchange of step 2's figures (a report, after that step's
  // gradients were averaged) has finished: then step 2 reports replica 0 alone too.
  const std::vector<int> per_step = replicas_per_step(metrics);
  const std::vector<int> seen_in_step_3 = {2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  const std::vector<int> seen_in_step_2_report = {2, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  EXPECT_TRUE(per_step == seen_in_step_3 || per_step == seen_in_step_2_report)
      << "replicas per step: " << testing::PrintToString(per_step);
  // The "joined" record gives the size of the state the joiner received.
  std::ifstream in(metrics);
  std::int64_t state_bytes = -1;
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line);
    if (r["type"] == "elastic" && r["event"] == "joined") state_bytes = r["state_bytes"];
  }
  static const std::regex kReceived(R"(after step 6: received ([0-9.]+) KiB from replica 0)");
  std::smatch received;
  ASSERT_TRUE(std::regex_search(joined, received, kReceived)) << joined;
  EXPECT_NEAR(static_cast<double>(state_bytes) / 1024.0, std::stod(received[1].str()), 0.05);
}

TEST(StraitTrainElastic, BelowMinReplicasTheJobStopsAfterACheckpointThatResumes) {
  const Job job;
  const fs::path dir = job.path("saves");
  std::vector<std::string> env = base_env();
  env.emplace_back("STRAIT_TRAIN_FAULT=1:3:inner");
  Strait run(
      job.args({"--replicas", "3", "--steps", "8", "--min-replicas", "3", "--save", dir.string()}),
      job.path("stopped.out"), env);
  const int status = run.wait(180s);
  const std::string text = run.output();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_TRUE(contains(text,
                       "2 replicas left (replicas 0,2) after step 4, fewer than "
                       "--min-replicas 3"))
      << text;
  ASSERT_TRUE(fs::exists(dir / "step-00000004" / "manifest.json")) << text;
  {
    std::ifstream in(dir / "step-00000004" / "manifest.json");
    const json manifest = json::parse(in);
    EXPECT_EQ(manifest["meta"]["outer"]["replicas"], 2);
    EXPECT_EQ(manifest["files"].size(), 2U);
  }
  // The two survivors' checkpoint continues with two replicas.
  const fs::path metrics = job.path("resumed.jsonl");
  Strait resumed(job.args({"--replicas", "2", "--steps", "8", "--resume", dir.string(), "--metrics",
                           metrics.string()}),
                 job.path("resumed.out"), base_env());
  const int resumed_status = resumed.wait(180s);
  ASSERT_TRUE(WIFEXITED(resumed_status) && WEXITSTATUS(resumed_status) == 0) << resumed.output();
  EXPECT_EQ(metric_steps(metrics), std::vector<int>({5, 6, 7, 8}));
}

// 2 stages x 3 replicas: the rank of replica 1's stage 1 is killed; its stage-0 rank leaves, the
// other two replicas go on, and each stage's ranks end on identical weights.
TEST(StraitTrainElastic, AReplicaThatLosesAStageIsDroppedWhole) {
  const Job job;
  std::vector<std::string> a = job.args({"--replicas", "3", "--steps", "8"});
  *(std::find(a.begin(), a.end(), std::string("--stages")) + 1) = "2";
  std::vector<std::string> env = base_env();
  env.emplace_back("STRAIT_TRAIN_FAULT=3:3:inner");
  Strait run(a, job.path("stages.out"), env);
  const int status = run.wait(180s);
  const std::string text = run.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_TRUE(contains(text,
                       "replica 1 lost a stage's rank, and a replica without one of its 2 "
                       "stages cannot run its pipeline: it is dropped whole, so this rank "
                       "(stage 0) leaves the job"))
      << text;
  EXPECT_TRUE(contains(text, "lost replica 1 (4 of 6 ranks left)")) << text;
  EXPECT_TRUE(contains(text, "replicas 0,2 in (2 of 3, generation 2)")) << text;
  static const std::regex kEnd(
      R"(elastic: replica (\d+) stage (\d+) \(rank \d+ of 4, generation 2\) ends after step 8 )"
      R"(with weights xxh3 ([0-9a-f]{16}))");
  std::map<int, std::map<int, std::string>> by_stage;  // stage -> replica -> weights
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kEnd); it != std::sregex_iterator();
       ++it) {
    by_stage[std::stoi((*it)[2])][std::stoi((*it)[1])] = (*it)[3];
  }
  ASSERT_EQ(by_stage.size(), 2U) << text;
  for (const auto& [stage, replicas] : by_stage) {
    ASSERT_EQ(replicas.size(), 2U) << "stage " << stage << ":\n" << text;
    ASSERT_TRUE(replicas.contains(0) && replicas.contains(2)) << text;
    EXPECT_EQ(replicas.at(0), replicas.at(2)) << "stage " << stage;
  }
}

// 2 stages x 2 replicas: replica 1 loses its stage-1 rank and is dropped whole; two processes
// started with --join (the same flags) are admitted together as replica 2 at the round boundary of
// step 6, each taking a stage and that stage's state from replica 0's rank of the same stage (the
// xxh3 sent per stage equals what the joiner of that stage holds), and each stage's ranks end on
// identical weights. A lone joiner would not be admitted (whole replicas only): the job holds the
// boundary until both wait.
TEST(StraitTrainElastic, ReplicaWithStagesJoinsAsOneProcessPerStage) {
  const Job job;
  std::vector<std::string> a = job.args({"--replicas", "2", "--steps", "12"});
  *(std::find(a.begin(), a.end(), std::string("--stages")) + 1) = "2";
  std::vector<std::string> env = base_env();
  env.emplace_back("STRAIT_TRAIN_FAULT=3:3:inner");
  env.emplace_back("STRAIT_TRAIN_AWAIT_JOINER=6");
  std::vector<std::string> with_metrics = a;
  const fs::path metrics = job.path("job.jsonl");
  with_metrics.insert(with_metrics.end(), {"--metrics", metrics.string()});
  Strait run(with_metrics, job.path("job.out"), env);
  std::string text = strait::test::wait_for_output(run, "lost replica 1", 120s);
  const std::vector<std::string> joiner_env = env_at_launchers_store(text);
  ASSERT_FALSE(joiner_env.empty()) << text;
  ASSERT_TRUE(contains(text, "lost replica 1 (2 of 4 ranks left)")) << text;
  std::vector<std::string> join_args = a;
  join_args.emplace_back("--join");
  Strait first(join_args, job.path("joiner0.out"), joiner_env);
  Strait second(join_args, job.path("joiner1.out"), joiner_env);
  const int first_status = first.wait(180s);
  const int second_status = second.wait(180s);
  const int status = run.wait(180s);
  text = run.output();
  const std::string joined = first.output() + second.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  ASSERT_TRUE(WIFEXITED(first_status) && WEXITSTATUS(first_status) == 0) << first.output();
  ASSERT_TRUE(WIFEXITED(second_status) && WEXITSTATUS(second_status) == 0) << second.output();
  EXPECT_TRUE(
      contains(text, "after step 6 admitted 2 joiners (4 ranks); generation 3: replicas 0,2"))
      << text;
  // Per stage: the state sent (by replica 0's rank of that stage) is the state its joiner holds.
  for (int stage = 0; stage < 2; ++stage) {
    const std::regex sent_line(
        R"(sent the state of step 6 \([^,]+, xxh3 ([0-9a-f]{16})\) to the joiners of stage )" +
        std::to_string(stage));
    const std::regex held_line(R"(joined as replica 2 stage )" + std::to_string(stage) +
                               R"( \(rank )" + std::to_string(2 + stage) +
                               R"( of 4, generation 3\) after step 6: .* packs to xxh3 )"
                               R"(([0-9a-f]{16}))");
    std::smatch sent;
    std::smatch held;
    ASSERT_TRUE(std::regex_search(text, sent, sent_line)) << "stage " << stage << ":\n" << text;
    ASSERT_TRUE(std::regex_search(joined, held, held_line)) << "stage " << stage << ":\n" << joined;
    EXPECT_EQ(sent[1].str(), held[1].str()) << "stage " << stage;
  }
  // Every stage's two ranks (replica 0 and the joined replica 2) end on the same weights.
  static const std::regex kEnd(
      R"(elastic: replica (\d+) stage (\d+) \(rank \d+ of 4, generation 3\) ends after step 12 )"
      R"(with weights xxh3 ([0-9a-f]{16}))");
  std::map<int, std::map<int, std::string>> by_stage;  // stage -> replica -> weights
  const std::string all = text + joined;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), kEnd); it != std::sregex_iterator();
       ++it) {
    by_stage[std::stoi((*it)[2])][std::stoi((*it)[1])] = (*it)[3];
  }
  ASSERT_EQ(by_stage.size(), 2U) << all;
  for (const auto& [stage, replicas] : by_stage) {
    ASSERT_EQ(replicas.size(), 2U) << "stage " << stage << ":\n" << all;
    ASSERT_TRUE(replicas.contains(0) && replicas.contains(2)) << all;
    EXPECT_EQ(replicas.at(0), replicas.at(2)) << "stage " << stage;
  }
  EXPECT_EQ(metric_steps(metrics), one_to(12));
  // Who computed each step: both in round 1; replica 0 alone in steps 5 and 6 (the re-formed
  // world), both from step 7. In round 2 (steps 3 and 4) the world is broken: rank 0 (stage 0,
  // which holds no loss) reports only its own figures, and replica 0's pipeline step may be
  // aborted by the re-formation that replica 1's other rank starts (comm/heartbeat.h), so 0 or 1.
  std::vector<int> in = replicas_per_step(metrics);
  ASSERT_EQ(in.size(), 12U);
  for (const int step : {3, 4}) {
    const int n = in[static_cast<std::size_t>(step - 1)];
    EXPECT_TRUE(n == 0 || n == 1) << "step " << step << ": " << n;
  }
  in.erase(in.begin() + 2, in.begin() + 4);
  EXPECT_EQ(in, std::vector<int>({2, 2, 1, 1, 2, 2, 2, 2, 2, 2}));
}

// With --stages 2, one process started with --join is not a replica: the job never admits it (its
// rounds go on), and it gives up after its timeout (1 s here; the job's 1000 steps take longer)
// saying why.
TEST(StraitTrainElastic, ALoneJoinerOfAReplicaWithStagesIsNotAdmittedAndSaysWhy) {
  const Job job;
  std::vector<std::string> a = job.args({"--replicas", "2", "--steps", "1000"});
  *(std::find(a.begin(), a.end(), std::string("--stages")) + 1) = "2";
  Strait run(a, job.path("job.out"), base_env());
  std::string text = strait::test::wait_for_output(run, "MASTER_PORT=", 60s);
  const std::vector<std::string> lone_env = env_at_launchers_store(text, {"STRAIT_TIMEOUT_S=1"});
  ASSERT_FALSE(lone_env.empty()) << text;
  std::vector<std::string> join_args = a;
  join_args.emplace_back("--join");
  Strait lone(join_args, job.path("lone.out"), lone_env);
  const int lone_status = lone.wait(60s);
  const int status = run.wait(180s);
  text = run.output();
  EXPECT_FALSE(WIFEXITED(lone_status) && WEXITSTATUS(lone_status) == 0) << lone.output();
  EXPECT_TRUE(contains(lone.output(), "no reform admitted this process")) << lone.output();
  EXPECT_TRUE(contains(lone.output(),
                       "with --stages 2 a replica joins as 2 processes started with --join, "
                       "admitted only together"))
      << lone.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_FALSE(contains(text, "admitted")) << text;
}

TEST(StraitTrainElastic, UnsupportedCombinationsAreRefusedByName) {
  const Job job;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--replicas", "2", "--outer-overlap"}, "drop them with --elastic"},
      {{"--replicas", "2", "--min-replicas", "3"}, "--min-replicas 3 must be between 1 and"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::vector<std::string> a = job.args(cases[i].args);
    Strait run(a, job.path("refused" + std::to_string(i) + ".out"), base_env());
    const int status = run.wait(60s);
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << run.output();
    EXPECT_TRUE(contains(run.output(), cases[i].says)) << run.output();
  }
  // --join without --elastic: the flag list without it.
  std::vector<std::string> a = job.args({"--replicas", "2", "--join"});
  a.erase(std::find(a.begin(), a.end(), std::string("--elastic")));
  Strait run(a, job.path("join.out"), base_env());
  (void)run.wait(60s);
  EXPECT_TRUE(contains(run.output(), "pass --elastic too")) << run.output();
}

// SparseLoCo (--outer-codec sparseloco): its error feedback is each replica's own. A replica
// killed right after its outer step of round 2 (whose gathered messages the others may or may not
// have; the "allreduce" hook posts an uncompressed average) leaves survivors on identical weights;
// a joiner admitted at step 6 (its error feedback zeroed, the rest the survivor's state) ends on
// the survivor's weights bit for bit.
TEST(StraitTrainElastic, SparseLoCoSurvivesALostReplicaAndAdmitsAJoiner) {
  const Job job;
  const std::vector<std::string> sparse = {"--outer-codec",    "sparseloco:density=0.05,chunk=256",
                                           "--outer-momentum", "0",
                                           "--outer-lr",       "1"};
  const auto with_sparse = [&](std::vector<std::string> a) {
    a.insert(a.end(), sparse.begin(), sparse.end());
    return a;
  };
  {
    std::vector<std::string> env = base_env();
    env.emplace_back("STRAIT_TRAIN_FAULT=2:4:outer");
    Strait run(job.args(with_sparse({"--replicas", "3", "--steps", "8"})), job.path("lost.out"),
               env);
    const int status = run.wait(180s);
    const std::string text = run.output();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
    EXPECT_TRUE(contains(text, "lost replica 2 (2 of 3 ranks left)")) << text;
    const Ends ends = final_weights(text);
    ASSERT_EQ(ends.weights.size(), 2U) << text;
    EXPECT_EQ(ends.weights.at(0), ends.weights.at(1)) << "survivors differ:\n" << text;
  }
  std::vector<std::string> env = base_env();
  env.emplace_back("STRAIT_TRAIN_FAULT=1:3:inner");
  env.emplace_back("STRAIT_TRAIN_AWAIT_JOINER=6");
  Strait run(job.args(with_sparse({"--replicas", "2", "--steps", "12"})), job.path("job.out"), env);
  std::string text = strait::test::wait_for_output(run, "lost replica 1", 120s);
  const std::vector<std::string> joiner_env = env_at_launchers_store(text);
  ASSERT_FALSE(joiner_env.empty()) << text;
  Strait joiner(job.args(with_sparse({"--replicas", "2", "--steps", "12", "--join"})),
                job.path("joiner.out"), joiner_env);
  const int joiner_status = joiner.wait(180s);
  const int status = run.wait(180s);
  text = run.output();
  const std::string joined = joiner.output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  ASSERT_TRUE(WIFEXITED(joiner_status) && WEXITSTATUS(joiner_status) == 0) << joined;
  const Ends survivor = final_weights(text);
  const Ends newcomer = final_weights(joined);
  ASSERT_TRUE(survivor.weights.contains(0) && newcomer.weights.contains(2)) << text << joined;
  EXPECT_EQ(survivor.weights.at(0), newcomer.weights.at(2));
  EXPECT_EQ(newcomer.steps, std::vector<int>({12}));
}

}  // namespace
