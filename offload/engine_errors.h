// The errors both IoEngines' wait() raise (offload/posix_engine.cpp, offload/uring_engine.cpp),
// worded once; `engine` is the message prefix ("posix io", "io_uring"). Internal.
// Thread-safety: pure.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"

namespace strait::offload {

// InvalidArgument: wait() for a ticket the engine does not hold.
inline Error unknown_ticket(std::string_view engine, std::uint64_t ticket) {
  return Error(
      ErrorCode::InvalidArgument,
      fmt::format("{}: wait for unknown ticket {} (never submitted, or already waited for)", engine,
                  ticket));
}

// Timeout: `remaining` of the batch's `size` requests not done within the engine's timeout.
inline Error batch_timeout(std::string_view engine, std::size_t remaining, std::size_t size,
                           std::uint64_t ticket, std::chrono::milliseconds timeout) {
  return Error(ErrorCode::Timeout,
               fmt::format("{}: {} of {} requests of ticket {} not done after {} ms: the device is "
                           "stalled or overloaded (see dmesg); wait again or raise the timeout",
                           engine, remaining, size, ticket, timeout.count()));
}

}  // namespace strait::offload
