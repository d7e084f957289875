// Hierarchical allreduce (comm/algorithms/hierarchical_allreduce.h) and sites (comm/sites.h), ranks
// as threads over UCX: site layouts 2+2, 3+1, one site of 3, 3 singleton sites and an interleaved
// one, against a double-precision sum; integers exact; bit-identical on every rank (uncompressed
// and with int8 / int4 / bf16 / topk between sites); the singleton layout bit-exact against the
// flat ring; parsing of STRAIT_SITES / STRAIT_TOPOLOGY_FILE and its errors; ranks that disagree on
// sites, streams or the algorithm fail instead of hanging; striping over 1, 2, 4 streams gives the
// same bytes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "comm/sites.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DType;
using kernels::ReduceOp;
using strait::test::contains;
using testing::error_of;
using testing::run_ranks_with;

using strait::test::ScopedEnv;

using testing::input_of;

struct Layout {
  std::string name;
  std::vector<int> sites;  // site of each world rank
  [[nodiscard]] int world() const { return static_cast<int>(sites.size()); }
  [[nodiscard]] int site_count() const { return *std::max_element(sites.begin(), sites.end()) + 1; }
};

const std::vector<Layout> kLayouts = {{"2+2", {0, 0, 1, 1}},
                                      {"3+1", {0, 0, 0, 1}},
                                      {"one_site_of_3", {0, 0, 0}},
                                      {"3_singletons", {0, 1, 2}},
                                      {"interleaved_2+2", {0, 1, 0, 1}}};

// Options with the layout's sites and a table that runs hierarchical for every size (by default
// it takes vectors of 8249 bytes and more, with several sites).
CommOptions options_for(const Layout& l, const std::string& rules = "allreduce:hierarchical",
                        int streams = 1) {
  CommOptions o = testing::options_with_timeout(testing::kTestTimeout);
  o.sites = l.sites;
  o.streams = streams;
  o.algorithms = std::make_shared<const AlgorithmTable>(AlgorithmTable::parse(rules, "test"));
  return o;
}

template <class T>
void expect_identical(const std::vector<std::vector<T>>& results, const std::string& what) {
  for (std::size_t r = 1; r < results.size(); ++r) {
    ASSERT_EQ(results[r].size(), results[0].size()) << what;
    ASSERT_EQ(std::memcmp(results[0].data(), results[r].data(), results[0].size() * sizeof(T)), 0)
        << what << ": rank " << r << " differs from rank 0";
  }
}

const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 100'003};

class Hierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(Hierarchical, F32SumAndAvgMatchTheDoubleSumAndAreIdenticalOnEveryRank) {
  const Layout& l = GetParam();
  for (const std::size_t count : kCounts) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      for (const bool in_place : {false, true}) {
        std::vector<std::vector<float>> results(static_cast<std::size_t>(l.world()));
        std::vector<int> sites_seen(static_cast<std::size_t>(l.world()));
        run_ranks_with(
            l.world(), [&](int) { return options_for(l); },
            [&](Communicator& comm) {
              auto x = input_of(comm.rank(), count, 1);
              auto& out = results[static_cast<std::size_t>(comm.rank())];
              sites_seen[static_cast<std::size_t>(comm.rank())] = comm.sites().count();
              if (in_place) {
                comm.allreduce(x.data(), x.data(), count, DType::F32, op);
                out = x;
              } else {
                out.assign(count, -1.0F);
                comm.allreduce(x.data(), out.data(), count, DType::F32, op);
              }
            });
        const std::string what =
            fmt::format("{} count {} {} {}", l.name, count, kernels::reduce_op_name(op),
                        in_place ? "in place" : "");
        for (const int s : sites_seen) EXPECT_EQ(s, l.site_count()) << what;
        expect_identical(results, what);
        const double scale = op == ReduceOp::Avg ? 1.0 / l.world() : 1.0;
        std::vector<double> exact(count, 0.0);
        double max_abs = 0;
        for (int r = 0; r < l.world(); ++r) {
          const auto x = input_of(r, count, 1);
          for (std::size_t i = 0; i < count; ++i) {
            exact[i] += x[i];
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
          }
        }
        // fp32 summation of P terms: at most P roundings of values up to P * max|x|.
        const double bound = l.world() * l.world() * max_abs * 0x1p-23 * scale + 1e-7;
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(results[0][i], exact[i] * scale, bound) << what << " element " << i;
        }
      }
    }
  }
}

