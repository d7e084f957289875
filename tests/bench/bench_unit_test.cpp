// strait-bench's pieces without processes: option values, the sizes a run walks through,
// nccl-tests' shapes and bus factors, and the checker (inputs, expected values, tolerances)
// against reductions computed independently by strait's kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench_data.h"
#include "bench/bench_options.h"
#include "bench/bench_report.h"
#include "bench/bound.h"
#include "bench/collectives.h"
#include "core/error.h"
#include "kernels/reduce.h"

namespace {

using strait::Error;
using strait::ErrorCode;
using strait::kernels::DType;
using strait::kernels::ReduceOp;
namespace bench = strait::bench;

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(BenchOptions, SizesTakeBinarySuffixes) {
  EXPECT_EQ(bench::parse_size("8"), 8U);
  EXPECT_EQ(bench::parse_size("64K"), 65536U);
  EXPECT_EQ(bench::parse_size("64k"), 65536U);
  EXPECT_EQ(bench::parse_size("256M"), 256U << 20U);
  EXPECT_EQ(bench::parse_size("2G"), std::size_t{2} << 30U);
  EXPECT_EQ(bench::parse_size("1MB"), 1U << 20U);
  for (const char* bad : {"", "K", "1.5M", "-8", "8X", "12 K"}) {
    EXPECT_NE(invalid_argument_message([&] { (void)bench::parse_size(bad); }).find("is not a size"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(invalid_argument_message([] {
              (void)bench::parse_size("99999999999999999999G");
            }).find("too large"),
            std::string::npos);
}

TEST(BenchOptions, DtypesAndOpsByStraitOrNcclName) {
  EXPECT_EQ(bench::parse_dtype("f32"), DType::F32);
  EXPECT_EQ(bench::parse_dtype("float"), DType::F32);
  EXPECT_EQ(bench::parse_dtype("half"), DType::F16);
  EXPECT_EQ(bench::parse_dtype("BF16"), DType::BF16);
  EXPECT_EQ(bench::parse_dtype("uint8"), DType::U8);
  EXPECT_NE(
      invalid_argument_message([] { (void)bench::parse_dtype("f8"); }).find("unknown dtype 'f8'"),
      std::string::npos);
  EXPECT_EQ(bench::parse_op("avg"), ReduceOp::Avg);
  EXPECT_EQ(bench::parse_op("Prod"), ReduceOp::Prod);
  EXPECT_NE(invalid_argument_message([] {
              (void)bench::parse_op("xor");
            }).find("unknown reduction 'xor'"),
            std::string::npos);
}

TEST(BenchOptions, SizeListStopsAtMax) {
  EXPECT_EQ(bench::size_list(8, 65536, 4),
            (std::vector<std::size_t>{8, 32, 128, 512, 2048, 8192, 32768}));
  EXPECT_EQ(bench::size_list(8, 64, 2), (std::vector<std::size_t>{8, 16, 32, 64}));
  EXPECT_EQ(bench::size_list(100, 100, 1), (std::vector<std::size_t>{100}));
  EXPECT_NE(
      invalid_argument_message([] { (void)bench::size_list(1024, 8, 2); }).find("larger than -e"),
      std::string::npos);
  EXPECT_NE(invalid_argument_message([] { (void)bench::size_list(8, 1024, 1); }).find("-f"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { (void)bench::size_list(0, 8, 2); }).find("at least 1"),
            std::string::npos);
}

TEST(BenchOptions, AvgOfIntegersIsRefused) {
  bench::BenchOptions o;
  o.op = ReduceOp::Avg;
  o.dtype = DType::I32;
  EXPECT_NE(invalid_argument_message([&] { bench::validate(o); }).find("floating-point"),
            std::string::npos);
  o.dtype = DType::BF16;
  EXPECT_NO_THROW(bench::validate(o));
  o.iters = 0;
  EXPECT_NE(invalid_argument_message([&] { bench::validate(o); }).find("-n"), std::string::npos);
}

TEST(BenchCollectives, UnknownNameListsTheKnownOnes) {
  const auto msg = invalid_argument_message([] { (void)bench::find_collective("allreduse"); });
  EXPECT_NE(msg.find("unknown collective 'allreduse'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allreduce, allgather, broadcast, sendrecv"), std::string::npos) << msg;
}

// nccl-tests: allreduce's size is the buffer, allgather's the whole gathered buffer with count
// per rank; busbw factors 2(n-1)/n, (n-1)/n, 1, 1.
TEST(BenchCollectives, ShapesAndBusFactorsFollowNcclTests) {
  const auto& ar = bench::find_collective("allreduce");
  const auto s = ar.shape(1000, 4, 4);
  EXPECT_EQ(s.count, 250U);
  EXPECT_EQ(s.bytes, 1000U);
  EXPECT_DOUBLE_EQ(ar.bus_factor(4), 1.5);

  const auto& ag = bench::find_collective("allgather");
  const auto g = ag.shape(1000, 4, 3);  // 250 floats over 3 ranks: 83 each, 996 bytes in all
  EXPECT_EQ(g.count, 83U);
  EXPECT_EQ(g.send_count, 83U);
  EXPECT_EQ(g.recv_count, 249U);
  EXPECT_EQ(g.bytes, 996U);
  EXPECT_EQ(ag.in_place(g, 2).send, 166U);
  EXPECT_DOUBLE_EQ(ag.bus_factor(4), 0.75);

  EXPECT_DOUBLE_EQ(bench::find_collective("broadcast").bus_factor(4), 1.0);
  EXPECT_FALSE(bench::find_collective("broadcast").out_of_place);
  EXPECT_DOUBLE_EQ(bench::find_collective("sendrecv").bus_factor(4), 1.0);
  EXPECT_EQ(bench::find_collective("sendrecv").in_place, nullptr);

  const auto m = bench::measure(1'000'000, 100.0, 1.5, 0);  // 1 MB in 100 us = 10 GB/s
  EXPECT_DOUBLE_EQ(m.algbw_gbs, 10.0);
  EXPECT_DOUBLE_EQ(m.busbw_gbs, 15.0);
}

TEST(BenchData, InputsAreRepresentableAndDifferByRank) {
  for (const auto t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::U8, DType::I64}) {
    std::vector<std::uint64_t> buf(64);
    bench::fill_inputs(t, ReduceOp::Sum, 1, 10, buf.data(), 64);
    int differs = 0;
    for (std::size_t i = 0; i < 64; ++i) {
      EXPECT_EQ(bench::load(t, buf.data(), i), bench::input_value(t, ReduceOp::Sum, 1, 10 + i));
      differs +=
          bench::input_value(t, ReduceOp::Sum, 0, i) != bench::input_value(t, ReduceOp::Sum, 1, i);
    }
    EXPECT_GT(differs, 32) << strait::kernels::dtype_name(t);
  }
}

// Reduces `ranks` ranks' inputs with strait's kernels in the dtype (as a ring would, one rank at
// a time) and counts the elements the checker rejects.
int wrong_after_kernel_reduce(DType t, ReduceOp op, int ranks, std::size_t count,
                              std::size_t corrupt_at = SIZE_MAX) {
  const std::size_t elem = strait::kernels::dtype_size(t);
  std::vector<std::byte> acc(count * elem);
  std::vector<std::byte> in(count * elem);
  bench::fill_inputs(t, op, 0, 0, acc.data(), count);
  for (int r = 1; r < ranks; ++r) {
    bench::fill_inputs(t, op, r, 0, in.data(), count);
    strait::kernels::reduce(t, op == ReduceOp::Avg ? ReduceOp::Sum : op, acc.data(), in.data(),
                            count);
  }
  if (op == ReduceOp::Avg) strait::kernels::scale(t, acc.data(), count, 1.0 / ranks);
  if (corrupt_at < count) {
    const double v = bench::load(t, acc.data(), corrupt_at);
    // Inputs are at most 8.4 in magnitude: +4 is beyond any tolerance here.
    const double bad = strait::kernels::dtype_is_float(t) ? v + 4 : (v < 100 ? v + 1 : v - 1);
    bench::store(t, acc.data(), corrupt_at, bad);
  }
  int wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto want = bench::reduce_expected(
        t, op, ranks, [&](int r) { return bench::input_value(t, op, r, i); });
    wrong += bench::matches(t, op, want, bench::load(t, acc.data(), i)) ? 0 : 1;
  }
  return wrong;
}

TEST(BenchData, KernelReductionsPassAndOneCorruptElementIsCaught) {
  for (const auto t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::U8,
                       DType::I32, DType::I64}) {
    for (const auto op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
      if (op == ReduceOp::Avg && !strait::kernels::dtype_is_float(t)) continue;
      for (const int ranks : {1, 2, 3, 8}) {
        SCOPED_TRACE(testing::Message() << strait::kernels::dtype_name(t) << " "
                                        << strait::kernels::reduce_op_name(op) << " " << ranks);
        EXPECT_EQ(wrong_after_kernel_reduce(t, op, ranks, 4099), 0);
        EXPECT_EQ(wrong_after_kernel_reduce(t, op, ranks, 4099, 1234), 1);
      }
    }
  }
}

// The tolerance is tight: a result one f32 ulp-scale step beyond (terms + 1) * u * sum|x| fails.
TEST(BenchData, ToleranceIsNotLoose) {
  const bench::Expected want{.value = 3.0, .magnitude = 5.0, .terms = 2};
  const double tol = 3 * 0x1p-24 * 5.0;
  EXPECT_TRUE(bench::matches(DType::F32, ReduceOp::Sum, want, 3.0 + tol * 0.99));
  EXPECT_FALSE(bench::matches(DType::F32, ReduceOp::Sum, want, 3.0 + tol * 1.5));
  EXPECT_FALSE(bench::matches(DType::F32, ReduceOp::Sum, want, std::nan("")));
  EXPECT_FALSE(bench::matches(DType::I32, ReduceOp::Sum, bench::copied(3), 4));
}

TEST(BenchReport, RowsLineUpWithTheHeader) {
  bench::Row r{.bytes = 8,
               .count = 2,
               .type = "f32",
               .redop = "sum",
               .root = -1,
               .out_of_place = std::nullopt,
               .in_place = std::nullopt,
               .copy_gbs = std::nullopt};
  r.out_of_place = bench::measure(8, 6.5, 1.0, 0);
  const std::string line = bench::table_row(r);
  const std::string header = bench::table_header();
  const auto last_line = header.substr(header.rfind('\n', header.size() - 2) + 1);
  EXPECT_EQ(line.size() + 1, last_line.size()) << header << line;
  EXPECT_NE(line.find("6.50"), std::string::npos);
  EXPECT_NE(line.find("n/a"), std::string::npos);
  EXPECT_DOUBLE_EQ(bench::average_busbw({r}), r.out_of_place->busbw_gbs);
}

// The bytes a single-copy algorithm moves per rank (docs/commands/bench.md, "The bound"), written
// out for 2 and 4 ranks, and issue 26's figure: 2 ranks sharing 20 GB/s of copy (10 each) bound a
// 2-rank allreduce at 8 GB/s busbw (2.5 n bytes per rank at 20 GB/s of traffic).
TEST(BenchBound, BytesMovedPerRankAndTheBusbwTheyAllow) {
  const std::size_t n = 64U << 20U;
  const double d = n;
  const auto moved = [&](const char* c, int p, bool in_place) {
    return bench::bytes_moved_per_rank(c, n, p, in_place).value_or(-1);
  };
  EXPECT_DOUBLE_EQ(moved("allreduce", 2, false), 2.5 * d);
  EXPECT_DOUBLE_EQ(moved("allreduce", 4, true), d + d / 4 + 2 * 3 * d / 4);
  EXPECT_DOUBLE_EQ(moved("reduce", 2, false), 2.5 * d);
  EXPECT_DOUBLE_EQ(moved("reduce_scatter", 2, false), 1.5 * d);
  EXPECT_DOUBLE_EQ(moved("allgather", 2, false), 2 * d);
  EXPECT_DOUBLE_EQ(moved("allgather", 4, true), 1.5 * d);
  EXPECT_DOUBLE_EQ(moved("alltoall", 2, true), d);
  EXPECT_DOUBLE_EQ(moved("broadcast", 4, true), 2 * d);
  EXPECT_DOUBLE_EQ(moved("sendrecv", 2, false), 2 * d);
  // gather: the root as allgather; scatter: every rank its block (2 n / P); the v forms (with
  // equal counts in strait-bench) as their plain forms.
  EXPECT_DOUBLE_EQ(moved("gather", 2, false), 2 * d);
  EXPECT_DOUBLE_EQ(moved("gather", 4, true), 1.5 * d);
  EXPECT_DOUBLE_EQ(moved("scatter", 2, false), d);
  EXPECT_DOUBLE_EQ(moved("scatter", 4, true), d / 2);
  EXPECT_DOUBLE_EQ(moved("allgather_v", 4, true), moved("allgather", 4, true));
  EXPECT_DOUBLE_EQ(moved("reduce_scatter_v", 4, false), moved("reduce_scatter", 4, false));
  EXPECT_DOUBLE_EQ(moved("alltoall_v", 2, false), moved("alltoall", 2, false));
  EXPECT_FALSE(bench::bytes_moved_per_rank("barrier", n, 2, false));

  EXPECT_NEAR(bench::bound_busbw_gbs(n, moved("allreduce", 2, false), 1.0, 10.0), 8.0, 1e-9);
  // reduce_scatter, 2 ranks: 1.5 n at 20 GB/s, busbw factor 1/2.
  EXPECT_NEAR(bench::bound_busbw_gbs(n, moved("reduce_scatter", 2, false), 0.5, 10.0),
              0.5 * 20.0 / 1.5, 1e-9);
  EXPECT_EQ(bench::bound_busbw_gbs(n, moved("allreduce", 1, false), 0.0, 10.0), 0.0);
}

TEST(BenchReport, BoundColumnsLineUpWithTheHeader) {
  bench::Row r{.bytes = 8,
               .count = 2,
               .type = "f32",
               .redop = "sum",
               .root = -1,
               .out_of_place = std::nullopt,
               .in_place = std::nullopt,
               .copy_gbs = 10.0};
  r.out_of_place = bench::measure(8, 6.5, 1.0, 0);
  r.out_of_place->bound_gbs = 4.0;
  r.in_place = bench::measure(8, 6.5, 1.0, 0);
  r.in_place->bound_gbs = 0.0;  // no bound: shown as "-"
  const std::string line = bench::table_row(r);
  const std::string header = bench::table_header(true);
  const auto last_line = header.substr(header.rfind('\n', header.size() - 2) + 1);
  EXPECT_EQ(line.size() + 1, last_line.size()) << header << line;
  EXPECT_NE(line.find("10.00"), std::string::npos) << line;
  EXPECT_NEAR(*r.out_of_place->of_bound(), r.out_of_place->busbw_gbs / 4.0, 1e-12);
  EXPECT_FALSE(r.in_place->of_bound());
  EXPECT_EQ(bench::to_json(r)["out_of_place"]["bound_busbw_gbs"], 4.0);
}

}  // namespace
