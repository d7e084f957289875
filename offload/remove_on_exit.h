// RemoveOnExit: removes a file when it goes out of scope (also during stack unwinding), for
// files strait creates and owns: I/O probes, optimizer-state files. Errors are logged, not thrown.
// Thread-safety: a value type.
#pragma once

#include <spdlog/spdlog.h>

#include <filesystem>
#include <system_error>
#include <utility>

namespace strait::offload {

class RemoveOnExit {
 public:
  RemoveOnExit() = default;
  explicit RemoveOnExit(std::filesystem::path path) : path_(std::move(path)) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    if (ec) spdlog::warn("offload: cannot remove {}: {}", path_.string(), ec.message());
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  void reset(std::filesystem::path path) { path_ = std::move(path); }

 private:
  std::filesystem::path path_;
};

}  // namespace strait::offload
