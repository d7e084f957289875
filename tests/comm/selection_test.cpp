// The algorithm selection table (comm/algorithms/selection.h): STRAIT_TUNE rules and their JSON
// form, every kind of malformed rule, precedence, the fallback, the built-in choices, and the
// environment variables.
#include "comm/algorithms/selection.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <optional>
#include <string>

#include "comm/algorithm_registry.h"
#include "comm/algorithms/codec_rules.h"
#include "comm/collective_args.h"
#include "core/error.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using strait::test::contains;

constexpr std::uint64_t K = 1024;
constexpr std::uint64_t M = 1024 * 1024;

std::string chosen(const AlgorithmTable& table, int world, std::uint64_t bytes) {
  return table.choose("allreduce", world, bytes).describe();
}

// The InvalidArgument message parse() throws for `rules` (a test failure when it does not throw).
std::string parse_error(const std::string& rules) {
  try {
    AlgorithmTable::parse(rules);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "'" << rules << "' parsed without an error";
  return {};
}

std::string json_error(const std::string& text) {
  try {
    AlgorithmTable::parse_json(text, "tune.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << text << " parsed without an error";
  return {};
}

using strait::test::ScopedEnv;

TEST(SelectionParse, TheExampleRulesSelectByMessageSize) {
  const auto t = AlgorithmTable::parse(
      "allreduce:0-4K:recursive_doubling;allreduce:4K-1M:rabenseifner;"
      "allreduce:1M-inf:ring@seg=1M");
  ASSERT_EQ(t.rules().size(), 3U);
  EXPECT_EQ(t.rules()[0].min_bytes, 0U);
  EXPECT_EQ(t.rules()[0].max_bytes, 4 * K);
  EXPECT_EQ(t.rules()[2].max_bytes, SelectionRule::kInf);
  EXPECT_EQ(t.rules()[2].selection.params.segment_bytes, M);
  EXPECT_EQ(chosen(t, 2, 0), "recursive_doubling");
  EXPECT_EQ(chosen(t, 2, 4 * K - 1), "recursive_doubling");
  EXPECT_EQ(chosen(t, 2, 4 * K), "rabenseifner");  // ranges are half-open
  EXPECT_EQ(chosen(t, 7, M - 1), "rabenseifner");
  EXPECT_EQ(chosen(t, 7, M), "ring@seg=1M");
  EXPECT_EQ(chosen(t, 7, SelectionRule::kInf - 1), "ring@seg=1M");
  // describe() writes the rules back in the same syntax.
  EXPECT_EQ(t.describe(),
            "allreduce:0-4K:recursive_doubling;allreduce:4K-1M:rabenseifner;"
            "allreduce:1M-inf:ring@seg=1M");
  EXPECT_EQ(AlgorithmTable::parse(t.describe()).describe(), t.describe());
}

TEST(SelectionParse, SizesSuffixesRankRangesAndWhitespace) {
  const auto t = AlgorithmTable::parse(
      " allreduce : ranks=3-4 : 1k-2KiB : rabenseifner ;"
      "allreduce:ranks=5:1mb-1g:ring@seg=4096;allreduce:ranks=6-inf:ring@ SEG = 2M;;");
  ASSERT_EQ(t.rules().size(), 3U);
  const auto& a = t.rules()[0];
  EXPECT_EQ(a.min_ranks, 3);
  EXPECT_EQ(a.max_ranks, 4);
  EXPECT_EQ(a.min_bytes, K);
  EXPECT_EQ(a.max_bytes, 2 * K);
  const auto& b = t.rules()[1];
  EXPECT_EQ(b.min_ranks, 5);
  EXPECT_EQ(b.max_ranks, 5);
  EXPECT_EQ(b.min_bytes, M);
  EXPECT_EQ(b.max_bytes, 1024 * M);
  EXPECT_EQ(b.selection.params.segment_bytes, 4096U);
  const auto& c = t.rules()[2];
  EXPECT_EQ(c.min_ranks, 6);
  EXPECT_EQ(c.max_ranks, SelectionRule::kAnyRanks);
  EXPECT_EQ(c.min_bytes, 0U);  // no byte range: all sizes
  EXPECT_EQ(c.selection.params.segment_bytes, 2 * M);
  EXPECT_EQ(c.describe(), "allreduce:ranks=6-inf:ring@seg=2M");

  EXPECT_EQ(chosen(t, 3, K), "rabenseifner");
  EXPECT_EQ(chosen(t, 5, K), "ring");  // no rule: the first registered algorithm
  EXPECT_EQ(chosen(t, 5, 3 * M), "ring@seg=4K");
  EXPECT_EQ(chosen(t, 100, 1), "ring@seg=2M");
  EXPECT_TRUE(AlgorithmTable::parse("").rules().empty());
  EXPECT_TRUE(AlgorithmTable::parse(" ; ").rules().empty());
}

TEST(SelectionParse, ALaterRuleWinsAndNoRuleFallsBackToTheFirstRegistered) {
  const auto t = AlgorithmTable::parse("allreduce:rabenseifner;allreduce:0-1K:recursive_doubling");
  EXPECT_EQ(chosen(t, 4, 100), "recursive_doubling");
  EXPECT_EQ(chosen(t, 4, 2 * K), "rabenseifner");
  auto combined = AlgorithmTable::defaults();
  combined.append(AlgorithmTable::parse("allreduce:ring@seg=64K"));
  for (const std::uint64_t bytes : {std::uint64_t{8}, 100 * K, 100 * M}) {
    EXPECT_EQ(chosen(combined, 2, bytes), "ring@seg=64K") << bytes;
  }
  EXPECT_EQ(chosen(AlgorithmTable(), 4, 8), "ring");
  const auto e = [] {
    try {
      (void)AlgorithmTable().choose("allgatherv2", 2, 8);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  }();
  EXPECT_TRUE(contains(e, "allgatherv2") && contains(e, "allreduce")) << e;
}

TEST(SelectionParse, EachKindOfBadRuleIsInvalidArgumentNamingTheToken) {
  struct Bad {
    std::string rules;
    std::string token;  // the message names it
    std::string hint;   // and says what is valid
  };
  const Bad cases[] = {
      {"allreduce:0-4K:rabenseifnr", "rabenseifnr", "ring, recursive_doubling, rabenseifner"},
      {"allredcue:0-4K:ring", "allredcue", "valid: allreduce"},
      {"allreduce", "allreduce", "2 to 5"},
      {"allreduce:ranks=2:sites=2:0-1K:1K-2K:ring", "allreduce:ranks=2:sites=2:0-1K:1K-2K:ring",
       "2 to 5"},
      {"allreduce:ranks=2:0-1K:1K-2K:ring", "1K-2K", "second byte range"},
      {"allreduce:sites=0:ring", "sites=0", ">= 1"},
      {"allreduce:sites=2:sites=3:ring", "sites=3", "second site range"},
      {"allreduce:0-4X:ring", "4X", "suffix"},
      {"allreduce:4K:ring", "4K", "LO-HI"},
      {"allreduce:4K-4K:ring", "4K-4K", "empty"},
      {"allreduce:8K-4K:ring", "8K-4K", "empty"},
      {"allreduce:inf-4K:ring", "inf", "upper end"},
      {"allreduce:-4K:ring", "-4K", "LO-HI"},
      {"allreduce:0-1K:0-2K:ring", "0-2K", "second byte range"},
      {"allreduce:ranks=0:ring", "ranks=0", ">= 1"},
      {"allreduce:ranks=4-2:ring", "ranks=4-2", "empty"},
      {"allreduce:ranks=x:ring", "ranks=x", ">= 1"},
      {"allreduce:ranks=2:ranks=3:ring", "ranks=3", "second rank range"},
      {"allreduce:recursive_doubling@seg=1M", "seg=1M", "takes no seg"},
      {"allreduce:ring@depth=4", "depth=4", "seg=SIZE"},
      {"allreduce:ring@seg", "seg", "seg=SIZE"},
      {"allreduce:ring@seg=lots", "lots", "size"},
      {"allreduce:ring@seg=99999999999G", "99999999999G", "too large"},
      {"allreduce:0-4K:", "", "unknown allreduce algorithm"},
  };
  for (const auto& c : cases) {
    const std::string msg = parse_error(c.rules);
    EXPECT_TRUE(contains(msg, "'" + c.token + "'")) << c.rules << " -> " << msg;
    EXPECT_TRUE(contains(msg, c.hint)) << c.rules << " -> " << msg;
    EXPECT_TRUE(contains(msg, "STRAIT_TUNE")) << msg;
  }
}

TEST(SelectionJson, TheSameRulesAsJson) {
  const auto t = AlgorithmTable::parse_json(R"({"rules": [
      {"collective": "allreduce", "bytes": "0-4K", "algorithm": "recursive_doubling"},
      {"collective": "allreduce", "ranks": "2-8", "bytes": "4K-inf", "algorithm": "ring",
       "seg": "1M"},
      {"collective": "allreduce", "ranks": "9-inf", "bytes": "4K-inf", "algorithm": "ring",
       "seg": 65536}]})",
                                            "tune.json");
  EXPECT_EQ(t.describe(),
            "allreduce:0-4K:recursive_doubling;allreduce:ranks=2-8:4K-inf:ring@seg=1M;"
            "allreduce:ranks=9-inf:4K-inf:ring@seg=64K");
}

TEST(SelectionJson, MalformedDocumentsAreInvalidArgumentSayingWhatIsWrong) {
  EXPECT_TRUE(contains(json_error("{\"rules\": ["), "not valid JSON"));
  EXPECT_TRUE(contains(json_error("[]"), "\"rules\""));
  EXPECT_TRUE(contains(json_error(R"({"rulez": []})"), "\"rules\""));
  EXPECT_TRUE(contains(json_error(R"({"rules": [3]})"), "rules[0] is not an object"));
  EXPECT_TRUE(contains(json_error(R"({"rules": [{"collective": "allreduce"}]})"),
                       "needs \"collective\" and \"algorithm\""));
  EXPECT_TRUE(contains(json_error(R"({"rules": [{"collective": "allreduce", "algo": "ring"}]})"),
                       "unknown member \"algo\""));
  EXPECT_TRUE(contains(
      json_error(R"({"rules": [{"collective": "allreduce", "algorithm": "ring", "seg": -1}]})"),
      "rules[0].seg must be a string or a non-negative integer"));
  EXPECT_TRUE(
      contains(json_error(R"({"rules": [{"collective": "allreduce", "algorithm": "ring:x"}]})"),
               "contains one of"));
  // Errors inside a rule come from the rule parser, naming the entry and the token.
  const std::string msg = json_error(
      R"({"rules": [{"collective": "allreduce", "algorithm": "ring"},
                    {"collective": "allreduce", "bytes": "1Q-2K", "algorithm": "ring"}]})");
  EXPECT_TRUE(contains(msg, "tune.json rules[1]")) << msg;
  EXPECT_TRUE(contains(msg, "'1Q'")) << msg;
}

