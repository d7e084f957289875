// A rank program for the launcher tests: it reads torchrun's environment the way strait's own
// programs do, and exercises the job's TcpStore across real processes.
//   store_rank rendezvous    every rank publishes a value, reads everyone's, checks the sum
//   store_rank server-dies   rank 0 exits with status 3 once all ranks are connected; the others
//                            must see Error(PeerLost) and exit with status 42
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/bootstrap/launch_env.h"
#include "core/error.h"

namespace {

using namespace std::chrono_literals;
using strait::comm::LaunchEnv;
using strait::comm::Store;

std::vector<std::string> rank_keys(const std::string& prefix, int world) {
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(fmt::format("{}/{}", prefix, r));
  return keys;
}

// Everyone arrives, then everyone leaves; rank 0 (the server) leaves last.
void barrier(Store& store, const LaunchEnv& env, const std::string& name) {
  if (store.add(name + "/count", 1) == env.world_size) store.set(name + "/open", std::string("1"));
  store.wait({name + "/open"}, 60s);
}

int rendezvous(const LaunchEnv& env) {
  const auto store = strait::comm::make_launch_store(env, 60s, 60s);
  store->set(fmt::format("value/{}", env.rank), std::to_string(env.rank * 10 + 7));
  const auto keys = rank_keys("value", env.world_size);
  store->wait(keys, 60s);
  long long sum = 0;
  for (const auto& key : keys) sum += std::stoll(store->get_string(key, 1s));
  long long expected = 0;
  for (int r = 0; r < env.world_size; ++r) expected += r * 10 + 7;
  if (sum != expected) {
    fmt::print(stderr, "rank {}: sum {} != {}\n", env.rank, sum, expected);
    return 1;
  }
  // Rank 0 hosts the store, so it must not leave before the others are done with it.
  if (store->add("finished", 1) == env.world_size) store->set("all finished", std::string("1"));
  if (env.rank == 0) store->wait({"all finished"}, 60s);
  fmt::print("rank {}: rendezvous ok\n", env.rank);
  return 0;
}

int server_dies(const LaunchEnv& env) {
  const auto store = strait::comm::make_launch_store(env, 60s, 60s);
  try {
    barrier(*store, env, "connected");
    if (env.rank == 0) {
      std::fflush(nullptr);
      _exit(3);  // dies abruptly, store server and all, maybe before the others left the barrier
    }
    store->get("never set", 60s);
  } catch (const strait::Error& e) {
    fmt::print("rank {}: {}\n", env.rank, e.what());
    return e.code() == strait::ErrorCode::PeerLost ? 42 : 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: store_rank rendezvous|server-dies\n");
    return 2;
  }
  try {
    const LaunchEnv env = strait::comm::launch_env_from_environment();
    const std::string mode = argv[1];
    if (mode == "rendezvous") return rendezvous(env);
    if (mode == "server-dies") return server_dies(env);
    fmt::print(stderr, "unknown mode {}\n", mode);
    return 2;
  } catch (const strait::Error& e) {
    fmt::print(stderr, "store_rank: {}\n", e.what());
    return 1;
  }
}
