// What every strait command shares on its command line: the example line that ends each --help,
// "did you mean --steps?" for a mistyped option or command, and the list of commands a bare
// `strait` (or `strait wan`) prints.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strait::tools {

// Edits (insert, delete, substitute, swap two neighbours) that turn a into b.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The name in `names` closest to `typed`, when it is close enough to be a typo.
std::optional<std::string> closest_name(std::string_view typed,
                                        const std::vector<std::string>& names);

// Ends every command's footer (the last lines of its --help) with "Example:" and a command line
// from the table in cli_support.cpp. Internal error when a command has no example there, so a new
// command cannot go without one.
void add_examples(CLI::App& app);

// "Commands:" and one line per subcommand of cmd (its description's first line), with the usage
// line above and cmd's example below: what a bare `strait` prints.
std::string command_list(const CLI::App& cmd);

// Installs the failure message that adds "did you mean X?" lines, for the deepest command parsed,
// to CLI11's error (its options for a dashed word, its subcommands otherwise).
void suggest_on_failure(CLI::App& app);

// The deepest subcommand that parsed (app itself when none did).
const CLI::App& deepest_parsed(const CLI::App& app);

}  // namespace strait::tools