TEST_P(Hierarchical, IntegersAreExactForSumMaxAndProd) {
  const Layout& l = GetParam();
  constexpr std::size_t kCount = 10'007;
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod}) {
    std::vector<std::vector<std::int32_t>> results(static_cast<std::size_t>(l.world()));
    const auto value = [](int rank, std::size_t i) {
      return static_cast<std::int32_t>((i * 31 + static_cast<std::size_t>(rank) * 7) % 5) - 2;
    };
    run_ranks_with(
        l.world(), [&](int) { return options_for(l); },
        [&](Communicator& comm) {
          std::vector<std::int32_t> x(kCount);
          for (std::size_t i = 0; i < kCount; ++i) x[i] = value(comm.rank(), i);
          auto& out = results[static_cast<std::size_t>(comm.rank())];
          out.assign(kCount, 0);
          comm.allreduce(x.data(), out.data(), kCount, DType::I32, op);
        });
    for (std::size_t i = 0; i < kCount; ++i) {
      std::int64_t expected = value(0, i);
      for (int r = 1; r < l.world(); ++r) {
        const auto v = value(r, i);
        expected = op == ReduceOp::Sum   ? expected + v
                   : op == ReduceOp::Max ? std::max<std::int64_t>(expected, v)
                                         : expected * v;
      }
      for (int r = 0; r < l.world(); ++r) {
        ASSERT_EQ(results[static_cast<std::size_t>(r)][i], expected)
            << l.name << " " << kernels::reduce_op_name(op) << " rank " << r << " element " << i;
      }
    }
  }
}

