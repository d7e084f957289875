// strait-bench: nccl-tests for strait's collectives over host memory.
//   strait run -n N -- strait-bench allreduce -b 8 -e 256M -f 2 -d f32 -o sum -n 20 -w 5 -c 1
// `strait-bench offload ...` measures the offload I/O engines instead (bench/offload_bench.h).
// Each rank allocates its buffers once for the largest size, then for each size runs WARMUP
// calls, a barrier, and ITERS timed blocking calls, out of place and in place (where strait has
// the form). The time of a rank is the mean of its ITERS calls; the table shows the maximum over
// ranks (-a picks rank 0's, the mean or the minimum instead; nccl-tests defaults to the mean).
// With -c 1 each variant then runs once more on fresh inputs and every rank compares its result
// with the value computed in double from every rank's inputs (bench/bench_data.h); #wrong is the
// count of wrong elements over all ranks. Rank 0 prints the table (and writes --json); errors are
// printed by every rank that meets them. Any wrong element makes every rank exit with status 1.
// With --bound, before each size every rank copies --bound-bytes at once (bench/bound.h), and the
// row also shows that copy rate, the collective's memory bound and busbw / bound per variant.
#include <fmt/format.h>
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_data.h"
#include "bench/bench_options.h"
#include "bench/bench_report.h"
#include "bench/bound.h"
#include "bench/collectives.h"
#include "bench/offload_bench.h"
#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace strait::bench {
namespace {

using comm::Communicator;
using kernels::DType;
using kernels::ReduceOp;

constexpr const char* kFooter = R"(
Launch N ranks with `strait run -n N -- strait-bench ...` (or any launcher that sets torchrun's
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT); without RANK it runs as a single rank.
Columns as nccl-tests: size is the largest buffer of a rank in bytes (the whole gathered buffer for
allgather), count the count argument of the call, algbw = size / time, busbw = algbw * factor
(allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall, gather, scatter and the v forms (n-1)/n;
others 1). n/a marks a form strait does not have (out-of-place broadcast, in-place sendrecv).
--bound adds: copy = GB/s one rank copies while all copy --bound-bytes at once (memcpy, measured
before each size); bound = the busbw the collective's bytes moved per rank allow at that rate;
of_bd = busbw / bound. Derivation: docs/commands/bench.md, "The bound".)";

// /proc/loadavg's 1, 5 and 15 minute figures: other work on the machine skews every time shown.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown";
  return fmt::format("{} {} {}", one, five, fifteen);
}

bool is_rank0() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::strcmp(rank, "0") == 0;
}

// Errors are printed by every rank that meets them: a launcher stops the other ranks as soon as
// one fails, so rank 0 alone might be stopped before it could say why.
std::string error_prefix() {
  return is_rank0() ? "strait-bench: "
                    : fmt::format("strait-bench (rank {}): ", std::getenv("RANK"));
}

std::unique_ptr<Communicator> make_communicator() {
  if (std::getenv("RANK") == nullptr && std::getenv("WORLD_SIZE") == nullptr) {
    return Communicator::create(std::make_shared<strait::comm::HashStore>(), 0, 1);
  }
  return Communicator::from_env();
}

// One rank's time per call in microseconds: WARMUP calls, a barrier, ITERS timed calls.
double time_calls(Communicator& comm, const Collective& coll, const bench::Call& call,
                  const BenchOptions& o) {
  for (int i = 0; i < o.warmup; ++i) coll.run(call);
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) coll.run(call);
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / o.iters;
}

double combine_time(Communicator& comm, double mine, bench::TimeStat stat) {
  double t = mine;
  switch (stat) {
    case bench::TimeStat::Rank0: comm.broadcast(&t, 1, DType::F64, 0); return t;
    case bench::TimeStat::Mean: comm.allreduce(&t, &t, 1, DType::F64, ReduceOp::Avg); return t;
    case bench::TimeStat::Min: comm.allreduce(&t, &t, 1, DType::F64, ReduceOp::Min); return t;
    case bench::TimeStat::Max: comm.allreduce(&t, &t, 1, DType::F64, ReduceOp::Max); return t;
  }
  return t;
}

// Wrong elements over all ranks of recv[0, recv_count).
long long count_wrong(Communicator& comm, const Collective& coll, const bench::Context& ctx,
                      const void* recv, std::size_t recv_count) {
  long long wrong = 0;
  for (std::size_t i = 0; i < recv_count; ++i) {
    const auto want = coll.expected(ctx, i);
    if (want && !bench::matches(ctx.dtype, ctx.op, *want, bench::load(ctx.dtype, recv, i))) {
      ++wrong;
    }
  }
  comm.allreduce(&wrong, &wrong, 1, DType::I64, ReduceOp::Sum);
  return wrong;
}

