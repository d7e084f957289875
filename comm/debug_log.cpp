#include "comm/debug_log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/params.h"

namespace strait::comm::debug {
namespace detail {
std::atomic<int> level{-1};
std::atomic<unsigned> subsys{kAll};
}  // namespace detail

namespace {

struct SubsysName {
  std::string_view name;
  unsigned bits;
};
constexpr std::array kSubsystems = {SubsysName{"INIT", kInit}, SubsysName{"COLL", kColl},
                                    SubsysName{"P2P", kP2P},   SubsysName{"NET", kNet},
                                    SubsysName{"FR", kFr},     SubsysName{"ALL", kAll}};

std::atomic<int> g_rank{-1};
std::mutex g_mutex;  // guards g_logger and its replacement
std::shared_ptr<spdlog::logger> g_logger;

Level parse_level(const std::string& text) {
  constexpr std::array kNames = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (upper == kNames[i]) return static_cast<Level>(i);
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("STRAIT_DEBUG={} is not one of NONE, VERSION, WARN, INFO, TRACE", text));
}

unsigned parse_subsys(std::string_view text) {
  const bool exclude = !text.empty() && text.front() == '^';
  if (exclude) text.remove_prefix(1);
  unsigned bits = 0;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string word(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (word.empty()) continue;
    bool known = false;
    for (const auto& s : kSubsystems) {
      if (s.name == word) {
        bits |= s.bits;
        known = true;
      }
    }
    if (!known) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("STRAIT_DEBUG_SUBSYS names {}: the subsystems are INIT, COLL, P2P, "
                              "NET, FR and ALL (a leading ^ excludes the list)",
                              word));
    }
  }
  return exclude ? ~bits : bits;
}

std::shared_ptr<spdlog::logger> make_logger() {
  const std::string path = expand_path(params::text("STRAIT_DEBUG_FILE").value_or(""));
  spdlog::sink_ptr sink;
  if (path.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
    } catch (const spdlog::spdlog_ex& e) {
      throw Error(ErrorCode::Io,
                  fmt::format("STRAIT_DEBUG_FILE={}: cannot open it: {}", path, e.what()));
    }
  }
  auto logger = std::make_shared<spdlog::logger>("strait", std::move(sink));
  logger->set_pattern("%v");
  logger->flush_on(spdlog::level::trace);  // a hung or killed process keeps what it logged
  return logger;
}

}  // namespace

int detail::load() {
  static std::once_flag once;
  std::call_once(once, [] { reload(); });
  return level.load(std::memory_order_relaxed);
}

void reload() {
  const auto text = params::text("STRAIT_DEBUG");
  const Level l = text ? parse_level(*text) : Level::Warn;
  const unsigned s = parse_subsys(params::text("STRAIT_DEBUG_SUBSYS").value_or("ALL"));
  {
    const std::lock_guard lock(g_mutex);
    g_logger = make_logger();
  }
  detail::subsys.store(s, std::memory_order_relaxed);
  detail::level.store(static_cast<int>(l), std::memory_order_release);
  static std::once_flag version_once;
  // Printed when asked for (VERSION, INFO, TRACE), not at the default WARN.
  if (text && l != Level::Warn && l != Level::None) {
    std::call_once(version_once,
                   [] { detail::write(Level::Version, kInit, "strait " STRAIT_VERSION_STRING); });
  }
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "unknown";
  return buf.data();
}

void set_rank(int rank) noexcept {
  g_rank.store(rank, std::memory_order_relaxed);
}

std::string expand_path(std::string_view pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'h') {
        out += host_name();
        ++i;
        continue;
      }
      if (pattern[i + 1] == 'p') {
        out += std::to_string(::getpid());
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

void detail::write(Level level, Subsys subsys, std::string_view text) {
  static const std::string host = host_name();
  constexpr std::array kLevels = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  std::string_view sub = "ALL";
  for (const auto& s : kSubsystems) {
    if (s.bits == subsys) sub = s.name;
  }
  std::shared_ptr<spdlog::logger> logger;
  {
    const std::lock_guard lock(g_mutex);
    logger = g_logger;
  }
  if (!logger) return;
  logger->info("{}:{}:{} STRAIT {} {} {}", host, ::getpid(), g_rank.load(std::memory_order_relaxed),
               kLevels[static_cast<std::size_t>(level)], sub, text);
}

}  // namespace strait::comm::debug
