#include "capi/results.h"

namespace strait::capi {

straitResult_t to_result(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return straitInvalidArgument;
    case ErrorCode::Mismatch: return straitMismatch;
    case ErrorCode::Timeout: return straitTimeout;
    case ErrorCode::PeerLost: return straitPeerLost;
    case ErrorCode::Aborted: return straitAborted;
    case ErrorCode::Io: return straitIoError;
    case ErrorCode::Unavailable: return straitUnavailable;
    case ErrorCode::Internal: return straitInternalError;
  }
  return straitInternalError;
}

std::optional<ErrorCode> to_error_code(int result) noexcept {
  switch (result) {
    case straitInvalidArgument: return ErrorCode::InvalidArgument;
    case straitMismatch: return ErrorCode::Mismatch;
    case straitTimeout: return ErrorCode::Timeout;
    case straitPeerLost: return ErrorCode::PeerLost;
    case straitAborted: return ErrorCode::Aborted;
    case straitIoError: return ErrorCode::Io;
    case straitUnavailable: return ErrorCode::Unavailable;
    case straitInternalError: return ErrorCode::Internal;
    default: return std::nullopt;
  }
}

std::string_view result_name(int result) noexcept {
  switch (result) {
    case straitSuccess: return "straitSuccess";
    case straitInvalidArgument: return "straitInvalidArgument";
    case straitMismatch: return "straitMismatch";
    case straitTimeout: return "straitTimeout";
    case straitPeerLost: return "straitPeerLost";
    case straitAborted: return "straitAborted";
    case straitIoError: return "straitIoError";
    case straitUnavailable: return "straitUnavailable";
    case straitInternalError: return "straitInternalError";
    case straitInProgress: return "straitInProgress";
    default: return "";
  }
}

const char* result_string(int result) noexcept {
  switch (result) {
    case straitSuccess: return "straitSuccess: no error";
    case straitInvalidArgument:
      return "straitInvalidArgument: an argument was wrong (straitGetLastError says which)";
    case straitMismatch:
      return "straitMismatch: ranks called different operations (count, type, kind or order)";
    case straitTimeout: return "straitTimeout: an operation did not finish within its deadline";
    case straitPeerLost: return "straitPeerLost: a peer process died or its connection broke";
    case straitAborted: return "straitAborted: the communicator was aborted or destroyed";
    case straitIoError: return "straitIoError: a file or device operation failed";
    case straitUnavailable:
      return "straitUnavailable: the feature is not in this build or on this machine";
    case straitInternalError: return "straitInternalError: a bug in strait; please report it";
    case straitInProgress: return "straitInProgress: the operation has not finished yet";
    default: return "unknown straitResult_t: not a code strait returns";
  }
}

}  // namespace strait::capi