// Out of place: the send buffer; the receive buffer (in place: the one buffer). Ordinary memory,
// or with --symmetric memory every local peer maps (Communicator::alloc).
struct Buffers {
  comm::SymmetricBuffer send;
  comm::SymmetricBuffer recv;
  Buffers(Communicator& comm, bool symmetric, std::size_t send_bytes, std::size_t recv_bytes) {
    const auto get = [&](std::size_t bytes) {
      if (bytes == 0) return comm::SymmetricBuffer{};
      if (symmetric) return comm.alloc(bytes);
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw Error(ErrorCode::Unavailable, "strait-bench: mmap failed");
      return comm::SymmetricBuffer(nullptr, 0, p, bytes);
    };
    send = get(send_bytes);
    recv = get(recv_bytes);
  }
  std::byte* send_data() const { return static_cast<std::byte*>(send.data()); }
  std::byte* recv_data() const { return static_cast<std::byte*>(recv.data()); }
};

// One size, out of place or in place: fill, time, then (with -c) fill afresh, run once, check.
bench::Measurement run_variant(Communicator& comm, const Collective& coll, const BenchOptions& o,
                               const bench::Shape& shape, const Buffers& buffers, bool in_place) {
  const std::size_t elem = strait::kernels::dtype_size(o.dtype);
  std::byte* send = buffers.send_data();
  std::byte* recv = buffers.recv_data();
  if (in_place) {
    const auto offsets = coll.in_place(shape, comm.rank());
    send = buffers.recv_data() + offsets.send * elem;
    recv = buffers.recv_data() + offsets.recv * elem;
  }
  const auto fill = [&] {
    bench::fill_inputs(o.dtype, o.op, comm.rank(), 0, send, shape.send_count);
  };
  const bench::Call call{comm, send, recv, shape.count, o.dtype, o.op, o.root, o.codec};
  fill();
  const double mine = time_calls(comm, coll, call, o);
  const double time_us = combine_time(comm, mine, o.time_stat);

  std::optional<long long> wrong;
  if (o.check) {
    // Poison (NaN for floats) what the call must overwrite, so stale results cannot pass.
    std::memset(
        in_place ? buffers.recv_data() : recv, 0xff,
        (in_place ? std::max(shape.send_count, shape.recv_count) : shape.recv_count) * elem);
    fill();
    comm.barrier();
    coll.run(call);
    const bench::Context ctx{.dtype = o.dtype,
                             .op = o.op,
                             .root = o.root,
                             .rank = comm.rank(),
                             .ranks = comm.size(),
                             .count = shape.count};
    wrong = count_wrong(comm, coll, ctx, recv, shape.recv_count);
  }
  return bench::measure(shape.bytes, time_us, coll.bus_factor(comm.size()), wrong);
}

// The table's preamble, as nccl-tests prints it: what runs, on what host, timed how.
void print_header(const Collective& coll, int n, const BenchOptions& o) {
  fmt::print(
      "# strait-bench {}: {} rank{}, {}{}{}{}, {} warm-up + {} timed calls per size, "
      "check {}\n",
      coll.name, n, n == 1 ? "" : "s", strait::kernels::dtype_name(o.dtype),
      coll.reduces ? fmt::format(", {}", strait::kernels::reduce_op_name(o.op)) : "",
      coll.rooted ? fmt::format(", root {}", o.root) : "",
      o.codec.empty() ? "" : fmt::format(", codec {}", o.codec), o.warmup, o.iters,
      o.check ? "on" : "off");
  fmt::print("# host: {} CPUs, load average {}\n", std::thread::hardware_concurrency(),
             load_average());
  fmt::print("# time: {} mean time per call (-a {})\n", bench::time_stat_name(o.time_stat),
             static_cast<int>(o.time_stat));
  if (o.bound) {
    fmt::print(
        "# bound: before each size every rank copies {} B at once (copy: the mean per-rank GB/s); "
        "bound = busbw allowed by the bytes moved per rank at that rate, of_bd = busbw / bound\n",
        o.bound_bytes);
  }
  fmt::print("#\n{}", bench::table_header(o.bound));
  std::fflush(stdout);
}

