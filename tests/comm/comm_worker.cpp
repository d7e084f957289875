// A rank program for the multi-process Communicator tests, started by `strait run`: it builds the
// world communicator with Communicator::from_env() (torchrun's environment, the job's TcpStore)
// and runs one scenario.
//
//   comm_worker allreduce   f32 sum and avg for counts 0, 1, 7, 1000003, in place and out of
//                           place, checked against a double reference and bit-identical on all
//                           ranks; then a split into two groups (even / odd ranks) and the same
//                           check inside each group. Prints "rank R: ok".
//   comm_worker kill        rank 1 raises SIGKILL on itself while the others are in an allreduce
//                           (it waits for the others to enter it, in a real job it would be in
//                           the middle of one); they must fail with PeerLost (or Timeout).
//   comm_worker sleep       rank 1 never calls the allreduce (it sleeps); the others must fail
//                           with Timeout after STRAIT_TIMEOUT_S.
//   comm_worker mismatch    rank 1 allreduces one element more than the others.
//   comm_worker abort       every rank allreduces in a loop; another thread of rank 0 calls
//                           abort() 300 ms in: rank 0 fails with Aborted, the others with
//                           PeerLost once rank 0 has gone.
//   comm_worker stop        the same loop; 300 ms in, rank 1 suspends itself (SIGSTOP, as
//                           `kill -STOP` would): the others fail with Timeout naming it.
//   comm_worker kill_loop   the same loop; 300 ms in, rank 1 raises SIGKILL on itself while its
//                           large messages are being sent and read (single copy: read from its
//                           memory): the others fail with PeerLost naming it.
//   comm_worker mismatch_large  rank 1 allreduces kLarge + 1 elements, the others kLarge.
//   comm_worker stop_short / kill_short  the loops of stop and kill_loop with 16-element vectors,
//                           which ranks on one host exchange through their shared-memory mailbox.
// COMM_WORKER_COLLECTIVE=reduce_scatter|allgather|broadcast|alltoall|reduce|gather|scatter|
// allgather_v|reduce_scatter_v|alltoall_v runs that collective instead of the allreduce in
// kill_loop, stop and mismatch_large (count elements per block, root 0; the v forms with count
// for every rank, so rank 1's mismatch shows in every count).
// The loops' failure lines say how many bytes this rank's peers copied straight from its memory
// (CommStats::single_copy_bytes), so a test can tell that the single-copy path was taken.
//   comm_worker nan         rank 1's input to an int8 allreduce_compressed holds a NaN, which it
//                           refuses (InvalidArgument) before sending anything; the others must
//                           fail with PeerLost naming rank 1 and the operation.
//   comm_worker hierarchical  prints the sites (STRAIT_SITES, set by `strait wan run`), fails
//                           unless there are GROUP_WORLD_SIZE of them, then the allreduce scenario
//                           (which the sites make hierarchical) and an int8 allreduce_compressed
//                           of kLarge f32, bit-identical on all ranks and within int8's bound.
//
// A failing collective prints one line "rank R: failed after N ms: <Error::what()>" on stderr and
// exits with the error's status below, so the test can tell the failure modes apart from the
// outside.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "tests/comm/comm_test_data.h"

namespace {

using namespace std::chrono_literals;
using strait::Error;
using strait::ErrorCode;
using strait::comm::Communicator;
using strait::kernels::DType;
using strait::kernels::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr int kOk = 0;
constexpr int kWrong = 1;  // a value or hash check failed
constexpr int kUsage = 2;
constexpr int kPeerLost = 3;
constexpr int kTimeout = 4;
constexpr int kMismatch = 5;
constexpr int kOtherError = 6;
constexpr int kAborted = 7;
constexpr int kInvalid = 8;

constexpr std::size_t kLarge = 1'000'003;  // rendezvous-sized chunks, uneven over any world size
constexpr std::size_t kShort = 16;         // 64 bytes: the shared-memory mailbox

int status_of(const Error& e) {
  switch (e.code()) {
    case ErrorCode::PeerLost: return kPeerLost;
    case ErrorCode::Timeout: return kTimeout;
    case ErrorCode::Mismatch: return kMismatch;
    case ErrorCode::Aborted: return kAborted;
    case ErrorCode::InvalidArgument: return kInvalid;
    default: return kOtherError;
  }
}

template <class... Args>
void say(int rank, fmt::format_string<Args...> format, Args&&... args) {
  fmt::print("rank {}: {}\n", rank, fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stdout);
}

// Errors go to stderr, as a program's errors do.
template <class... Args>
void say_error(int rank, fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "rank {}: {}\n", rank, fmt::format(format, std::forward<Args>(args)...));
}