TEST(SelectionJson, OtherTopLevelMembersAreForOtherReaders) {
  // A tuner's file also holds its measurements and the sites (tools/tune/config.h).
  const auto t = AlgorithmTable::parse_json(
      R"({"rules": [{"collective": "allreduce", "algorithm": "rabenseifner"}],
          "sites": [[0, 1]], "links": {"latency_us": [[0, 1], [1, 0]]}, "tuner": {}})",
      "tune.json");
  EXPECT_EQ(t.describe(), "allreduce:rabenseifner");
}

TEST(SelectionJson, CodecsPerSizeRangeForAutoCompression) {
  const auto t = AlgorithmTable::parse_json(R"({"rules": [
      {"collective": "allreduce", "bytes": "0-64K", "algorithm": "recursive_doubling",
       "codec": "none"},
      {"collective": "allreduce", "ranks": "2", "bytes": "64K-inf", "codec": "int4:block=32"}]})",
                                            "tune.json");
  EXPECT_EQ(t.choose_codec("allreduce", 2, 4 * K), "none");
  EXPECT_EQ(t.choose_codec("allreduce", 2, 64 * K), "int4:block=32");
  EXPECT_FALSE(t.choose_codec("allreduce", 3, 64 * K).has_value());
  // A codec-only rule leaves the algorithm alone: the built-in fallback, not a borrowed one.
  EXPECT_EQ(chosen(t, 2, 4 * K), "recursive_doubling");
  EXPECT_EQ(chosen(t, 2, 64 * K), AlgorithmTable().choose("allreduce", 2, 64 * K).describe());
  EXPECT_EQ(t.describe(),
            "allreduce:0-64K:recursive_doubling codec=none;allreduce:ranks=2-2:64K-inf "
            "codec=int4:block=32");
  // The later rule wins, as for algorithms.
  auto later = t;
  later.append(AlgorithmTable::parse_json(
      R"({"rules": [{"collective": "allreduce", "bytes": "0-1M", "codec": "bf16"}]})", "b.json"));
  EXPECT_EQ(later.choose_codec("allreduce", 2, 64 * K), "bf16");
  EXPECT_EQ(later.choose_codec("allreduce", 2, 2 * M), "int4:block=32");
  // No codec anywhere: nullopt (allreduce_compressed's "auto" then runs "none").
  EXPECT_FALSE(AlgorithmTable::defaults().choose_codec("allreduce", 2, 1 * M).has_value());
}

