// One rank of an elastic job for communicator_reform_test.cpp, started by `strait run` (members)
// or on its own (joiners). The store is the test's: a TcpStore server in the test process at
// MASTER_ADDR:MASTER_PORT, so it outlives any rank (comm/reform.h); every process is a client.
//
//   elastic_worker shrink VICTIM PHASE   round 0: a checked allreduce. Round 1: rank VICTIM dies
//                                        (SIGKILL) before the round's allreduce (PHASE "before"),
//                                        in the middle of it ("during") or after it, at the round
//                                        boundary ("after"); the others try the allreduce, then
//                                        reform() and check the new world.
//   elastic_worker exclude VICTIM        the others reform() with exclude = {VICTIM} and run
//                                        checked collectives, while VICTIM keeps sending to them
//                                        on the old communicator; then VICTIM calls reform() and
//                                        must be told (Aborted) that it was left out.
//   elastic_worker grow JOINERS          the members wait until JOINERS processes wait in join(),
//                                        reform(), send the joiners their state and check.
//   elastic_worker join MEMBERS JOINERS  a joiner: Communicator::join(), then the same checks.
//   elastic_worker stopped VICTIM        heartbeats: rank VICTIM stops (SIGSTOP); see stopped().
//
// Every process prints "<who>: ok ..." when all its checks pass, "<who>: WRONG ..." for each one
// that does not, and exits 0 only when all passed; <who> is "rank R" (R: its first rank) or
// "joiner". The values each process contributes depend on its identity (its first world rank, or
// 100 + its rank for a joiner), and the reference is computed here from the membership the test
// expects, in double precision, not from what the communicator reports.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/tcp_store.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/params.h"

namespace {

using namespace std::chrono_literals;
using strait::Error;
using strait::ErrorCode;
using strait::comm::Communicator;
using strait::comm::ReformOptions;
using strait::comm::TcpStore;
using strait::comm::TcpStoreOptions;
using strait::kernels::DType;
using strait::kernels::ReduceOp;

constexpr std::size_t kCount = 300'007;  // uneven over any world size, several ring segments
constexpr std::size_t kStateCount = 4099;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw Error(ErrorCode::InvalidArgument, fmt::format("{} is not set", name));
  return std::stoi(v);
}

std::shared_ptr<TcpStore> test_store() {
  TcpStoreOptions o;
  o.host = std::getenv("MASTER_ADDR") != nullptr ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  o.port = static_cast<std::uint16_t>(env_int("MASTER_PORT"));
  o.is_server = false;
  o.connect_timeout = 30s;
  o.timeout = 30s;
  return std::make_shared<TcpStore>(o);
}

struct Checker {
  std::string who;
  int problems = 0;
  template <class... Args>
  void wrong(fmt::format_string<Args...> format, Args&&... args) {
    fmt::print("{}: WRONG {}\n", who, fmt::format(format, std::forward<Args>(args)...));
    std::fflush(stdout);
    ++problems;
  }
  template <class... Args>
  void say(fmt::format_string<Args...> format, Args&&... args) {
    fmt::print("{}: {}\n", who, fmt::format(format, std::forward<Args>(args)...));
    std::fflush(stdout);
  }
};

double value(int id, std::size_t i, int round) {
  return static_cast<double>(id) * 3.0 + static_cast<double>(i % 11) + 0.5 * round;
}

// A sum allreduce of f64 over `comm`, each process contributing value(id, ., round), checked
// against the naive sum over `ids` (the identities the test expects in the group).
void checked_allreduce(Checker& c, Communicator& comm, int id, const std::vector<int>& ids,
                       int round) {
  std::vector<double> buf(kCount);
  for (std::size_t i = 0; i < kCount; ++i) buf[i] = value(id, i, round);
  comm.allreduce(buf.data(), buf.data(), kCount, DType::F64, ReduceOp::Sum);
  for (std::size_t i = 0; i < kCount; ++i) {
    double expect = 0;
    for (const int other : ids) expect += value(other, i, round);
    if (buf[i] != expect) {
      c.wrong("round {} allreduce: element {} is {}, the reference {}", round, i, buf[i], expect);
      return;
    }
  }
}