// FNV-1a over the bytes: ranks compare results without shipping them.
std::int64_t hash_of(const std::vector<std::byte>& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * 0x100000001b3ULL;
  return static_cast<std::int64_t>(h);
}

// One f32 allreduce checked against the reference and against every other rank's bytes. Returns
// the number of problems (printed).
int checked_allreduce(Communicator& comm, int world_rank, const std::string& where, ReduceOp op,
                      std::size_t count, bool in_place, std::uint64_t seed) {
  using strait::comm::testing::check_allreduce;
  using strait::comm::testing::make_input;
  const auto input = make_input(DType::F32, op, seed, comm.rank(), count);
  std::vector<std::byte> out;
  if (in_place) {
    out = input;
    comm.allreduce(out.data(), out.data(), count, DType::F32, op);
  } else {
    out.assign(input.size(), std::byte{0xa5});
    comm.allreduce(input.data(), out.data(), count, DType::F32, op);
  }
  const std::string what = fmt::format("{} {} x {}{}", where, strait::kernels::reduce_op_name(op),
                                       count, in_place ? " in place" : "");
  int problems = 0;
  if (auto wrong = check_allreduce(DType::F32, op, seed, comm.size(), out.data(), count)) {
    say(world_rank, "WRONG {}: {}", what, *wrong);
    ++problems;
  }
  const std::int64_t mine = hash_of(out);
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, all.data(), 1, DType::I64);
  for (int r = 0; r < comm.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != mine) {
      say(world_rank, "WRONG {}: rank {} of this communicator ended with different bytes", what, r);
      ++problems;
    }
  }
  return problems;
}

int allreduce_scenario(Communicator& world) {
  const int me = world.rank();
  int problems = 0;
  int checks = 0;
  std::uint64_t seed = 1;
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    for (const std::size_t count : {0UL, 1UL, 7UL, kLarge}) {
      for (const bool in_place : {false, true}) {
        problems += checked_allreduce(world, me, "world", op, count, in_place, seed++);
        ++checks;
      }
    }
  }
  // Two groups: even and odd world ranks (one group when the world has one rank).
  auto group = world.split(me % 2, me);
  if (!group) {
    say(me, "WRONG split returned null for color {}", me % 2);
    return kWrong;
  }
  const int expected_size = (world.size() + (me % 2 == 0 ? 1 : 0)) / 2;
  if (group->size() != expected_size || group->rank() != me / 2) {
    say(me, "WRONG split: rank {} of {}, expected rank {} of {}", group->rank(), group->size(),
        me / 2, expected_size);
    ++problems;
  }
  const std::string where = fmt::format("group {}", me % 2);
  for (const std::size_t count : {7UL, kLarge}) {
    problems += checked_allreduce(*group, me, where, ReduceOp::Sum, count, true, 100 + (me % 2));
    ++checks;
  }
  world.barrier();  // rank 0 hosts the store: nobody leaves while another still needs it
  if (problems != 0) return kWrong;
  say(me, "ok ({} checked allreduces)", checks);
  return kOk;
}

// The others allreduce while `absent` (rank 1) does something else; returns their status.
template <class Absent>
int one_rank_absent(Communicator& world, Absent absent) {
  const int me = world.rank();
  world.barrier();  // everyone is connected and here
  if (me == 1) {
    absent();
    return kOk;
  }
  std::vector<float> buf(kLarge, 1.0F);
  const auto start = Clock::now();
  try {
    world.allreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum);
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    say_error(me, "failed after {} ms: {}", ms.count(), e.what());
    return status_of(e);
  }
  say(me, "WRONG the allreduce finished without rank 1");
  return kWrong;
}

