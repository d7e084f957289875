// strait's own log, with NCCL's knobs: STRAIT_DEBUG (the level: VERSION, WARN, INFO, TRACE; like
// NCCL_DEBUG), STRAIT_DEBUG_SUBSYS (a comma list of INIT, COLL, P2P, NET, FR or ALL; a leading ^
// excludes the list instead, as NCCL_DEBUG_SUBSYS) and STRAIT_DEBUG_FILE (where the lines go,
// %h the host and %p the pid; stderr by default). Each line starts "host:pid:rank STRAIT LEVEL
// SUBSYS", as NCCL's "host:pid:tid [rank] NCCL INFO" do, so that the lines of many ranks can be
// merged and sorted.
//
// What logs where: INIT the creation of communicators, COLL and P2P each operation at TRACE, and
// its failure at WARN; NET lost peers; FR the flight recorder's dumps (INFO names the file).
// Default level WARN: a failing job prints its first failure and its dump's path.
// Thread-safety: any thread. The settings are read once, at the first log call (reload() reads
// them again, for tests).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <string>
#include <string_view>
#include <utility>

namespace strait::comm::debug {

enum class Level : int { None = 0, Version = 1, Warn = 2, Info = 3, Trace = 4 };

// Bits of STRAIT_DEBUG_SUBSYS.
enum Subsys : unsigned {
  kInit = 1U << 0,
  kColl = 1U << 1,
  kP2P = 1U << 2,
  kNet = 1U << 3,
  kFr = 1U << 4,
  kAll = ~0U,
};

namespace detail {
extern std::atomic<int> level;        // -1: not read yet
extern std::atomic<unsigned> subsys;  // the enabled subsystems
int load();                           // reads the parameters once; returns the level
void write(Level level, Subsys subsys, std::string_view text);
}  // namespace detail

// Whether a line of `level` for `subsys` is written: one relaxed load once the settings are read.
[[nodiscard]] inline bool enabled(Level level, Subsys subsys) noexcept {
  int l = detail::level.load(std::memory_order_relaxed);
  if (l < 0) {
    try {
      l = detail::load();
    } catch (...) {
      return false;  // a bad setting is reported by load()'s first caller that can throw
    }
  }
  return static_cast<int>(level) <= l &&
         (detail::subsys.load(std::memory_order_relaxed) & subsys) != 0;
}

// Formats and writes one line when enabled.
template <class... Args>
void log(Level level, Subsys subsys, fmt::format_string<Args...> format, Args&&... args) {
  if (!enabled(level, subsys)) return;
  detail::write(level, subsys, fmt::format(format, std::forward<Args>(args)...));
}

// This process's rank in the prefix (the world communicator sets it; -1 until then).
void set_rank(int rank) noexcept;
// Reads the parameters again (InvalidArgument on a bad one). The VERSION line is printed once.
void reload();
// This machine's host name (gethostname), as log lines and dump files name it.
[[nodiscard]] std::string host_name();
// The path STRAIT_DEBUG_FILE names with %h and %p replaced ("" when unset).
[[nodiscard]] std::string expand_path(std::string_view pattern);

}  // namespace strait::comm::debug
