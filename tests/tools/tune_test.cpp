// The tuner's parts that need no launcher (tools/tune/): the pure decision on synthetic
// measurements, the accuracy budget, site derivation, the pairing of link tests, and the config
// it writes, read back by the selection table and by a real 2-rank Communicator whose
// allreduce_compressed with codec "auto" must then send the chosen codec's bytes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/compress/codec_factory.h"
#include "comm/links.h"
#include "comm/sites.h"
#include "core/error.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tools/tune/budget.h"
#include "tools/tune/candidates.h"
#include "tools/tune/config.h"
#include "tools/tune/decide.h"
#include "tools/tune/report.h"

namespace strait::tools::tune {
namespace {

using strait::test::contains;
constexpr std::uint64_t K = 1024;
constexpr std::uint64_t M = 1024 * 1024;
constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

std::size_t index_of(const std::vector<Candidate>& c, const std::string& label) {
  const auto it =
      std::find_if(c.begin(), c.end(), [&](const Candidate& x) { return x.label == label; });
  EXPECT_NE(it, c.end()) << label << " is not a candidate";
  return static_cast<std::size_t>(it - c.begin());
}

// A table where every candidate takes `slow` us, except the given (label, size index, time).
Measurements table(const std::vector<std::uint64_t>& sizes,
                   const std::vector<std::tuple<std::string, std::size_t, double>>& times,
                   double slow = 1000) {
  const std::vector<std::uint64_t> segs = {8 * K, 1 * M};
  Measurements m{.world_size = 2, .sizes = sizes, .candidates = allreduce_candidates(segs)};
  m.time_us.assign(m.candidates.size(), std::vector<double>(sizes.size(), slow));
  for (const auto& [label, s, t] : times) m.time_us[index_of(m.candidates, label)][s] = t;
  return m;
}

std::string label_or_none(const Measurements& m, const std::optional<std::size_t>& c) {
  return c ? m.candidates[*c].label : "none";
}

TEST(TuneCandidates, EveryRegisteredAlgorithmAndEveryCodecButNone) {
  const std::vector<std::uint64_t> segs = {8 * K, 0};
  const auto c = allreduce_candidates(segs);
  std::set<std::string> labels;
  for (const auto& x : c) labels.insert(x.label);
  for (const auto& a : comm::registered_algorithms()) {
    if (a.collective != "allreduce") continue;
    if (a.segmented) {
      EXPECT_TRUE(labels.contains(std::string(a.name) + "@seg=8K")) << a.name;
      EXPECT_TRUE(labels.contains(std::string(a.name))) << a.name;  // seg 0: unsegmented
    } else {
      EXPECT_TRUE(labels.contains(std::string(a.name))) << a.name;
    }
  }
  for (const auto n : comm::codec_names()) {
    EXPECT_EQ(labels.contains(std::string(n)), n != "none") << n;
  }
  // Algorithms first, then codecs in accuracy order.
  const auto first_codec =
      std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.is_codec(); });
  EXPECT_TRUE(std::all_of(first_codec, c.end(), [](const Candidate& x) { return x.is_codec(); }));
  EXPECT_TRUE(std::is_sorted(first_codec, c.end(), [](const Candidate& a, const Candidate& b) {
    return a.level < b.level;
  }));
}

TEST(TuneBudget, LevelsFollowTheAccuracyOrder) {
  EXPECT_EQ(codec_level("none"), 0);
  EXPECT_EQ(codec_level("fp16"), codec_level("bf16"));
  EXPECT_LT(codec_level("bf16"), codec_level("int8"));
  EXPECT_LT(codec_level("int8"), codec_level("int4"));
  EXPECT_LT(codec_level("int4"), codec_level("onebit"));
  EXPECT_EQ(codec_level("onebit"), codec_level("topk"));
  EXPECT_EQ(codec_level("int4:block=32"), codec_level("int4"));
  EXPECT_EQ(codec_level("a-codec-the-table-lacks"), kLossiest);
  EXPECT_EQ(parse_max_codec("int8"), codec_level("int8"));
}

TEST(TuneBudget, AnUnknownMaxCodecIsAClearErrorListingTheValidNames) {
  try {
    (void)parse_max_codec("int7");
    ADD_FAILURE() << "int7 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "'int7'")) << msg;
    for (const auto n : comm::codec_names()) EXPECT_TRUE(contains(msg, std::string(n))) << msg;
    // Listed from lossless to lossiest.
    EXPECT_LT(msg.find("none"), msg.find("int8")) << msg;
    EXPECT_LT(msg.find("int8"), msg.find("int4")) << msg;
  }
}