// The collective COMM_WORKER_COLLECTIVE names (allreduce when unset) on `count` elements per
// block; `buf` and `out` hold a block per rank.
void run_collective(Communicator& world, std::vector<float>& buf, std::vector<float>& out,
                    std::size_t count, ReduceOp op = ReduceOp::Avg) {
  const char* env = std::getenv("COMM_WORKER_COLLECTIVE");
  const std::string name = env == nullptr ? "allreduce" : env;
  const auto n = static_cast<std::size_t>(world.size());
  buf.resize(std::max(buf.size(), count * n), 1.0F);
  out.resize(count * n);
  if (name == "allreduce") {
    world.allreduce(buf.data(), buf.data(), count, DType::F32, op);
  } else if (name == "reduce_scatter") {
    world.reduce_scatter(buf.data(), out.data(), count, DType::F32, op);
  } else if (name == "allgather") {
    world.allgather(buf.data(), out.data(), count, DType::F32);
  } else if (name == "broadcast") {
    world.broadcast(buf.data(), count, DType::F32, 0);
  } else if (name == "alltoall") {
    world.alltoall(buf.data(), out.data(), count, DType::F32);
  } else if (name == "reduce") {
    world.reduce(buf.data(), out.data(), count, DType::F32, op, 0);
  } else if (name == "gather") {
    world.gather(buf.data(), out.data(), count, DType::F32, 0);
  } else if (name == "scatter") {
    world.scatter(buf.data(), out.data(), count, DType::F32, 0);
  } else if (name == "allgather_v" || name == "reduce_scatter_v" || name == "alltoall_v") {
    const std::vector<std::size_t> counts(n, count);
    if (name == "allgather_v") {
      world.allgather_v(buf.data(), out.data(), counts, DType::F32);
    } else if (name == "reduce_scatter_v") {
      world.reduce_scatter_v(buf.data(), out.data(), counts, DType::F32, op);
    } else {
      world.alltoall_v(buf.data(), counts, out.data(), counts, DType::F32);
    }
  } else {
    throw Error(ErrorCode::InvalidArgument, "COMM_WORKER_COLLECTIVE: unknown collective " + name);
  }
}

int mismatch_scenario(Communicator& world, std::size_t base) {
  const int me = world.rank();
  const std::size_t count = me == 1 ? base + 1 : base;
  std::vector<float> buf(count, 1.0F);
  std::vector<float> out;
  const auto start = Clock::now();
  try {
    run_collective(world, buf, out, count, ReduceOp::Sum);
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    say_error(me, "failed after {} ms: {}", ms.count(), e.what());
    return status_of(e);
  }
  say(me, "WRONG the allreduce of mismatched counts finished");
  return kWrong;
}

// Every rank allreduces in a loop; 300 ms in, another thread of rank 0 runs `interrupt` while
// data is in flight (aborts the communicator, or suspends the process).
template <class Interrupt>
int interrupted_loop(Communicator& world, int who, Interrupt interrupt,
                     std::size_t count = kLarge) {
  const int me = world.rank();
  world.barrier();
  std::thread interrupter;
  if (me == who) {
    interrupter = std::thread([interrupt] {
      std::this_thread::sleep_for(300ms);
      interrupt();
    });
  }
  std::vector<float> buf(count, 1.0F);
  std::vector<float> out;
  const auto start = Clock::now();
  int status = kWrong;
  try {
    // Until the interruption, or a minute: a count would end early for short vectors (the
    // mailbox does 100000 of them in a fraction of the 300 ms before the interruption).
    while (Clock::now() - start < 60s) run_collective(world, buf, out, count);
    say(me, "WRONG a minute of allreduces went by without the interruption");
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    say_error(me, "failed after {} ms ({} bytes sent by single copy): {}", ms.count(),
              world.stats().single_copy_bytes, e.what());
    status = status_of(e);
  }
  if (interrupter.joinable()) interrupter.join();
  return status;
}

// Rank 1 refuses a NaN; the others wait for it in the same allreduce_compressed.
int nan_scenario(Communicator& world) {
  const int me = world.rank();
  world.barrier();
  std::vector<float> x(kLarge, 0.5F);
  if (me == 1) x[12345] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(kLarge);
  const auto start = Clock::now();
  try {
    world.allreduce_compressed(x.data(), out.data(), kLarge, ReduceOp::Sum,
                               strait::comm::Compression{"int8", ""});
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    say_error(me, "failed after {} ms: {}", ms.count(), e.what());
    return status_of(e);
  }
  say(me, "WRONG the allreduce_compressed finished {}", me == 1 ? "with a NaN" : "without rank 1");
  return kWrong;
}

