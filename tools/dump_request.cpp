#include "tools/dump_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <string_view>
#include <system_error>

#include "comm/flight_dump.h"
#include "comm/flight_recorder.h"
#include "core/params.h"

namespace strait::tools {

bool catches_sigusr1(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    constexpr std::string_view kKey = "SigCgt:";
    if (line.rfind(kKey, 0) != 0) continue;
    const unsigned long long mask = std::stoull(line.substr(kKey.size()), nullptr, 16);
    return ((mask >> (SIGUSR1 - 1)) & 1ULL) != 0;
  }
  return false;
}

bool dump_written(const std::filesystem::path& dir, pid_t pid,
                  std::filesystem::file_time_type since) {
  const std::string suffix = fmt::format("-{}.json", pid);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::error_code time_ec;
    const auto written = entry.last_write_time(time_ec);
    if (!time_ec && written >= since) return true;
  }
  return false;
}

bool dumps_enabled() {
  try {
    return comm::FlightRecorder::entries_from_env() > 0 &&
           params::get_bool("STRAIT_FR_SIGNAL").value_or(true);
  } catch (const std::exception&) {
    return false;  // a bad setting: the ranks report it themselves
  }
}

std::vector<int> DumpRequest::ask(const std::vector<std::pair<int, pid_t>>& running) {
  asked_ = true;
  std::vector<int> asked;
  if (!dumps_enabled()) return asked;
  dir_ = comm::fr::dump_dir();
  since_ = std::filesystem::file_time_type::clock::now();
  for (const auto& [index, pid] : running) {
    if (catches_sigusr1(pid) && ::kill(pid, SIGUSR1) == 0) {
      pids_.push_back(pid);
      asked.push_back(index);
    }
  }
  return asked;
}

bool DumpRequest::pending(const std::function<bool(pid_t)>& alive) {
  std::erase_if(pids_, [&](pid_t pid) { return !alive(pid) || dump_written(dir_, pid, since_); });
  return !pids_.empty();
}

}  // namespace strait::tools