// The codec a rule gives is checked apart from the parser (codec_rules.h), by Communicator::create.
std::string codec_error(const std::string& text) {
  const auto table = AlgorithmTable::parse_json(text, "tune.json");
  try {
    check_rule_codecs(table);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << text << " passed check_rule_codecs";
  return {};
}

TEST(SelectionJson, BadCodecRulesAreInvalidArgumentNamingTheRule) {
  std::string msg = codec_error(R"({"rules": [{"collective": "allreduce", "codec": "int7"}]})");
  EXPECT_TRUE(contains(msg, "rule 'allreduce codec=int7'")) << msg;
  EXPECT_TRUE(contains(msg, "unknown codec 'int7'")) << msg;
  msg = codec_error(R"({"rules": [{"collective": "allreduce", "codec": "int8:bloc=3"}]})");
  EXPECT_TRUE(contains(msg, "bloc")) << msg;
  EXPECT_NO_THROW(check_rule_codecs(AlgorithmTable::parse_json(
      R"({"rules": [{"collective": "allreduce", "codec": "int4:block=32"}]})", "ok.json")));
  msg = json_error(R"({"rules": [{"collective": "allreduce", "codec": 8}]})");
  EXPECT_TRUE(contains(msg, "rules[0].codec must be a codec spec")) << msg;
  msg = json_error(R"({"rules": [{"collective": "allreduce", "codec": "int8", "seg": "8K"}]})");
  EXPECT_TRUE(contains(msg, "\"seg\" but no \"algorithm\"")) << msg;
  msg = json_error(R"({"rules": [{"collective": "gather", "codec": "int8"}]})");
  EXPECT_TRUE(contains(msg, "codecs are chosen for \"allreduce\" only")) << msg;
  msg = json_error(R"({"rules": [{"collective": "gatherx", "codec": "int8"}]})");
  EXPECT_TRUE(contains(msg, "unknown collective")) << msg;
}

TEST(SelectionDefaults, EagerVectorsTheMailboxThenThePipelinedRing) {
  // The built-in table, chosen from measurements with 2 and 4 ranks (selection.cpp). Where the
  // mailbox cannot run (ranks that share no memory), the rules below it decide
  // (Communicator::post; mailbox_allreduce_test.cpp).
  const auto t = AlgorithmTable::defaults();
  const AlgorithmInfo* mailbox = find_algorithm("allreduce", "mailbox");
  for (const int world : {2, 3, 4, 8}) {
    EXPECT_EQ(chosen(t, world, 8), "mailbox") << world;
    EXPECT_EQ(chosen(t, world, 8 * K), "mailbox") << world;
    EXPECT_EQ(chosen(t, world, 256 * K), "mailbox") << world;
    EXPECT_EQ(chosen(t, world, M - 1), "mailbox") << world;
    EXPECT_EQ(chosen(t, world, M), "mailbox") << world;  // a full slot
    EXPECT_EQ(t.choose("allreduce", world, 8, 1, mailbox).describe(), "recursive_doubling");
    EXPECT_EQ(t.choose("allreduce", world, 8248, 1, mailbox).describe(), "recursive_doubling");
    EXPECT_EQ(t.choose("allreduce", world, 8249, 1, mailbox).describe(), "ring@seg=8K");
    EXPECT_EQ(t.choose("allreduce", world, 256 * K, 1, mailbox).describe(), "ring@seg=8K");
    EXPECT_EQ(t.choose("allreduce", world, M, 1, mailbox).describe(), "ring@seg=1M");
    EXPECT_EQ(t.choose("allreduce", world, 64 * M, 1, mailbox).describe(), "ring@seg=1M");
    // Longer vectors: the mailbox a slot at a time, with 2 ranks up to 32 MiB, then the ring.
    EXPECT_EQ(chosen(t, world, M + 1), "mailbox") << world;
    EXPECT_EQ(chosen(t, world, 32 * M), "mailbox") << world;
    const std::string longest = world == 2 ? "ring@seg=1M" : "mailbox";
    EXPECT_EQ(chosen(t, world, 32 * M + 1), longest) << world;
    EXPECT_EQ(chosen(t, world, 64 * M), longest) << world;
  }
}

TEST(SelectionEnvironment, TuneOverridesTheFileWhichOverridesTheDefaults) {
  const test::TempDir dir;
  const std::string path = dir.str() + "/tune.json";
  std::ofstream(path) << R"({"rules": [{"collective": "allreduce", "algorithm": "rabenseifner"}]})";
  {
    const ScopedEnv file("STRAIT_TUNE_FILE", path);
    EXPECT_EQ(chosen(AlgorithmTable::from_environment(), 2, 8), "rabenseifner");
    const ScopedEnv tune("STRAIT_TUNE", "allreduce:0-1K:ring@seg=512");
    const auto t = AlgorithmTable::from_environment();
    EXPECT_EQ(chosen(t, 2, 8), "ring@seg=512");
    EXPECT_EQ(chosen(t, 2, 2 * K), "rabenseifner");
    EXPECT_EQ(chosen(t, 2, 64 * M), "rabenseifner");
  }
  EXPECT_EQ(AlgorithmTable::from_environment().describe(), AlgorithmTable::defaults().describe());
}

TEST(SelectionEnvironment, AMalformedTuneOrAnUnreadableFileIsInvalidArgument) {
  {
    const ScopedEnv tune("STRAIT_TUNE", "allreduce:1M-inf:rings");
    try {
      (void)AlgorithmTable::from_environment();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_TRUE(contains(e.what(), "STRAIT_TUNE: rule 'allreduce:1M-inf:rings'")) << e.what();
    }
  }
  const ScopedEnv file("STRAIT_TUNE_FILE", "/nonexistent/strait/tune.json");
  try {
    (void)AlgorithmTable::from_environment();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e.what(), "/nonexistent/strait/tune.json")) << e.what();
  }
}

