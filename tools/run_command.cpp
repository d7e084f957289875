#include "tools/run_command.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "tools/launcher.h"

namespace strait::tools {
namespace {

constexpr const char* kDescription =
    "Start N ranks of CMD on this machine with torchrun's environment, and supervise them.";

constexpr const char* kFooter = R"(
Usage:
  strait run -n 4 -- ./train --steps 100
Put `--` before CMD whenever CMD or its arguments start with a dash.

Each rank gets the launcher's environment plus MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_NAME, ROLE_RANK and
ROLE_WORLD_SIZE (as torchrun sets them) and runs in its own process group. Rank 0 runs the job's
store at MASTER_ADDR:MASTER_PORT.

Each rank's stdout and stderr are pipes that the launcher copies to its own stdout and stderr a
whole line at a time, so the lines of different ranks never cut into each other (--tag-output
starts each with "[rank R] "). Being pipes, they are block-buffered by C stdio and Python unless
the program flushes its lines (or runs with PYTHONUNBUFFERED=1).

When a rank exits non-zero or is killed by a signal, the launcher names it, waits --kill-grace
seconds (so that the other ranks can notice the failure themselves), sends SIGTERM to the ranks
still running and SIGKILL --stop-timeout seconds later. Ctrl-C (SIGINT), SIGTERM or SIGHUP to the
launcher is forwarded to every rank; a second one kills them with SIGKILL. Ranks killed by the
launcher's signal are listed as "stopped by the launcher"; a rank that exits otherwise after it
(say, non-zero from a SIGTERM handler) is named with its own status. A rank suspended by SIGSTOP
also gets SIGCONT with the launcher's SIGTERM, so that it acts on it.

When a rank fails (or the launcher is interrupted), the launcher's last lines are a summary: the
rank that failed first, when, and its last lines on stderr (on stdout when it wrote nothing on
stderr), then how each other rank ended.

Exit status: that of the first failure. 0 when every rank exits 0 and the launcher is not
interrupted; otherwise the status of the first rank that failed (128 + N when it was killed by
signal N); 128 + N when the launcher itself got signal N first; 127 when CMD cannot be executed.)";

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000.0)));
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  CLI::App* run = app.add_subcommand("run", kDescription);
  run->footer(kFooter);
  // Owned by the callback: parsing writes into it, then the callback runs the job.
  auto options = std::make_shared<LaunchOptions>();
  auto kill_grace_s = std::make_shared<double>(0.0);
  auto stop_timeout_s = std::make_shared<double>(5.0);

  run->add_option("-n,--nproc", options->nproc, "Number of ranks to start on this machine")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  run->add_option("--master-addr", options->master_addr,
                  "Address of rank 0's store, given to the ranks as MASTER_ADDR")
      ->capture_default_str();
  run->add_option("--master-port", options->master_port,
                  "Port of rank 0's store (MASTER_PORT); by default a free port on --master-addr")
      ->check(CLI::Range(1, 65535));
  run->add_option("--kill-grace", *kill_grace_s,
                  "Seconds the other ranks keep running after one fails, before SIGTERM")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_option("--stop-timeout", *stop_timeout_s,
                  "Seconds between SIGTERM (or a forwarded signal) and SIGKILL")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_flag("--elastic", options->elastic,
                "Host the job's store in the launcher (TORCHELASTIC_USE_AGENT_STORE=True) and let "
                "the other ranks go on when one fails, for jobs that re-form (strait train "
                "--elastic)");
  run->add_flag("--tag-output", options->tag_output,
                "Start each line a rank writes with \"[rank R] \"");
  run->add_option("command", options->command, "The program to run, and its arguments")->required();

  run->callback([options, kill_grace_s, stop_timeout_s, &exit_code] {
    options->kill_grace = to_ms(*kill_grace_s);
    options->stop_timeout = to_ms(*stop_timeout_s);
    exit_code = launch(*options);
  });
}

}  // namespace strait::tools
