#include "comm/bootstrap/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace strait::comm {
namespace {

constexpr const char* kHowToLaunch =
    "launch with `strait run -n N -- CMD`, torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and "
    "MASTER_PORT";

std::string require(const EnvLookup& lookup, const std::string& name) {
  std::optional<std::string> value = lookup(name);
  if (!value)
    throw Error(ErrorCode::InvalidArgument, fmt::format("{} is not set: {}", name, kHowToLaunch));
  return std::move(*value);
}

// A decimal integer in [lo, hi]; what_range explains the bound in the error.
long long parse_int(const std::string& name, const std::string& text, long long lo, long long hi,
                    const std::string& what_range) {
  long long value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}={:?} is not a decimal integer: {}", name, text, kHowToLaunch));
  }
  if (ec == std::errc::result_out_of_range || value < lo || value > hi) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}={} is out of range: {}", name, text, what_range));
  }
  return value;
}

}  // namespace

LaunchEnv parse_launch_env(const EnvLookup& lookup) {
  LaunchEnv env;
  constexpr long long kMaxInt = std::numeric_limits<int>::max();
  env.world_size = static_cast<int>(
      parse_int("WORLD_SIZE", require(lookup, "WORLD_SIZE"), 1, kMaxInt, "it must be at least 1"));
  env.rank = static_cast<int>(parse_int("RANK", require(lookup, "RANK"), 0, env.world_size - 1,
                                        fmt::format("it must be in [0, {}] since WORLD_SIZE={}",
                                                    env.world_size - 1, env.world_size)));

  const std::optional<std::string> local_rank = lookup("LOCAL_RANK");
  const std::optional<std::string> local_world = lookup("LOCAL_WORLD_SIZE");
  if (local_rank.has_value() != local_world.has_value()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} is set but {} is not: set both or neither (neither means every "
                            "rank runs on this machine)",
                            local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE",
                            local_rank ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK"));
  }
  if (local_rank) {
    env.local_world_size = static_cast<int>(
        parse_int("LOCAL_WORLD_SIZE", *local_world, 1, env.world_size,
                  fmt::format("it must be in [1, WORLD_SIZE={}]", env.world_size)));
    env.local_rank =
        static_cast<int>(parse_int("LOCAL_RANK", *local_rank, 0, env.local_world_size - 1,
                                   fmt::format("it must be in [0, {}] since LOCAL_WORLD_SIZE={}",
                                               env.local_world_size - 1, env.local_world_size)));
  } else {
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  }

  env.master_addr = require(lookup, "MASTER_ADDR");
  if (env.master_addr.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("MASTER_ADDR is empty: set it to rank 0's host name or address ({})",
                            kHowToLaunch));
  }
  env.master_port = static_cast<std::uint16_t>(parse_int(
      "MASTER_PORT", require(lookup, "MASTER_PORT"), 1, 65535, "it must be in [1, 65535]"));
  if (const auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE")) {
    // torchrun writes "True"; accept the usual spellings of a boolean.
    const std::string& v = *agent;
    if (v == "True" || v == "true" || v == "1") {
      env.agent_store = true;
    } else if (!(v == "False" || v == "false" || v == "0" || v.empty())) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("TORCHELASTIC_USE_AGENT_STORE={:?} is not a boolean: set True (the "
                              "launcher hosts the store) or False",
                              v));
    }
  }
  return env;
}

LaunchEnv launch_env_from_environment() {
  return parse_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

std::unique_ptr<TcpStore> make_launch_store(const LaunchEnv& env,
                                            std::chrono::milliseconds connect_timeout,
                                            std::chrono::milliseconds timeout,
                                            const std::optional<std::string>& secret_file) {
  TcpStoreOptions options;
  options.host = env.master_addr;
  options.port = env.master_port;
  options.is_server = env.rank == 0 && !env.agent_store;
  options.connect_timeout = connect_timeout;
  options.timeout = timeout;
  options.secret_file = secret_file;
  return std::make_unique<TcpStore>(options);
}

}  // namespace strait::comm
