// Helpers for the tests of locked (pinned) memory: the process's locked KiB as the kernel counts
// them, a skip where AddressSanitizer fakes mlock, and the default logger captured into a string
// to count the fallback's warnings (meant for a testing::run_in_child child, whose logger is never
// restored).
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

// AddressSanitizer replaces mlock with a no-op that reports success.
#if defined(__SANITIZE_ADDRESS__)  // GCC
#define STRAIT_ASAN 1
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
#define STRAIT_ASAN 1
#endif
#endif
#if defined(STRAIT_ASAN)
#define STRAIT_SKIP_IF_MLOCK_INTERCEPTED() GTEST_SKIP() << "AddressSanitizer intercepts mlock"
#else
#define STRAIT_SKIP_IF_MLOCK_INTERCEPTED() static_cast<void>(0)
#endif

namespace strait::offload::testing {

// Locked memory of this process in KiB, as the kernel accounts it (/proc/self/status VmLck); -1
// when the line is missing.
inline long locked_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Replaces the default spdlog logger with one that writes into a string.
class CapturedLog {
 public:
  CapturedLog() : log_(std::make_shared<std::ostringstream>()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*log_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  }

  [[nodiscard]] std::string text() const {
    spdlog::default_logger()->flush();
    return log_->str();
  }

  // How often `needle` occurs in what was logged.
  [[nodiscard]] std::size_t count(std::string_view needle) const {
    const std::string all = text();
    std::size_t n = 0;
    for (std::size_t at = all.find(needle); at != std::string::npos;
         at = all.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }

 private:
  std::shared_ptr<std::ostringstream> log_;
};

}  // namespace strait::offload::testing