TEST(TuneDecide, PicksTheFastestAlgorithmAndTheFastestCodecWithinTheBudget) {
  const auto m = table({4 * K, 64 * K, 1 * M}, {{"recursive_doubling", 0, 10},
                                                {"ring@seg=8K", 0, 20},
                                                {"ring@seg=8K", 1, 50},
                                                {"bf16", 1, 30},
                                                {"int8", 1, 40},
                                                {"ring@seg=1M", 2, 400},
                                                {"int8", 2, 200},
                                                {"int4", 2, 150},
                                                {"onebit", 2, 100}});
  const Decision d = decide(m, codec_level("int8"));
  ASSERT_EQ(d.sizes.size(), 3U);
  EXPECT_EQ(m.candidates[d.sizes[0].algorithm].label, "recursive_doubling");
  EXPECT_EQ(label_or_none(m, d.sizes[0].codec), "none");
  EXPECT_DOUBLE_EQ(d.sizes[0].codec_us, 10);
  EXPECT_FALSE(d.sizes[0].over_budget);
  EXPECT_EQ(m.candidates[d.sizes[1].algorithm].label, "ring@seg=8K");
  EXPECT_EQ(label_or_none(m, d.sizes[1].codec), "bf16");
  EXPECT_DOUBLE_EQ(d.sizes[1].codec_us, 30);
  EXPECT_EQ(m.candidates[d.sizes[2].algorithm].label, "ring@seg=1M");
  EXPECT_EQ(label_or_none(m, d.sizes[2].codec), "int8");
  ASSERT_TRUE(d.sizes[2].over_budget);
  EXPECT_EQ(m.candidates[*d.sizes[2].over_budget].label, "onebit");  // the fastest refused

  // A wider budget takes onebit; a lossless one never compresses.
  EXPECT_EQ(label_or_none(m, decide(m, kLossiest).sizes[2].codec), "onebit");
  for (const auto& s : decide(m, kLossless).sizes) {
    EXPECT_FALSE(s.codec);
    EXPECT_DOUBLE_EQ(s.codec_us, s.algorithm_us);
  }
}

TEST(TuneDecide, NeverPicksACodecAboveTheBudgetWhateverTheTimes) {
  // Every codec is fastest somewhere; for each budget, no choice may exceed it.
  const std::vector<std::uint64_t> sizes = {4 * K, 16 * K, 64 * K, 256 * K, 1 * M, 4 * M};
  std::vector<std::tuple<std::string, std::size_t, double>> times;
  const auto names = codecs_by_accuracy();
  std::size_t s = 0;
  for (const auto& n : names) {
    if (n == "none") continue;
    times.emplace_back(n, s % sizes.size(), 1.0);
    ++s;
  }
  const auto m = table(sizes, times);
  for (int level = kLossless; level <= kLossiest; ++level) {
    for (const auto& c : decide(m, level).sizes) {
      if (c.codec) {
        EXPECT_LE(m.candidates[*c.codec].level, level) << m.candidates[*c.codec].label;
      }
      if (c.over_budget) {
        EXPECT_GT(m.candidates[*c.over_budget].level, level);
      }
    }
  }
}

TEST(TuneDecide, TiesGoToTheLessLossyCodecThenTheEarlierCandidate) {
  // At 4K a codec as fast as the plain allreduce loses to "none"; at 64K fp16 and bf16 tie with
  // int8 (less lossy wins), and fp16 / bf16 tie with each other (the earlier candidate wins);
  // two algorithms that tie: the earlier registered one.
  const auto m = table({4 * K, 64 * K}, {{"ring@seg=8K", 0, 10},
                                         {"recursive_doubling", 0, 10},
                                         {"bf16", 0, 10},
                                         {"ring@seg=8K", 1, 50},
                                         {"int8", 1, 20},
                                         {"bf16", 1, 20},
                                         {"fp16", 1, 20}});
  const auto d = decide(m, kLossiest);
  EXPECT_EQ(m.candidates[d.sizes[0].algorithm].label, "ring@seg=8K");
  EXPECT_FALSE(d.sizes[0].codec);
  const auto winner = label_or_none(m, d.sizes[1].codec);
  EXPECT_EQ(winner, codecs_by_accuracy()[1]);  // the first 16-bit cast in candidate order
  EXPECT_TRUE(winner == "bf16" || winner == "fp16");
  // Deterministic: the same table gives the same rules.
  const auto again = decide(m, kLossiest);
  ASSERT_EQ(again.rules.size(), d.rules.size());
  for (std::size_t i = 0; i < d.rules.size(); ++i) {
    EXPECT_EQ(again.rules[i].describe(), d.rules[i].describe());
  }
}

