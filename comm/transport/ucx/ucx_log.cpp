#include "comm/transport/ucx/ucx_log.h"

#include <spdlog/spdlog.h>
#include <ucs/debug/log_def.h>

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace strait::comm::ucx_log {
namespace {

std::atomic<bool> g_logger_alive{false};
bool g_asked = false;  // UCX_LOG_LEVEL was set: written once, before the handler is pushed

std::mutex& last_mutex() {
  static std::mutex m;
  return m;
}

std::string& last() {
  static std::string s;
  return s;
}

spdlog::level::level_enum level_of(ucs_log_level_t level) {
  if (!g_asked) return spdlog::level::debug;
  switch (level) {
    case UCS_LOG_LEVEL_FATAL:
    case UCS_LOG_LEVEL_ERROR: return spdlog::level::err;
    case UCS_LOG_LEVEL_WARN: return spdlog::level::warn;
    default: return spdlog::level::info;
  }
}

std::string_view base_name(const char* path) {
  const std::string_view p = path != nullptr ? path : "";
  const auto slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

ucs_log_func_rc_t handler(const char* file, unsigned line, const char* /*function*/,
                          ucs_log_level_t level, const ucs_log_component_config_t* /*comp*/,
                          const char* format, va_list ap) {
  if (!g_logger_alive.load(std::memory_order_acquire)) {
    return g_asked ? UCS_LOG_FUNC_RC_CONTINUE : UCS_LOG_FUNC_RC_STOP;
  }
  std::array<char, 1024> buf{};  // UCX_LOG_BUFFER's default: UCX cuts its own lines there too
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(buf.data(), buf.size(), format, copy);
  va_end(copy);
  std::string_view msg(buf.data(), n < 0 ? 0 : std::min<std::size_t>(n, buf.size() - 1));
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.remove_suffix(1);
  if (level <= UCS_LOG_LEVEL_WARN) {
    const std::lock_guard lock(last_mutex());
    last().assign(msg);
  }
  spdlog::log(level_of(level), "ucx: {} ({}:{})", msg, base_name(file), line);
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* asked = std::getenv("UCX_LOG_LEVEL");
    g_asked = asked != nullptr && *asked != '\0';
    // What the handler uses exists before the atexit call below, which therefore runs before
    // any of it is destroyed.
    (void)spdlog::default_logger_raw();
    (void)last_mutex();
    (void)last();
    g_logger_alive.store(true, std::memory_order_release);
    std::atexit([] { g_logger_alive.store(false, std::memory_order_release); });
    ucs_log_push_handler(&handler);
  });
}

std::string last_message() {
  const std::lock_guard lock(last_mutex());
  return last();
}

}  // namespace strait::comm::ucx_log
