// `strait tune`: measures the links between ranks and the allreduce candidates, then writes a
// STRAIT_TUNE_FILE (tools/tune/config.h) and prints its tables. See tune_command.cpp's footer.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace strait::tools {

void add_tune_command(CLI::App& app, const std::vector<std::string>& argv, int& exit_code);

}  // namespace strait::tools
