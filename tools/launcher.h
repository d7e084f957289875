// The local launcher behind `strait run`: starts N ranks of a command on this machine with
// torchrun's environment and supervises them (as torchrun --standalone, without restarts).
//
// Every rank gets the launcher's environment plus MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_NAME=default, ROLE_RANK and
// ROLE_WORLD_SIZE, its own process group (so a terminal's Ctrl-C reaches only the launcher, which
// forwards it), and the launcher's stdin/stdout/stderr. Ranks die with the launcher
// (PR_SET_PDEATHSIG) if it is killed outright.
//
// When a rank exits non-zero or is killed by a signal the launcher prints one line naming it, waits
// kill_grace (so the other ranks can notice the failure themselves, e.g. as Error(PeerLost)), then
// sends SIGTERM to the process groups of the ranks still running, and SIGKILL after stop_timeout.
// SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every rank; a second one, or stop_timeout
// passing, escalates to SIGKILL. The launcher returns only once every rank has been reaped.
// Ranks killed by a signal the launcher sent them are listed at the end as "stopped by the
// launcher"; a rank that exits any other way after being signalled (it ignored or handled the
// signal, or died of another one) gets its own line: its status and the signals it was sent.
//
// Elastic (LaunchOptions::elastic, `strait run --elastic`, torchrun's elastic agent without
// restarts): the launcher hosts the job's store (a TcpStore server at MASTER_ADDR:MASTER_PORT in
// its own process, announced on stderr, so that it outlives every rank: comm/reform.h; with
// node_netns, in the first node's namespace, so that the WAN testbed's sites reach it) and tells
// the ranks so with TORCHELASTIC_USE_AGENT_STORE=True; a rank that fails is reported but the
// others are not stopped (they re-form without it, and processes may join through the same store
// while the launcher runs). Exit status: 0 when at least one rank exits 0, else that of the first
// failure (an interruption or an exec failure as below).
// Exit status (not elastic): decided by the first event. 0 when every rank exits 0 and the launcher
// is not interrupted; else the status of the first rank to fail before the launcher signalled
// anything (128 + signal when a signal killed it); 128 + the signal that interrupted the launcher;
// 127 when the command cannot be executed; 1 when a rank cannot be started. What the ranks do once
// signalled never changes it.
// Thread-safety: call from a single-threaded process (it forks, and it blocks SIGCHLD, SIGINT,
// SIGTERM and SIGHUP in the calling thread while it runs).
// Errors: InvalidArgument for bad options; Io when processes or signals cannot be set up.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strait::tools {

struct LaunchOptions {
  int nproc = 1;                          // ranks to start, >= 1
  std::string master_addr = "127.0.0.1";  // where rank 0 runs the store
  std::uint16_t master_port = 0;          // 0: a free port on master_addr
  std::chrono::milliseconds kill_grace{0};
  std::chrono::milliseconds stop_timeout = std::chrono::seconds(5);  // SIGTERM -> SIGKILL
  std::vector<std::string> command;                                  // program and arguments
  // Ranks split evenly into `nodes` groups (torchrun's nnodes; the WAN testbed's sites): rank r
  // gets LOCAL_RANK = r % (nproc / nodes), GROUP_RANK = r / (nproc / nodes), GROUP_WORLD_SIZE =
  // nodes. nproc must be a multiple of nodes.
  int nodes = 1;
  // Empty, or one network namespace per node (a name under /run/netns) that its ranks run in,
  // through `ip netns exec` (which also gives them that namespace's /sys).
  std::vector<std::string> node_netns;
  // Empty, or per node: "NAME=value" entries added to its ranks' environment.
  std::vector<std::vector<std::string>> node_env;
  // Start every relayed line with "[rank R] " (`strait run --tag-output`).
  bool tag_output = false;
  // Host the store and let the others go on when a rank fails (see above).
  bool elastic = false;
};

// Runs the job to completion and returns the launcher's exit status (see above).
int launch(const LaunchOptions& options);

}  // namespace strait::tools