TEST(TuneDecide, TimesWithinTheToleranceAreTies) {
  // ring@seg=8K (registered first) 3% slower than recursive doubling; int8 3% faster than the
  // plain allreduce: within 5% both are noise, so the first algorithm and "none" stay.
  const auto m = table({4 * K}, {{"ring@seg=8K", 0, 103},
                                 {"recursive_doubling", 0, 100},
                                 {"int8", 0, 100},
                                 {"onebit", 0, 99}});
  auto d = decide(m, codec_level("int8"), 0.05);
  EXPECT_EQ(m.candidates[d.sizes[0].algorithm].label, "ring@seg=8K");
  EXPECT_FALSE(d.sizes[0].codec);
  EXPECT_FALSE(d.sizes[0].over_budget);  // onebit is not faster beyond the tolerance either
  d = decide(m, codec_level("int8"), 0.0);
  EXPECT_EQ(m.candidates[d.sizes[0].algorithm].label, "recursive_doubling");
  EXPECT_FALSE(d.sizes[0].codec);  // int8 ties with the plain allreduce: less lossy wins
  ASSERT_TRUE(d.sizes[0].over_budget);
  EXPECT_EQ(m.candidates[*d.sizes[0].over_budget].label, "onebit");
  EXPECT_THROW((void)decide(m, kLossiest, -1), Error);
}

TEST(TuneDecide, AdjacentEqualChoicesMergeIntoContiguousRanges) {
  const std::vector<std::uint64_t> sizes = {4 * K, 16 * K, 64 * K, 256 * K, 1 * M};
  const auto m = table(sizes, {{"recursive_doubling", 0, 1},
                               {"recursive_doubling", 1, 1},
                               {"ring@seg=8K", 2, 1},
                               {"ring@seg=8K", 3, 1},
                               {"int8", 3, 0.5},
                               {"ring@seg=8K", 4, 1},
                               {"int8", 4, 0.5}});
  const auto d = decide(m, codec_level("int8"));
  ASSERT_EQ(d.rules.size(), 3U);
  EXPECT_EQ(d.rules[0].describe(), "allreduce:ranks=2-2:0-32K:recursive_doubling codec=none");
  EXPECT_EQ(d.rules[1].describe(), "allreduce:ranks=2-2:32K-128K:ring@seg=8K codec=none");
  EXPECT_EQ(d.rules[2].describe(), "allreduce:ranks=2-2:128K-inf:ring@seg=8K codec=int8");
  // Contiguous from 0 to inf.
  EXPECT_EQ(d.rules.front().min_bytes, 0U);
  EXPECT_EQ(d.rules.back().max_bytes, comm::SelectionRule::kInf);
  for (std::size_t i = 1; i < d.rules.size(); ++i) {
    EXPECT_EQ(d.rules[i - 1].max_bytes, d.rules[i].min_bytes);
  }
}

TEST(TuneDecide, RangeBordersLieNearTheGeometricMean) {
  EXPECT_EQ(range_border(4 * K, 16 * K), 8 * K);
  EXPECT_EQ(range_border(4 * K, 8 * K), 5 * K);
  EXPECT_EQ(range_border(1 * M, 4 * M), 2 * M);
  EXPECT_EQ(range_border(4, 8), 5U);
  EXPECT_EQ(range_border(1, 2), 2U);
  for (std::uint64_t a = 1; a < 5000; a += 7) {
    for (const std::uint64_t b : {a + 1, 2 * a, 4 * a, 3 * a + 5}) {
      const auto x = range_border(a, b);
      EXPECT_GT(x, a);
      EXPECT_LE(x, b);
    }
  }
}

TEST(TuneDecide, BadTablesAndUnmeasuredAlgorithmsAreErrors) {
  auto m = table({4 * K, 16 * K}, {});
  for (std::size_t c = 0; c < m.candidates.size(); ++c) {
    if (!m.candidates[c].is_codec()) m.time_us[c][1] = kNotMeasured;
  }
  EXPECT_THROW((void)decide(m, kLossiest), Error);
  auto unsorted = table({16 * K, 4 * K}, {});
  EXPECT_THROW((void)decide(unsorted, kLossiest), Error);
  // A codec that was not measured is never chosen.
  auto partly = table({4 * K}, {{"int8", 0, kNotMeasured}, {"recursive_doubling", 0, 5}});
  EXPECT_FALSE(decide(partly, kLossiest).sizes[0].codec);
}