int hierarchical_scenario(Communicator& world) {
  const int me = world.rank();
  const char* groups = std::getenv("GROUP_WORLD_SIZE");
  say(me, "sites {}", world.sites().describe());
  if (groups == nullptr || world.sites().count() != std::atoi(groups)) {
    say(me, "WRONG {} sites, but GROUP_WORLD_SIZE is {}", world.sites().count(),
        groups == nullptr ? "unset" : groups);
    return kWrong;
  }
  if (const int status = allreduce_scenario(world); status != kOk) return status;
  // Inputs every rank can recompute: x_r[i] = sin(i * (r + 1)).
  const auto input = [](int rank, std::size_t i) {
    return static_cast<float>(std::sin(static_cast<double>(i) * (rank + 1)));
  };
  std::vector<float> x(kLarge);
  for (std::size_t i = 0; i < kLarge; ++i) x[i] = input(me, i);
  std::vector<float> out(kLarge);
  world.allreduce_compressed(x.data(), out.data(), kLarge, ReduceOp::Sum,
                             strait::comm::Compression{"int8", ""});
  std::vector<std::byte> bytes(kLarge * sizeof(float));
  std::memcpy(bytes.data(), out.data(), bytes.size());
  const std::int64_t mine = hash_of(bytes);
  std::vector<std::int64_t> all(static_cast<std::size_t>(world.size()));
  world.allgather(&mine, all.data(), 1, DType::I64);
  int problems = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != mine) {
      say(me, "WRONG compressed: rank {} ended with different bytes", r);
      ++problems;
    }
  }
  // int8: each of the S encodes of a shard errs by at most absmax/254 of a partial sum (<= P).
  const double bound = world.sites().count() * world.size() / 254.0 + 1e-5;
  for (std::size_t i = 0; i < kLarge; ++i) {
    double exact = 0;
    for (int r = 0; r < world.size(); ++r) exact += input(r, i);
    if (std::fabs(out[i] - exact) > bound) {
      say(me, "WRONG compressed: element {} is {}, the sum is {}", i, out[i], exact);
      ++problems;
      break;
    }
  }
  world.barrier();
  if (problems != 0) return kWrong;
  say(me, "ok (hierarchical, compressed int8 between {} sites)", world.sites().count());
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr,
               "usage: comm_worker allreduce|kill|sleep|mismatch|mismatch_large|abort|stop|"
               "kill_loop|stop_short|kill_short|nan|hierarchical\n");
    return kUsage;
  }
  const std::string scenario = argv[1];
  try {
    auto world = Communicator::from_env();
    if (scenario == "allreduce") return allreduce_scenario(*world);
    if (scenario == "kill") {
      return one_rank_absent(*world, [] {
        std::this_thread::sleep_for(300ms);  // the others are inside the allreduce by now
        std::fflush(nullptr);
        std::raise(SIGKILL);
      });
    }
    if (scenario == "sleep") {
      return one_rank_absent(*world, [] { std::this_thread::sleep_for(120s); });
    }
    if (scenario == "mismatch") return mismatch_scenario(*world, 1000);
    if (scenario == "mismatch_large") return mismatch_scenario(*world, kLarge);
    if (scenario == "abort") {
      Communicator& w = *world;
      return interrupted_loop(w, 0, [&w] { w.abort("the test's other thread aborted it"); });
    }
    if (scenario == "stop") {
      return interrupted_loop(*world, 1, [] { ::kill(::getpid(), SIGSTOP); });
    }
    if (scenario == "kill_loop") {
      return interrupted_loop(*world, 1, [] {
        std::fflush(nullptr);
        std::raise(SIGKILL);
      });
    }
    // The same loops of 16-element vectors: the shared-memory mailbox between local ranks.
    if (scenario == "stop_short") {
      return interrupted_loop(
          *world, 1, [] { ::kill(::getpid(), SIGSTOP); }, kShort);
    }
    if (scenario == "kill_short") {
      return interrupted_loop(
          *world, 1,
          [] {
            std::fflush(nullptr);
            std::raise(SIGKILL);
          },
          kShort);
    }
    if (scenario == "nan") return nan_scenario(*world);
    if (scenario == "hierarchical") return hierarchical_scenario(*world);
    fmt::print(stderr, "comm_worker: unknown scenario {}\n", scenario);
    return kUsage;
  } catch (const Error& e) {
    fmt::print(stderr, "comm_worker: {}\n", e.what());
    return status_of(e);
  }
}