// The collectives of a re-formed world: its size and generation, who its ranks were (allgather of
// identities against `ids` in the expected order), an allreduce and a broadcast from the last rank.
void check_new_world(Checker& c, Communicator& comm, int id, const std::vector<int>& ids,
                     std::uint64_t generation) {
  if (comm.size() != static_cast<int>(ids.size())) {
    c.wrong("the new world has {} ranks, {} expected", comm.size(), ids.size());
    return;
  }
  if (comm.generation() != generation) {
    c.wrong("generation {}, {} expected", comm.generation(), generation);
  }
  if (ids[static_cast<std::size_t>(comm.rank())] != id) {
    c.wrong("this process is rank {} of the new world, but {} expected it at that place",
            comm.rank(), fmt::join(ids, ","));
  }
  std::vector<std::int64_t> seen(ids.size());
  const std::int64_t mine = id;
  comm.allgather(&mine, seen.data(), 1, DType::I64);
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (seen[r] != ids[r])
      c.wrong("allgather: rank {} is process {}, {} expected", r, seen[r], ids[r]);
    const int former = comm.former_ranks()[r];
    const int expect_former = ids[r] >= 100 ? -1 : ids[r];
    if (generation == 1 && former != expect_former) {
      c.wrong("former_ranks()[{}] is {}, {} expected", r, former, expect_former);
    }
  }
  for (int round = 10; round < 13; ++round) checked_allreduce(c, comm, id, ids, round);
  std::vector<std::int64_t> b(17, comm.rank() == comm.size() - 1 ? 42 : -1);
  comm.broadcast(b.data(), b.size(), DType::I64, comm.size() - 1);
  for (const auto v : b) {
    if (v != 42) {
      c.wrong("broadcast from the last rank gave {}", v);
      break;
    }
  }
  comm.barrier();
}

std::vector<int> all_but(int size, int victim) {
  std::vector<int> ids;
  for (int r = 0; r < size; ++r) {
    if (r != victim) ids.push_back(r);
  }
  return ids;
}

