// Before the launcher stops the ranks of a failed job, it asks those that listen for SIGUSR1 (a
// strait process whose flight recorder is on: comm/flight_dump.h) for their flight-recorder dumps,
// so that `strait diagnose` sees every live rank's state, not only the state of the ranks that
// failed first. A rank is asked only when /proc says it catches SIGUSR1 (so a process that does
// not would not be killed by it) and it is not suspended (a stopped rank cannot answer; its
// missing dump is what names it).
// Thread-safety: functions of their arguments and the file system.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace strait::tools {

// Whether process `pid` catches SIGUSR1 (its SigCgt mask in /proc/PID/status).
[[nodiscard]] bool catches_sigusr1(pid_t pid);
// Whether `dir` holds a flight-recorder dump of process `pid` (…-PID.json) written at or after
// `since`.
[[nodiscard]] bool dump_written(const std::filesystem::path& dir, pid_t pid,
                                std::filesystem::file_time_type since);
// Whether dumps are wanted: STRAIT_FR_ENTRIES is not 0 and STRAIT_FR_SIGNAL is not off.
[[nodiscard]] bool dumps_enabled();

// The launcher's request: ask() signals the ranks given (index, pid) that catch SIGUSR1, once;
// pending() says whether one of them has neither written its dump nor exited.
class DumpRequest {
 public:
  // The indexes of the ranks asked (none when dumps_enabled() is false).
  std::vector<int> ask(const std::vector<std::pair<int, pid_t>>& running);
  // `alive(pid)`: whether that rank still runs. Forgets the ranks that answered or exited.
  bool pending(const std::function<bool(pid_t)>& alive);
  [[nodiscard]] bool asked() const noexcept { return asked_; }
  [[nodiscard]] bool waiting() const noexcept { return !pids_.empty(); }
  void clear() noexcept { pids_.clear(); }

 private:
  bool asked_ = false;
  std::vector<pid_t> pids_;  // asked, not answered yet
  std::filesystem::path dir_;
  std::filesystem::file_time_type since_{};
};

}  // namespace strait::tools
