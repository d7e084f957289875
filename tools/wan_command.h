// `strait wan up|down|status|run`: the WAN testbed (tools/wan/testbed.h) from the command line.
#pragma once

#include <CLI/CLI.hpp>

namespace strait::tools {

// Registers the `wan` subcommand; `exit_code` receives the status of `wan run`'s job.
void add_wan_command(CLI::App& app, int& exit_code);

}  // namespace strait::tools