// Compression between sites only (with one site, the flat compressed ring): bit-identical on every
// rank, within the codec's bound.
TEST_P(Hierarchical, CompressedBetweenSitesIsBitIdenticalAndWithinTheCodecsBound) {
  const Layout& l = GetParam();
  // Per encode: bf16 |v| 2^-9, int8 absmax/254, int4 absmax/14; a shard is encoded once per hop
  // of the S-site ring (S encodes), each of a partial sum up to P * max|x|.
  const std::vector<std::pair<std::string, double>> codecs = {
      {"int8", 1.0 / 254}, {"int4", 1.0 / 14}, {"bf16", 1.0 / 256}};
  for (const auto& [codec, relative] : codecs) {
    for (const std::size_t count : kCounts) {
      for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        std::vector<std::vector<float>> results(static_cast<std::size_t>(l.world()));
        run_ranks_with(
            l.world(), [&](int) { return options_for(l); },
            [&](Communicator& comm) {
              const auto x = input_of(comm.rank(), count, 2);
              auto& out = results[static_cast<std::size_t>(comm.rank())];
              out.assign(count, -1.0F);
              comm.allreduce_compressed(x.data(), out.data(), count, op, Compression{codec, ""});
            });
        const std::string what =
            fmt::format("{} {} count {} {}", l.name, codec, count, kernels::reduce_op_name(op));
        expect_identical(results, what);
        const double scale = op == ReduceOp::Avg ? 1.0 / l.world() : 1.0;
        std::vector<double> exact(count, 0.0);
        double max_abs = 0;
        for (int r = 0; r < l.world(); ++r) {
          const auto x = input_of(r, count, 2);
          for (std::size_t i = 0; i < count; ++i) {
            exact[i] += x[i];
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
          }
        }
        // One site: allreduce_compressed is the flat compressed ring (P encodes along it).
        const int encodes = l.site_count() > 1 ? l.site_count() : l.world();
        const double bound =
            (encodes * relative + l.world() * 0x1p-23) * l.world() * max_abs * scale + 1e-6;
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(results[0][i], exact[i] * scale, bound) << what << " element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical, ::testing::ValuesIn(kLayouts),
                         [](const ::testing::TestParamInfo<Layout>& p) {
                           std::string n = p.param.name;
                           std::replace(n.begin(), n.end(), '+', '_');
                           return n;
                         });

TEST(HierarchicalTopk, GathersBetweenSitesAndIsBitIdentical) {
  const Layout l{"3+1", {0, 0, 0, 1}};
  constexpr std::size_t kCount = 10'000;
  std::vector<std::vector<float>> results(4);
  run_ranks_with(
      4, [&](int) { return options_for(l); },
      [&](Communicator& comm) {
        const auto x = input_of(comm.rank(), kCount, 3);
        auto& out = results[static_cast<std::size_t>(comm.rank())];
        out.assign(kCount, -1.0F);
        comm.allreduce_compressed(x.data(), out.data(), kCount, ReduceOp::Sum,
                                  Compression{"topk:fraction=0.05", "g"});
      });
  expect_identical(results, "topk");
  const auto nonzero =
      std::count_if(results[0].begin(), results[0].end(), [](float v) { return v != 0.0F; });
  // Each site's sum keeps at most 5% per shard; the two sites' sets together at most 10%.
  EXPECT_GT(nonzero, 0);
  EXPECT_LE(nonzero, static_cast<std::ptrdiff_t>(kCount / 10 + 8));
}

// With every rank a site of its own the hierarchy is the ring over the sites: the same bits as
// the flat (unsegmented) ring, which reduces every element in the same order.
TEST(HierarchicalExact, SingletonSitesGiveTheFlatRingsBits) {
  const Layout l{"3_singletons", {0, 1, 2}};
  constexpr std::size_t kCount = 50'001;
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    std::vector<std::vector<float>> hier(3);
    std::vector<std::vector<float>> ring(3);
    run_ranks_with(
        3, [&](int) { return options_for(l); },
        [&](Communicator& comm) {
          const auto x = input_of(comm.rank(), kCount, 4);
          hier[static_cast<std::size_t>(comm.rank())].assign(kCount, 0);
          comm.allreduce(x.data(), hier[static_cast<std::size_t>(comm.rank())].data(), kCount,
                         DType::F32, op);
        });
    run_ranks_with(
        3, [&](int) { return options_for(l, "allreduce:ring"); },
        [&](Communicator& comm) {
          const auto x = input_of(comm.rank(), kCount, 4);
          ring[static_cast<std::size_t>(comm.rank())].assign(kCount, 0);
          comm.allreduce(x.data(), ring[static_cast<std::size_t>(comm.rank())].data(), kCount,
                         DType::F32, op);
        });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(std::memcmp(hier[static_cast<std::size_t>(r)].data(),
                            ring[static_cast<std::size_t>(r)].data(), kCount * sizeof(float)),
                0)
          << kernels::reduce_op_name(op) << " rank " << r;
    }
  }
}

TEST(HierarchicalSelection, SeveralSitesTakeHierarchicalByDefaultForRingSizedVectors) {
  const auto t = AlgorithmTable::defaults();
  EXPECT_EQ(t.choose("allreduce", 4, 64 << 20, 2).describe(), "hierarchical@seg=1M");
  EXPECT_EQ(t.choose("allreduce", 4, 8249, 3).describe(), "hierarchical@seg=1M");
  EXPECT_EQ(t.choose("allreduce", 4, 8, 2).describe(), "mailbox");
  // One site: ranks on one host take the mailbox; where it cannot run, the ring.
  EXPECT_EQ(t.choose("allreduce", 4, 64 << 20, 1).describe(), "mailbox");
  EXPECT_EQ(
      t.choose("allreduce", 4, 64 << 20, 1, find_algorithm("allreduce", "mailbox")).describe(),
      "ring@seg=1M");
  const auto user = AlgorithmTable::parse("allreduce:sites=2:ring;allreduce:sites=3-inf:0-1M:ring",
                                          "STRAIT_TUNE");
  EXPECT_EQ(user.choose("allreduce", 4, 8, 2).describe(), "ring");
  EXPECT_EQ(user.choose("allreduce", 4, 8, 1).describe(), "ring");  // the first registered
  EXPECT_EQ(user.rules()[1].describe(), "allreduce:sites=3-inf:0-1M:ring");
  const auto json = AlgorithmTable::parse_json(
      R"({"rules": [{"collective": "allreduce", "sites": "2-4", "algorithm": "hierarchical"}]})",
      "file");
  EXPECT_EQ(json.rules()[0].describe(), "allreduce:sites=2-4:hierarchical");
  EXPECT_THROW((void)AlgorithmTable::parse("allreduce:sites=0:ring"), Error);
}

