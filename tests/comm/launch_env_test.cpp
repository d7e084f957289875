#include "comm/bootstrap/launch_env.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "comm/bootstrap/socket.h"
#include "core/error.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;
using strait::test::contains;

LaunchEnv parse(const Env& env) {
  return parse_launch_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

Env torchrun_env() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"}};
}

// The InvalidArgument message parse() throws for env.
std::string error_for(const Env& env) {
  try {
    parse(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return {};
}

TEST(LaunchEnv, ReadsTorchrunVariables) {
  const LaunchEnv env = parse(torchrun_env());
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, LocalVariablesDefaultToASingleMachine) {
  Env e = torchrun_env();
  e.erase("LOCAL_RANK");
  e.erase("LOCAL_WORLD_SIZE");
  const LaunchEnv env = parse(e);
  EXPECT_EQ(env.local_rank, 5);
  EXPECT_EQ(env.local_world_size, 8);

  e.emplace("LOCAL_RANK", "0");
  EXPECT_TRUE(contains(error_for(e), "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"));
}

TEST(LaunchEnv, MissingVariablesSayHowToLaunch) {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    Env e = torchrun_env();
    e.erase(name);
    const std::string msg = error_for(e);
    EXPECT_TRUE(contains(msg, fmt::format("{} is not set", name))) << msg;
    EXPECT_TRUE(contains(msg, "strait run -n N -- CMD")) << msg;
  }
}

TEST(LaunchEnv, RejectsMalformedAndOutOfRangeValues) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "8"}}, "RANK=8 is out of range"},
      {{{"RANK", "-1"}}, "RANK=-1 is out of range"},
      {{{"RANK", "abc"}}, "RANK=\"abc\" is not a decimal integer"},
      {{{"RANK", " 1"}}, "is not a decimal integer"},
      {{{"RANK", "1 "}}, "is not a decimal integer"},
      {{{"RANK", ""}}, "is not a decimal integer"},
      {{{"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 is out of range"},
      {{{"WORLD_SIZE", "99999999999999999999"}}, "out of range"},
      {{{"LOCAL_WORLD_SIZE", "9"}}, "LOCAL_WORLD_SIZE=9 is out of range"},
      {{{"LOCAL_RANK", "4"}}, "LOCAL_RANK=4 is out of range"},
      {{{"MASTER_PORT", "0"}}, "MASTER_PORT=0 is out of range"},
      {{{"MASTER_PORT", "65536"}}, "MASTER_PORT=65536 is out of range"},
      {{{"MASTER_PORT", "http"}}, "not a decimal integer"},
      {{{"MASTER_ADDR", ""}}, "MASTER_ADDR is empty"},
  };
  for (const auto& [override, expected] : cases) {
    Env e = torchrun_env();
    for (const auto& [k, v] : override) e[k] = v;
    const std::string msg = error_for(e);
    EXPECT_TRUE(contains(msg, expected)) << "got: " << msg << "\nwanted: " << expected;
  }
}

TEST(LaunchEnv, MakesAWorkingStoreOnRankZeroAndConnectsTheOthers) {
  LaunchEnv rank0;
  rank0.rank = 0;
  rank0.world_size = 2;
  rank0.master_addr = "127.0.0.1";
  rank0.master_port = net::pick_free_port("127.0.0.1");
  LaunchEnv rank1 = rank0;
  rank1.rank = 1;
  const auto server = make_launch_store(rank0, 10s, 10s);
  const auto client = make_launch_store(rank1, 10s, 10s);
  EXPECT_EQ(server->port(), rank0.master_port);
  client->set("from rank 1", std::string("hi"));
  EXPECT_EQ(server->get_string("from rank 1", 1s), "hi");
}

// TORCHELASTIC_USE_AGENT_STORE=True (the elastic launcher hosts the store): rank 0 is a client
// like the others, so it fails to reach a store nobody serves instead of starting one.
TEST(LaunchEnv, AgentStoreMakesRankZeroAClient) {
  Env e = torchrun_env();
  EXPECT_FALSE(parse(e).agent_store);
  for (const char* yes : {"True", "true", "1"}) {
    e["TORCHELASTIC_USE_AGENT_STORE"] = yes;
    EXPECT_TRUE(parse(e).agent_store) << yes;
  }
  e["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(parse(e).agent_store);
  e["TORCHELASTIC_USE_AGENT_STORE"] = "maybe";
  EXPECT_TRUE(contains(error_for(e), "TORCHELASTIC_USE_AGENT_STORE=\"maybe\" is not a boolean"));

  LaunchEnv rank0;
  rank0.rank = 0;
  rank0.world_size = 2;
  rank0.master_addr = "127.0.0.1";
  rank0.master_port = net::pick_free_port("127.0.0.1");
  rank0.agent_store = true;
  try {
    (void)make_launch_store(rank0, 300ms, 300ms);
    ADD_FAILURE() << "rank 0 served the store although the launcher hosts it";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::PeerLost) << err.what();
  }
  // With a server elsewhere (the launcher's), rank 0 connects to it.
  TcpStoreOptions agent;
  agent.port = rank0.master_port;
  agent.is_server = true;
  const TcpStore launcher(agent);
  const auto client = make_launch_store(rank0, 10s, 10s);
  client->set("from rank 0", std::string("hi"));
  EXPECT_EQ(client->get_string("from rank 0", 1s), "hi");
}

}  // namespace
}  // namespace strait::comm
