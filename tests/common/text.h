// Text helpers for tests: a whole file as a string, and substring checks.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace strait::test {

// The whole file; empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace strait::test