// The default table on a 2+2 layout: large vectors run hierarchically (and say so in a mismatch).
TEST(HierarchicalSelection, DefaultTableRunsItAndRanksThatDisagreeFailWithMismatch) {
  const Layout l{"2+2", {0, 0, 1, 1}};
  constexpr std::size_t kCount = 100'000;
  std::vector<std::string> errors(4);
  run_ranks_with(
      4,
      [&](int r) {
        CommOptions o = testing::options_with_timeout(5s);
        o.sites = l.sites;
        // Rank 0 insists on the flat ring; the others take the default (hierarchical).
        if (r == 0) {
          o.algorithms = std::make_shared<const AlgorithmTable>(
              AlgorithmTable::parse("allreduce:ring@seg=1M", "test"));
        }
        return o;
      },
      [&](Communicator& comm) {
        std::vector<float> x(kCount, 1.0F);
        const auto e = error_of(
            [&] { comm.allreduce(x.data(), x.data(), kCount, DType::F32, ReduceOp::Sum); });
        ASSERT_TRUE(e.has_value());
        errors[static_cast<std::size_t>(comm.rank())] = e->what();
        if (comm.rank() == 0 || comm.rank() == 1) {
          // Rank 0 and its ring neighbour 1 see each other's fingerprint.
          EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
        }
      });
  EXPECT_TRUE(contains(errors[1], "hierarchical")) << errors[1];
}

// Threads that each create a communicator; returns each one's creation error (nullopt: none).
std::vector<std::optional<Error>> creation_errors(int world,
                                                  const std::function<CommOptions(int)>& options) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::optional<Error>> errors(static_cast<std::size_t>(world));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = Communicator::create(store, r, world, options(r));
        } catch (const Error& e) {
          errors[static_cast<std::size_t>(r)] = e;
        }
      });
    }
  }
  return errors;
}

TEST(HierarchicalSites, RanksThatDisagreeOnTheSitesOrStreamsAllFailAtCreation) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = creation_errors(4, [](int r) {
    CommOptions o = testing::options_with_timeout(20s);
    o.sites = r == 3 ? std::vector<int>{0, 1, 0, 1} : std::vector<int>{0, 0, 1, 1};
    return o;
  });
  for (int r = 0; r < 4; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    ASSERT_TRUE(e.has_value()) << "rank " << r << " created its communicator";
    EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
    EXPECT_TRUE(contains(e->what(), "other sites")) << e->what();
  }
  errors = creation_errors(2, [](int r) {
    CommOptions o = testing::options_with_timeout(20s);
    o.streams = r == 0 ? 1 : 2;
    return o;
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Mismatch) << e->what();
    EXPECT_TRUE(contains(e->what(), "STRAIT_STREAMS")) << e->what();
  }
  // A bad setting on one rank is InvalidArgument there and on the others, at once.
  errors = creation_errors(3, [](int r) {
    CommOptions o = testing::options_with_timeout(20s);
    o.sites = r == 1 ? std::vector<int>{0, 0} : std::vector<int>{0, 0, 1};
    return o;
  });
  for (int r = 0; r < 3; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    ASSERT_TRUE(e.has_value()) << r;
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument) << e->what();
    EXPECT_TRUE(contains(e->what(), r == 1 ? "2 entries for a world of 3" : "rank(s) 1"))
        << e->what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s) << "a rank waited for a timeout";
}