int shrink(int victim, const std::string& phase) {
  const int me = env_int("RANK");
  const int size = env_int("WORLD_SIZE");
  Checker c{fmt::format("rank {}", me)};
  auto world = Communicator::create(test_store(), me, size);
  std::vector<int> everyone = all_but(size, -1);
  checked_allreduce(c, *world, me, everyone, 0);
  std::vector<double> buf(kCount * 8, 1.0);
  if (me == victim && phase == "after") {
    // Dies at the round boundary, once its part of round 1 is done.
    world->allreduce(buf.data(), buf.data(), buf.size(), DType::F64, ReduceOp::Sum);
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
  if (me == victim) {
    if (phase == "during") {
      auto work = world->iallreduce(buf.data(), buf.data(), buf.size(), DType::F64, ReduceOp::Sum);
      std::this_thread::sleep_for(2ms);
    }
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
  try {
    world->allreduce(buf.data(), buf.data(), buf.size(), DType::F64, ReduceOp::Sum);
    c.say("round 1's allreduce completed before the loss was seen");
  } catch (const Error& e) {
    c.say("round 1's allreduce failed: {}", e.what());
  }
  auto next = world->reform();
  bool named = false;
  for (const auto& [r, how] : world->lost_peers()) named = named || r == victim;
  if (!named) c.wrong("the old world's lost_peers() does not name rank {}", victim);
  world.reset();
  check_new_world(c, *next, me, all_but(size, victim), 1);
  if (c.problems != 0) return 1;
  c.say("ok shrink: generation {}, rank {} of {}", next->generation(), next->rank(), next->size());
  return 0;
}

int exclude(int victim) {
  const int me = env_int("RANK");
  const int size = env_int("WORLD_SIZE");
  Checker c{fmt::format("rank {}", me)};
  auto world = Communicator::create(test_store(), me, size);
  checked_allreduce(c, *world, me, all_but(size, -1), 0);
  if (me == victim) {
    // Keep sending to everyone on the old communicator while the others re-form and work.
    std::vector<double> junk(1000, 7.0);
    const auto until = std::chrono::steady_clock::now() + 1500ms;
    int sent = 0;
    while (std::chrono::steady_clock::now() < until) {
      for (int peer = 0; peer < size; ++peer) {
        if (peer == me) continue;
        try {
          world->isend(junk.data(), junk.size() * sizeof(double), peer, 0);
          ++sent;
        } catch (const Error&) {
        }
      }
      try {
        world->iallreduce(junk.data(), junk.data(), 1000, DType::F64, ReduceOp::Sum);
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(10ms);
    }
    try {
      auto next = world->reform();
      c.wrong("reform() admitted the excluded rank as rank {} of {}", next->rank(), next->size());
      return 1;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Aborted) {
        c.wrong("reform() of the excluded rank failed with {}, not Aborted: {}",
                strait::to_string(e.code()), e.what());
        return 1;
      }
      c.say("ok excluded after {} sends: {}", sent, e.what());
      return 0;
    }
  }
  ReformOptions o;
  o.exclude = {victim};
  auto next = world->reform(o);
  for (int i = 0; i < 5; ++i) check_new_world(c, *next, me, all_but(size, victim), 1);
  if (c.problems != 0) return 1;
  c.say("ok exclude: generation {}, rank {} of {}", next->generation(), next->rank(), next->size());
  return 0;
}

// STRAIT_HEARTBEAT_S is set: rank VICTIM publishes its pid and stops itself (SIGSTOP: its
// connections stay open, so only the heartbeat can tell). The others' next allreduce must fail
// with PeerLost naming it, through the heartbeat, long before the operation timeout; they
// reform() without it, check the new world, and the new rank 0 resumes it (SIGCONT). Resumed, its
// reform() must say it was left out.
int stopped(int victim) {
  const int me = env_int("RANK");
  const int size = env_int("WORLD_SIZE");
  Checker c{fmt::format("rank {}", me)};
  auto store = test_store();
  auto world = Communicator::create(store, me, size);
  checked_allreduce(c, *world, me, all_but(size, -1), 0);
  std::vector<double> buf(1000, 1.0);
  if (me == victim) {
    store->set("test/victim_pid", std::to_string(::getpid()));
    world->barrier();
    std::raise(SIGSTOP);
    // Resumed by the others once they have re-formed.
    try {
      world->allreduce(buf.data(), buf.data(), buf.size(), DType::F64, ReduceOp::Sum);
      // Possible: with eager sends, the peers' parts may have arrived before they gave up on it.
      c.say("after resuming, the old world's allreduce completed (the others' parts had come)");
    } catch (const Error& e) {
      c.say("after resuming, the old world's allreduce failed: {}", e.what());
    }
    try {
      auto next = world->reform();
      c.wrong("reform() admitted the stopped rank as rank {} of {}", next->rank(), next->size());
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Aborted) c.wrong("reform() failed with {}", e.what());
    }
    if (c.problems != 0) return 1;
    c.say("ok stopped and left out");
    return 0;
  }
  world->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    world->allreduce(buf.data(), buf.data(), buf.size(), DType::F64, ReduceOp::Sum);
    c.wrong("the allreduce completed without rank {}", victim);
  } catch (const Error& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    c.say("the allreduce failed after {} ms with {}: {}", ms, strait::to_string(e.code()),
          e.what());
    if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Aborted) {
      c.wrong("the allreduce failed with {}, not PeerLost (or Aborted by the re-formation)",
              strait::to_string(e.code()));
    }
    // The bound: the lease (5 intervals) and one interval, with room for a loaded machine; far
    // below the operation timeout the test sets (30 s).
    const double interval_s = std::stod(strait::params::text("STRAIT_HEARTBEAT_S").value());
    if (static_cast<double>(ms) > 1000.0 * (8 * interval_s + 3)) {
      c.wrong("the loss took {} ms to see, more than the heartbeat bound", ms);
    }
  }
  bool named = false;
  for (const auto& [r, how] : world->lost_peers()) {
    named = named || (r == victim && how.find("heartbeat") != std::string::npos);
  }
  if (!named) c.wrong("lost_peers() does not name rank {} as lost by its heartbeat", victim);
  auto next = world->reform();
  check_new_world(c, *next, me, all_but(size, victim), 1);
  if (next->rank() == 0) {
    const int pid = std::stoi(store->get_string("test/victim_pid", 10s));
    ::kill(pid, SIGCONT);
  }
  if (c.problems != 0) return 1;
  c.say("ok stopped peer: generation {}, rank {} of {}", next->generation(), next->rank(),
        next->size());
  return 0;
}

