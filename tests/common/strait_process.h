// The strait binary as a child process (tests/common/process.h), for test targets that define
// STRAIT_BIN, the binary's path, on their compile line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tests/common/process.h"

#ifndef STRAIT_BIN
#error "tests/common/strait_process.h needs STRAIT_BIN (the strait binary's path) defined"
#endif

namespace strait::test {

class Strait : public Process {
 public:
  Strait(const std::vector<std::string>& args, const std::filesystem::path& output,
         const std::vector<std::string>& extra_env = {})
      : Process(STRAIT_BIN, args, output, extra_env) {}
};

}  // namespace strait::test