TEST(SelectionRegistry, IdsAreUniqueAndNonZeroAndNamesResolve) {
  const auto all = registered_algorithms();
  ASSERT_FALSE(all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_NE(all[i].id, 0);
    EXPECT_EQ(algorithm_by_id(all[i].id), &all[i]);
    EXPECT_EQ(find_algorithm(all[i].collective, all[i].name), &all[i]);
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(all[i].id, all[j].id);
  }
  EXPECT_EQ(find_algorithm("allreduce", "bogus"), nullptr);
  EXPECT_EQ(algorithm_by_id(0), nullptr);
}

// Every row can be built, and every operation kind of CollectiveArgs has a row under its name
// (Communicator::post looks rows up by collective_name).
TEST(SelectionRegistry, EveryRowHasAConstructorAndEveryKindARow) {
  for (const auto& row : registered_algorithms()) {
    EXPECT_TRUE(has_constructor(row)) << row.collective << " " << row.name;
  }
  for (auto k = static_cast<int>(CollectiveArgs::Kind::Send);
       k <= static_cast<int>(CollectiveArgs::Kind::AlltoallV); ++k) {
    const auto name = collective_name(static_cast<CollectiveArgs::Kind>(k));
    bool found = false;
    for (const auto& row : registered_algorithms()) found = found || row.collective == name;
    EXPECT_TRUE(found) << name;
  }
}

}  // namespace
}  // namespace strait::comm