// The --json record: the run's settings, its average busbw and every row.
void write_json(std::ofstream& json, const Collective& coll, int n, const BenchOptions& o,
                const std::vector<bench::Row>& rows, long long wrong) {
  nlohmann::json j{{"collective", coll.name},
                   {"ranks", n},
                   {"dtype", strait::kernels::dtype_name(o.dtype)},
                   {"op", coll.reduces ? strait::kernels::reduce_op_name(o.op) : "none"},
                   {"root", coll.rooted ? o.root : -1},
                   {"warmup", o.warmup},
                   {"iters", o.iters},
                   {"check", o.check},
                   {"codec", o.codec},
                   {"bound_bytes", o.bound ? nlohmann::json(o.bound_bytes) : nlohmann::json()},
                   {"symmetric", o.symmetric},
                   {"time", bench::time_stat_name(o.time_stat)},
                   {"avg_busbw_gbs", bench::average_busbw(rows)},
                   {"wrong", wrong},
                   {"rows", nlohmann::json::array()}};
  for (const auto& r : rows) j["rows"].push_back(bench::to_json(r));
  json << j.dump(2) << '\n';
  json.close();
  if (!json) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot write --json {}: check that its folder exists and is "
                            "writable",
                            o.json_path));
  }
}

int run(const BenchOptions& o) {
  const Collective& coll = bench::find_collective(o.collective);
  const auto sizes = bench::size_list(o.min_bytes, o.max_bytes, o.factor);
  auto comm = make_communicator();
  const int n = comm->size();
  const bool print = comm->rank() == 0;
  if (n < coll.min_ranks) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} needs at least {} ranks, not {}: launch with `strait run -n {} -- "
                            "strait-bench ...`",
                            coll.name, coll.min_ranks, n, coll.min_ranks));
  }
  if (coll.rooted && o.root >= n) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-r (ROOT) is {} but the job has {} rank{}: give 0 .. {}", o.root, n,
                            n == 1 ? "" : "s", n - 1));
  }
  // Opened now, so that a bad path fails before minutes of measuring rather than after.
  std::ofstream json;
  if (print && !o.json_path.empty()) {
    json.open(o.json_path);
    if (!json) {
      throw Error(ErrorCode::Io, fmt::format("cannot write --json {}: check that its folder "
                                             "exists and is writable",
                                             o.json_path));
    }
  }
  const std::size_t elem = strait::kernels::dtype_size(o.dtype);
  const bench::Shape largest = coll.shape(sizes.back(), elem, n);
  const Buffers buffers(*comm, o.symmetric, coll.out_of_place ? largest.send_count * elem : 0,
                        std::max(largest.send_count, largest.recv_count) * elem);

  if (print) print_header(coll, n, o);
  // As nccl-tests does: warm up at the largest size, then the smallest, before any row is timed,
  // so the first row does not pay for first touches of buffers and the library's pools.
  for (const std::size_t bytes : {sizes.back(), sizes.front()}) {
    const bench::Shape shape = coll.shape(bytes, elem, n);
    std::byte* send = buffers.send.data() == nullptr ? buffers.recv_data() : buffers.send_data();
    bench::fill_inputs(o.dtype, o.op, comm->rank(), 0, send, shape.send_count);
    const bench::Call call{.comm = *comm,
                           .send = send,
                           .recv = buffers.recv_data(),
                           .count = shape.count,
                           .dtype = o.dtype,
                           .op = o.op,
                           .root = o.root,
                           .codec = o.codec};
    for (int i = 0; i < o.warmup; ++i) coll.run(call);
  }
  std::unique_ptr<bench::CopyBuffers> copy;
  if (o.bound) copy = std::make_unique<bench::CopyBuffers>(o.bound_bytes);
  std::vector<bench::Row> rows;
  for (const std::size_t bytes : sizes) {
    const bench::Shape shape = coll.shape(bytes, elem, n);
    bench::Row row{.bytes = shape.bytes,
                   .count = shape.count,
                   .type = std::string(strait::kernels::dtype_name(o.dtype)),
                   .redop = coll.reduces ? std::string(strait::kernels::reduce_op_name(o.op))
                                         : std::string("none"),
                   .root = coll.rooted ? o.root : -1,
                   .out_of_place = std::nullopt,
                   .in_place = std::nullopt,
                   .copy_gbs = std::nullopt};
    if (copy) row.copy_gbs = bench::measure_copy(*comm, *copy, 3).mean_gbs;
    const auto bounded = [&](bench::Measurement m, bool in_place) {
      if (row.copy_gbs) {
        const auto moved = bench::bytes_moved_per_rank(coll.name, shape.bytes, n, in_place);
        m.bound_gbs =
            moved ? bench::bound_busbw_gbs(shape.bytes, *moved, coll.bus_factor(n), *row.copy_gbs)
                  : 0.0;
      }
      return m;
    };
    if (coll.out_of_place) {
      row.out_of_place = bounded(run_variant(*comm, coll, o, shape, buffers, false), false);
    }
    if (coll.in_place != nullptr) {
      row.in_place = bounded(run_variant(*comm, coll, o, shape, buffers, true), true);
    }
    if (print) {
      fmt::print("{}\n", bench::table_row(row));
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  const long long wrong = bench::total_wrong(rows);
  if (print) {
    if (o.check)
      fmt::print("# Out of bounds values : {} {}\n", wrong, wrong == 0 ? "OK" : "FAILED");
    fmt::print("# Avg bus bandwidth    : {:.3f}\n#\n", bench::average_busbw(rows));
    std::fflush(stdout);
    if (json.is_open()) write_json(json, coll, n, o, rows, wrong);
  }
  if (wrong != 0) {
    if (print) fmt::print(stderr, "strait-bench: {} wrong elements (see #wrong)\n", wrong);
    return 1;
  }
  return 0;
}

int bench_main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "offload") == 0) return offload_main(argc - 1, argv + 1);
  CLI::App app{"strait-bench: nccl-tests-style benchmark of strait's collectives"};
  app.footer(kFooter);
  BenchOptions o;
  std::string min_text = "32M";
  std::string max_text = "32M";
  std::string dtype_text = "f32";
  std::string op_text = "sum";
  int check = 1;
  int stat = static_cast<int>(o.time_stat);
  std::string names;
  for (const auto& c : bench::collectives())
    names += fmt::format("{}{}", names.empty() ? "" : "|", c.name);
  names += "|offload (I/O engines; strait-bench offload --help)";
  app.add_option("collective", o.collective, names)->required();
  app.add_option("-b,--minbytes", min_text, "Smallest size in bytes (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_text, "Largest size in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", o.factor, "Multiply the size by this between rows")
      ->capture_default_str();
  app.add_option("-d,--datatype", dtype_text, "f32 f64 f16 bf16 i8 u8 i32 i64")
      ->capture_default_str();
  app.add_option("-o,--op", op_text, "sum prod min max avg")->capture_default_str();
  app.add_option("-r,--root", o.root, "Root rank of broadcast, reduce, gather and scatter")
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed calls per size")->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "Untimed calls before them")->capture_default_str();
  app.add_option("-c,--check", check, "1: check every result against a double reference")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("-a,--average", stat,
                 "Reported time over ranks: 0 rank 0, 1 mean, 2 min, 3 max (nccl-tests' -a)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--json", o.json_path, "Also write the rows to this file (rank 0)");
  app.add_option("--codec", o.codec,
                 "allreduce: run allreduce_compressed with this codec spec (int8, int4, "
                 "topk:fraction=0.01, powersgd:rank=4 (the buffer as one near-square matrix), "
                 "...; f32 sum/avg, -c 0)");
  std::string bound_text = "64M";
  app.add_flag("--bound", o.bound,
               "Measure the copy rate of all ranks copying at once before each size and show "
               "busbw / the collective's memory bound");
  app.add_option("--bound-bytes", bound_text, "Bytes each rank copies for --bound")
      ->capture_default_str();
  app.add_flag("--symmetric", o.symmetric,
               "Allocate the buffers with Communicator::alloc (symmetric memory every local rank "
               "maps: single-copy collectives read them in place)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help (exit code 0) from rank 0 only; a real error from every rank (see error_prefix).
    return is_rank0() || e.get_exit_code() != 0 ? app.exit(e) : 0;
  }
  try {
    o.min_bytes = bench::parse_size(min_text);
    o.max_bytes = bench::parse_size(max_text);
    o.bound_bytes = bench::parse_size(bound_text);
    o.dtype = bench::parse_dtype(dtype_text);
    o.op = bench::parse_op(op_text);
    o.check = check != 0;
    o.time_stat = static_cast<bench::TimeStat>(stat);
    bench::validate(o);
    return run(o);
  } catch (const Error& e) {
    fmt::print(stderr, "{}{}\n", error_prefix(), e.what());
    return e.code() == ErrorCode::InvalidArgument ? 2 : 1;
  }
}

}  // namespace
}  // namespace strait::bench

int main(int argc, char** argv) {
  try {
    return strait::bench::bench_main(argc, argv);
  } catch (...) {  // bench_main reports its own errors; this is what escapes that (bad_alloc)
    std::fputs("strait-bench: out of memory or an unexpected error\n", stderr);
    return 1;
  }
}