TEST(SitesParse, ListsAreRenumberedAndBadOnesNameTheSourceAndTheFix) {
  const Sites s = Sites::parse_list("5, 5,9,9", 4, "STRAIT_SITES=x");
  EXPECT_EQ(s.site_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(s.count(), 2);
  EXPECT_EQ(s.members(), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_TRUE(contains(s.describe(), "[[0, 1], [2, 3]] (from STRAIT_SITES=x)")) << s.describe();
  EXPECT_NE(s.hash(), Sites::parse_list("0,1,0,1", 4, "x").hash());
  for (const auto& [text, says] :
       std::vector<std::pair<std::string, std::string>>{{"0,0,1", "3 entries for a world of 4"},
                                                        {"0,0,1,1,1", "5 entries"},
                                                        {"0,a,1,1", "entry 1 ('a')"},
                                                        {"0,-1,1,1", "entry 1 ('-1')"},
                                                        {"0,,1,1", "entry 1 ('')"}}) {
    try {
      (void)Sites::parse_list(text, 4, "STRAIT_SITES=" + text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_TRUE(contains(e.what(), says)) << e.what();
      EXPECT_TRUE(contains(e.what(), "STRAIT_SITES=" + text)) << e.what();
      EXPECT_TRUE(contains(e.what(), "one entry per rank")) << e.what();
    }
  }
}

TEST(SitesParse, JsonListsRanksPerSiteAndRefusesMissingDuplicateOrBadRanks) {
  const Sites s = Sites::parse_json(R"({"sites": [[3, 1], [0, 2]]})", 4, "f");
  EXPECT_EQ(s.site_of, (std::vector<int>{1, 0, 1, 0}));
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"sites": [[0, 1], [2]]})", "rank(s) 3 are in no site"},
           {R"({"sites": [[0, 1], [1, 2, 3]]})", "rank 1 is listed twice"},
           {R"({"sites": [[0, 1], [2, 4]]})", "names rank 4"},
           {R"({"sites": [[0, 1], ["2", 3]]})", "not a rank"},
           {R"({"sites": [[0, 1], []]})", "sites[1] is not a non-empty array"},
           {R"({"site": [[0, 1, 2, 3]]})", "no \"sites\" array"},
           {R"({"sites": [[0, 1], [2, 3]])", "not valid JSON"}}) {
    try {
      (void)Sites::parse_json(text, 4, "STRAIT_TOPOLOGY_FILE=t.json");
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_TRUE(contains(e.what(), says)) << e.what();
      EXPECT_TRUE(contains(e.what(), "STRAIT_TOPOLOGY_FILE=t.json")) << e.what();
    }
  }
}

TEST(SitesEnvironment, OptionsThenStraitSitesThenTheFileThenOneSite) {
  const test::TempDir dir;
  const std::string path = dir.str() + "/topology.json";
  std::ofstream(path) << R"({"sites": [[0], [1, 2]]})";
  EXPECT_EQ(Sites::from_environment(3, std::nullopt)->count(), 1);
  const ScopedEnv file("STRAIT_TOPOLOGY_FILE", path);
  auto s = Sites::from_environment(3, std::nullopt);
  EXPECT_EQ(s->site_of, (std::vector<int>{0, 1, 1}));
  EXPECT_TRUE(contains(s->source, path)) << s->source;
  {
    const ScopedEnv sites("STRAIT_SITES", "1,0,0");
    EXPECT_EQ(Sites::from_environment(3, std::nullopt)->site_of, (std::vector<int>{1, 0, 0}));
    EXPECT_EQ(Sites::from_environment(3, std::vector<int>{0, 0, 1})->site_of,
              (std::vector<int>{0, 0, 1}));
  }
  {
    const ScopedEnv sites("STRAIT_SITES", "measure");
    EXPECT_FALSE(Sites::from_environment(3, std::nullopt).has_value());
  }
  const ScopedEnv missing("STRAIT_TOPOLOGY_FILE", dir.str() + "/none.json");
  try {
    (void)Sites::from_environment(3, std::nullopt);
    ADD_FAILURE() << "an unreadable file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e.what(), "none.json")) << e.what();
  }
}

