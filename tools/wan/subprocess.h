// Running a system tool (ip, tc) to completion and keeping what it printed, for error messages.
// Thread-safety: reentrant; each call forks its own child.
// Errors: Io when the program cannot be started (not installed: the message says which package).
#pragma once

#include <string>
#include <vector>

namespace strait::tools {

struct CommandResult {
  int status = 0;      // exit status; 128 + N when killed by signal N
  std::string output;  // stdout and stderr, interleaved
  [[nodiscard]] bool ok() const noexcept { return status == 0; }
};

// Runs argv[0] (searched on PATH) with the rest as arguments.
CommandResult run_capture(const std::vector<std::string>& argv);

// As run_capture, and throws Io naming the command and its output when it exits non-zero.
std::string run_checked(const std::vector<std::string>& argv);

}  // namespace strait::tools
