// LaunchEnv: this process's place in the job, read from torchrun's environment variables (which
// `strait run` also sets): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT. LOCAL_RANK and LOCAL_WORLD_SIZE may both be absent (a job started by hand on one
// machine): they then default to RANK and WORLD_SIZE. TORCHELASTIC_USE_AGENT_STORE=True (torchrun's
// name for it) says that the launcher hosts the store at MASTER_ADDR:MASTER_PORT, so rank 0 is a
// client like the others and the store outlives any rank (an elastic job: comm/reform.h).
//
// Thread-safety: parse_launch_env is pure; launch_env_from_environment reads the environment with
// getenv, which races with setenv in other threads.
// Errors: InvalidArgument naming the variable, its value and the fix (a variable that is missing,
// not a decimal integer, or out of range: RANK < WORLD_SIZE, LOCAL_RANK < LOCAL_WORLD_SIZE <=
// WORLD_SIZE, 1 <= MASTER_PORT <= 65535).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/bootstrap/tcp_store.h"

namespace strait::comm {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this machine
  int local_world_size = 1;  // processes of this job on this machine
  std::string master_addr;   // where rank 0 runs the store
  std::uint16_t master_port = 0;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: the launcher runs the store server
};

// Looks a variable up; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

LaunchEnv parse_launch_env(const EnvLookup& lookup);

// parse_launch_env over this process's environment.
LaunchEnv launch_env_from_environment();

// The job's store for this process: rank 0 runs the server at MASTER_ADDR:MASTER_PORT (unless
// env.agent_store: the launcher runs it), every rank connects to it (retrying for connect_timeout
// while rank 0 starts). secret_file: as TcpStoreOptions::secret_file (unset: STRAIT_SECRET_FILE).
std::unique_ptr<TcpStore> make_launch_store(
    const LaunchEnv& env, std::chrono::milliseconds connect_timeout = std::chrono::minutes(5),
    std::chrono::milliseconds timeout = std::chrono::minutes(5),
    const std::optional<std::string>& secret_file = std::nullopt);

}  // namespace strait::comm