// The state a joiner receives (stands for a training checkpoint): step and a vector.
void exchange_state(Checker& c, Communicator& comm) {
  std::vector<double> state(kStateCount, -1.0);
  std::int64_t step = -1;
  if (comm.rank() == 0) {
    step = 1234;
    for (std::size_t i = 0; i < kStateCount; ++i) state[i] = 0.25 * static_cast<double>(i);
  }
  comm.broadcast(&step, 1, DType::I64, 0);
  comm.broadcast(state.data(), kStateCount, DType::F64, 0);
  if (step != 1234) c.wrong("received step {}", step);
  for (std::size_t i = 0; i < kStateCount; ++i) {
    if (state[i] != 0.25 * static_cast<double>(i)) {
      c.wrong("received state[{}] = {}", i, state[i]);
      break;
    }
  }
}

std::vector<int> grown_ids(int members, int joiners) {
  std::vector<int> ids = all_but(members, -1);
  for (int j = 0; j < joiners; ++j) ids.push_back(100 + members + j);
  return ids;
}

int grow(int joiners) {
  const int me = env_int("RANK");
  const int size = env_int("WORLD_SIZE");
  Checker c{fmt::format("rank {}", me)};
  auto world = Communicator::create(test_store(), me, size);
  checked_allreduce(c, *world, me, all_but(size, -1), 0);
  // A round boundary: the members agree (max over ranks) on whether joiners wait.
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (true) {
    std::int64_t waiting = world->joiners_waiting();
    world->allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Max);
    if (waiting >= joiners) break;
    if (std::chrono::steady_clock::now() > until) {
      c.wrong("only {} of {} joiners arrived", waiting, joiners);
      return 1;
    }
    std::this_thread::sleep_for(20ms);
  }
  auto next = world->reform();
  world.reset();
  exchange_state(c, *next);
  check_new_world(c, *next, me, grown_ids(size, joiners), 1);
  if (c.problems != 0) return 1;
  c.say("ok grow: generation {}, rank {} of {}", next->generation(), next->rank(), next->size());
  return 0;
}

int join(int members, int joiners) {
  Checker c{"joiner"};
  strait::comm::CommOptions o;
  o.timeout = 60s;
  auto comm = Communicator::join(test_store(), o);
  c.who = fmt::format("joiner {}", comm->rank());
  exchange_state(c, *comm);
  check_new_world(c, *comm, 100 + comm->rank(), grown_ids(members, joiners), 1);
  if (c.problems != 0) return 1;
  c.say("ok join: generation {}, rank {} of {}", comm->generation(), comm->rank(), comm->size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 3 && args[0] == "shrink") return shrink(std::stoi(args[1]), args[2]);
    if (args.size() == 2 && args[0] == "exclude") return exclude(std::stoi(args[1]));
    if (args.size() == 2 && args[0] == "stopped") return stopped(std::stoi(args[1]));
    if (args.size() == 2 && args[0] == "grow") return grow(std::stoi(args[1]));
    if (args.size() == 3 && args[0] == "join") return join(std::stoi(args[1]), std::stoi(args[2]));
  } catch (const Error& e) {
    fmt::print(stderr, "elastic_worker: {}\n", e.what());
    return 3;
  }
  fmt::print(
      stderr,
      "usage: elastic_worker shrink VICTIM before|during|after | exclude VICTIM | grow JOINERS | "
      "join MEMBERS JOINERS | stopped VICTIM\n");
  return 2;
}
