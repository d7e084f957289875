// UCX's log messages, routed through strait's logger (spdlog) instead of UCX's own printer.
//
// UCX writes its warnings and errors straight to stderr ("[time] [host:pid:thread] file.c:N UCX
// WARN ..."), in the middle of the user's output and of strait's own error lines. Once
// install() has run, a handler pushed with ucs_log_push_handler takes every message UCX would
// print (those at or above UCX_LOG_LEVEL, warn when unset) and stops UCX's printer:
//   - UCX_LOG_LEVEL unset (strait's choice): the messages go to spdlog at debug level, which
//     strait's default level (info) does not show. The errors strait reports say what failed;
//     the last UCX warning or error is kept (last_message()) for an error to quote when UCX's
//     own call failed.
//   - UCX_LOG_LEVEL set (the user asked): they go to spdlog at the matching level (fatal and
//     error: error, warn: warn, anything more verbose: info), one line each, as "ucx: MESSAGE
//     (file.c:N)".
// After spdlog's registry is gone (the process is exiting) messages are dropped, or left to
// UCX's printer when the user asked for them.
// Thread-safety: install() and last_message() may be called from any thread; UCX calls the
// handler from any of its threads.
#pragma once

#include <string>

namespace strait::comm::ucx_log {

// Idempotent. Call before the first UCX call whose messages should be routed (ucp_init).
void install();

// The last message UCX logged at warn level or above in this process, or "".
[[nodiscard]] std::string last_message();

}  // namespace strait::comm::ucx_log