TEST(SitesMeasure, LinksWithinFactorFourOfTheFastestFormSites) {
  // Ranks 0-1 and 2-3 at 10 GB/s, across at 12 MB/s, and rank 4 slow to everyone.
  constexpr std::size_t n = 5;
  std::vector<std::vector<double>> bw(n, std::vector<double>(n, 12e6));
  const auto set = [&](std::size_t a, std::size_t b, double v) { bw[a][b] = bw[b][a] = v; };
  set(0, 1, 10e9);
  set(2, 3, 4e9);
  for (std::size_t r = 0; r < 4; ++r) set(r, 4, 1e6);
  const Sites s = cluster_by_bandwidth(bw);
  EXPECT_EQ(s.site_of, (std::vector<int>{0, 0, 1, 1, 2}));
  set(2, 3, 2e9);  // below 10 GB/s / 4: 2 and 3 become sites of their own
  EXPECT_EQ(cluster_by_bandwidth(bw).site_of, (std::vector<int>{0, 0, 1, 2, 3}));
}

// STRAIT_SITES=measure between threads of one host: every link is shared memory, all within 4x of
// each other (or one site anyway): one site, and the same on every rank.
TEST(SitesMeasure, MeasuredAtCreationTheSameOnEveryRank) {
  const ScopedEnv sites("STRAIT_SITES", "measure");
  std::vector<std::vector<int>> seen(3);
  testing::run_ranks(3, [&](Communicator& comm) {
    seen[static_cast<std::size_t>(comm.rank())] = comm.sites().site_of;
    std::vector<float> x(10, 1.0F);
    comm.allreduce(x.data(), x.data(), x.size(), DType::F32, ReduceOp::Sum);
    EXPECT_EQ(x[0], 3.0F);
  });
  EXPECT_EQ(seen[0].size(), 3U);
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[0], seen[2]);
}

// Striping over several connections per peer (STRAIT_UCX_ERR_MODE=peer makes the threads' peers
// TCP peers, which get the streams) moves the same bytes: the results are identical for 1, 2, 4.
TEST(HierarchicalStreams, StripingOverOneTwoOrFourConnectionsGivesIdenticalResults) {
  const ScopedEnv tcp("STRAIT_UCX_ERR_MODE", "peer");
  const Layout l{"2+2", {0, 0, 1, 1}};
  constexpr std::size_t kCount = 1 << 19;  // 2 MiB: inter-site messages of 128 KiB - 512 KiB
  std::vector<std::vector<float>> by_streams;
  for (const int streams : {1, 2, 4}) {
    for (const bool compressed : {false, true}) {
      std::vector<std::vector<float>> results(4);
      run_ranks_with(
          4, [&](int) { return options_for(l, "allreduce:hierarchical", streams); },
          [&](Communicator& comm) {
            const auto x = input_of(comm.rank(), kCount, 5);
            auto& out = results[static_cast<std::size_t>(comm.rank())];
            out.assign(kCount, 0);
            if (compressed) {
              comm.allreduce_compressed(x.data(), out.data(), kCount, ReduceOp::Sum,
                                        Compression{"int8", ""});
            } else {
              comm.allreduce(x.data(), out.data(), kCount, DType::F32, ReduceOp::Sum);
            }
          });
      expect_identical(results, fmt::format("{} streams", streams));
      by_streams.push_back(results[0]);
    }
  }
  for (std::size_t i = 2; i < by_streams.size(); ++i) {
    EXPECT_EQ(std::memcmp(by_streams[i].data(), by_streams[i % 2].data(), kCount * sizeof(float)),
              0)
        << "run " << i;
  }
}

}  // namespace
}  // namespace strait::comm
