#include "core/error.h"

#include <fmt/format.h>

namespace strait {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Mismatch: return "Mismatch";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::PeerLost: return "PeerLost";
    case ErrorCode::Aborted: return "Aborted";
    case ErrorCode::Io: return "Io";
    case ErrorCode::Unavailable: return "Unavailable";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(fmt::format("{}: {}", to_string(code), message)),
      code_(code),
      message_(message) {}

}  // namespace strait
