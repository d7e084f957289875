// `strait info`: the version, the build's options, and every parameter of the registry
// (core/params.h) with its effective value and where it came from. `--markdown` prints
// docs/environment.md instead, generated from the registry alone (no effective values).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace strait::tools {

void add_info_command(CLI::App& app, int& exit_code);

// docs/environment.md: every parameter by layer (name, type, default, allowed values, meaning).
std::string environment_markdown();

}  // namespace strait::tools