// The sites `strait tune` writes: comm/sites.h's clustering, as lists of ranks.
std::vector<std::vector<int>> sites_of(const std::vector<std::vector<double>>& bandwidth,
                                       double factor) {
  return comm::cluster_by_bandwidth(bandwidth, factor).members();
}

TEST(TuneSites, RanksJoinedByFastLinksFormSites) {
  const double fast = 5000;
  const double slow = 12;
  // Two sites of two ranks: 0-1 and 2-3 fast, the rest slow.
  const std::vector<std::vector<double>> two = {{0, fast, slow, slow},
                                                {fast, 0, slow, slow},
                                                {slow, slow, 0, fast * 0.5},
                                                {slow, slow, fast * 0.5, 0}};
  EXPECT_EQ(sites_of(two, 4), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  // Interleaved ranks: sites are ordered by their lowest rank, ranks ascending.
  const std::vector<std::vector<double>> interleaved = {
      {0, slow, fast, slow}, {slow, 0, slow, fast}, {fast, slow, 0, slow}, {slow, fast, slow, 0}};
  EXPECT_EQ(sites_of(interleaved, 4), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // A link a bit more than 4x slower than the fastest splits; within 4x joins.
  const std::vector<std::vector<double>> edge = {{0, 100, 24}, {100, 0, 24}, {24, 24, 0}};
  EXPECT_EQ(sites_of(edge, 4), (std::vector<std::vector<int>>{{0, 1}, {2}}));
  EXPECT_EQ(sites_of(edge, 5), (std::vector<std::vector<int>>{{0, 1, 2}}));
  // One link only: it is the fastest, so one site (sites need two ranks in one to be seen).
  EXPECT_EQ(sites_of({{0, slow}, {slow, 0}}, 4), (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_THROW((void)sites_of({{0, 1}, {1}}, 4), Error);
  EXPECT_THROW((void)sites_of(two, 0.5), Error);
}

TEST(TuneLinks, TheTournamentPairsEveryTwoRanksOnceAndNoRankTwiceInARound) {
  for (int world = 2; world <= 9; ++world) {
    std::set<std::pair<int, int>> met;
    for (int round = 0; round < comm::tournament_rounds(world); ++round) {
      for (int r = 0; r < world; ++r) {
        const int p = comm::tournament_partner(r, round, world);
        if (p < 0) continue;
        ASSERT_NE(p, r) << world;
        ASSERT_LT(p, world);
        ASSERT_EQ(comm::tournament_partner(p, round, world), r)
            << "world " << world << " round " << round;
        if (r < p) {
          EXPECT_TRUE(met.insert({r, p}).second) << r << "-" << p << " met twice";
        }
      }
    }
    EXPECT_EQ(met.size(), static_cast<std::size_t>(world * (world - 1) / 2)) << world;
  }
}

// A decision whose codecs differ by size: none at 4K, bf16 at 64K, int8 at 1M (int4 faster but
// over the budget).
Decision three_codecs(Measurements& m) {
  m = table({4 * K, 64 * K, 1 * M}, {{"recursive_doubling", 0, 10},
                                     {"ring@seg=8K", 1, 100},
                                     {"bf16", 1, 60},
                                     {"ring@seg=1M", 2, 900},
                                     {"int8", 2, 300},
                                     {"int4", 2, 200}});
  return decide(m, codec_level("int8"));
}

TEST(TuneConfig, TheWrittenRulesReadBackAsTheDecision) {
  Measurements m;
  const Decision d = three_codecs(m);
  TuneResult r{.measurements = m,
               .decision = d,
               .links = {{{0, 3.5}, {3.5, 0}}, {{0, 900}, {900, 0}}},
               .sites = {{0, 1}},
               .max_codec = "int8",
               .site_factor = 4};
  const auto json = config_json(r);
  EXPECT_EQ(json["sites"], nlohmann::json::parse("[[0, 1]]"));
  EXPECT_EQ(json["links"]["bandwidth_MBps"][0][1], 900);
  EXPECT_EQ(json["tuner"]["time_us"]["int4"][2], 200);
  const auto t = comm::AlgorithmTable::parse_json(json.dump(), "tune.json");
  for (std::size_t s = 0; s < m.sizes.size(); ++s) {
    const auto bytes = m.sizes[s];
    EXPECT_EQ(t.choose("allreduce", 2, bytes).describe(), m.candidates[d.sizes[s].algorithm].label);
    EXPECT_EQ(t.choose_codec("allreduce", 2, bytes), label_or_none(m, d.sizes[s].codec));
  }
  EXPECT_EQ(t.choose_codec("allreduce", 2, 0), "none");
  EXPECT_EQ(t.choose_codec("allreduce", 2, 64 * M), "int8");
  // Measured for 2 ranks: another world size falls back to the built-in algorithms, no codec.
  EXPECT_FALSE(t.choose_codec("allreduce", 4, 1 * M).has_value());
  EXPECT_EQ(t.choose("allreduce", 4, 8).describe(),
            comm::AlgorithmTable().choose("allreduce", 4, 8).describe());

  const std::string table_text = format_decision(m, d, "int8");
  EXPECT_TRUE(contains(table_text, "int4")) << table_text;  // the refused faster codec
  EXPECT_TRUE(contains(table_text, "recursive_doubling")) << table_text;
}

// Element i of rank r's input: small integers, so sums are exact in fp32 and in bf16.
std::vector<float> input(int rank, std::size_t count) {
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>((i * 7 + rank * 3) % 16) - 8;
  return x;
}

TEST(TuneConfig, AutoCompressionSendsTheChosenCodecsBytesThroughTheCommunicator) {
  Measurements m;
  const Decision d = three_codecs(m);
  const test::TempDir dir;
  const auto path = dir.path() / "tune.json";
  write_config(path,
               config_json(TuneResult{.measurements = m, .decision = d, .max_codec = "int8"}));
  ::setenv("STRAIT_TUNE_FILE", path.c_str(),
           1);  // read by Communicator::create (this process only)

  // Sizes inside each range, not only the measured ones: 6K is still "none" (border 16K).
  const std::vector<std::pair<std::uint64_t, std::string>> cases = {
      {4 * K, "none"}, {6 * K, "none"}, {64 * K, "bf16"}, {1 * M, "int8"}, {2 * M, "int8"}};
  for (const auto& [bytes, codec] : cases) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<std::uint64_t> sent(2);
    std::vector<std::uint64_t> plain(2);
    std::vector<std::vector<float>> results(2);
    comm::testing::run_ranks(2, [&](comm::Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      const auto x = input(comm.rank(), count);
      std::vector<float> out(count);
      auto before = comm.stats().allreduce_bytes;
      comm.allreduce_compressed(x.data(), out.data(), count, kernels::ReduceOp::Sum,
                                comm::Compression{.codec = "auto"});
      sent[r] = comm.stats().allreduce_bytes - before;
      results[r] = out;
      // Plain allreduce stays lossless and uncompressed, whatever the file says.
      before = comm.stats().allreduce_bytes;
      comm.allreduce(x.data(), out.data(), count, kernels::DType::F32, kernels::ReduceOp::Sum);
      plain[r] = comm.stats().allreduce_bytes - before;
      const auto other = input(1 - comm.rank(), count);
      for (std::size_t i = 0; i < count; ++i) {
        if (out[i] != x[i] + other[i]) {
          ADD_FAILURE() << "plain allreduce element " << i << " is " << out[i];
          break;
        }
      }
    });
    const auto c = comm::make_codec_from_spec(codec);
    // Two ranks: the compressed ring sends two encoded halves; "none" is the plain allreduce,
    // which sends the vector once (either algorithm at 2 ranks).
    const std::uint64_t expected = codec == "none" ? bytes : 2 * c->encoded_bytes(count / 2);
    EXPECT_EQ(sent[0], expected) << bytes << " bytes should be " << codec;
    EXPECT_EQ(sent[1], expected) << bytes << " bytes should be " << codec;
    EXPECT_EQ(plain[0], bytes) << bytes;
    EXPECT_EQ(results[0], results[1]) << "ranks differ at " << bytes;
    // The integers sum exactly in fp32 and bf16; int8 only approximately.
    const auto a = input(0, count);
    const auto b = input(1, count);
    for (std::size_t i = 0; i < count; ++i) {
      const float want = a[i] + b[i];
      const float tol = codec == "int8" ? 0.5F : 0.0F;
      if (std::fabs(results[0][i] - want) > tol) {
        ADD_FAILURE() << codec << " element " << i << ": " << results[0][i] << " != " << want;
        break;
      }
    }
  }
  ::unsetenv("STRAIT_TUNE_FILE");
}

}  // namespace
}  // namespace strait::tools::tune
