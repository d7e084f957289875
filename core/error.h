/// \file
/// strait::Error: the one exception type every layer throws.
///
/// Each error carries a code a caller can branch on and a message meant for a person: it names the
/// operation, and where ranks are involved its sequence number and the ranks, and says what to do.
/// Thread-safety: immutable after construction.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "core/export.h"

namespace strait {

/// What went wrong, for a caller to branch on (the C API maps each to a straitResult_t).
enum class ErrorCode {
  InvalidArgument,  ///< the caller passed something wrong (sizes, dtypes, paths, flags)
  Mismatch,         ///< ranks disagree about an operation (count, dtype, kind, order)
  Timeout,          ///< an operation did not finish within its deadline
  PeerLost,         ///< a peer process died or its connection broke
  Aborted,          ///< abort() was called on the communicator
  Io,               ///< a file or device operation failed
  Unavailable,      ///< a feature is not present on this machine or build (CUDA, io_uring, ...)
  Internal,         ///< a bug in strait: please report it
};

/// The code's name ("InvalidArgument", "Timeout", ...). Thread-safe.
STRAIT_API std::string_view to_string(ErrorCode code) noexcept;

/// The exception every layer throws: a code and a message that names the operation and the ranks.
class STRAIT_API Error : public std::runtime_error {
 public:
  /// Builds an error; what() is "<Code>: <message>".
  Error(ErrorCode code, const std::string& message);
  /// The code to branch on.
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }
  /// The message without the "Code: " prefix that what() carries, for wrapping in another error.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

}  // namespace strait
