// The boundary of every C entry point: no exception crosses it, and each failure becomes a
// straitResult_t whose message straitGetLastError returns.
//
// guard(function, body) runs body(comm), where body sets `comm` once it has looked its
// communicator up, so that a failure is recorded on it as well as on the calling thread. The
// message is "<function>: <Error::what()>": the C function, the error code's name and strait's
// message (operation, sequence number, ranks). std::bad_alloc and other exceptions become
// straitInternalError saying what was thrown.
// Thread-safety: the thread's last error is thread_local; the communicator's is locked.
#pragma once

#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "capi/handles.h"
#include "capi/results.h"
#include "capi/strait.h"
#include "core/error.h"

namespace strait::capi {

// Records a failure of `function` on this thread and on `comm` (when not null); returns `result`.
straitResult_t record_failure(const char* function, CommHandle* comm, straitResult_t result,
                              std::string_view message) noexcept;
// This thread's last failure message.
[[nodiscard]] const std::string& thread_last_error() noexcept;

template <class Body>
straitResult_t guard(const char* function, Body&& body) noexcept {
  std::shared_ptr<CommHandle> comm;
  try {
    return body(comm);
  } catch (const Error& e) {
    return record_failure(function, comm.get(), to_result(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return record_failure(function, comm.get(), straitInternalError,
                          "Internal: out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return record_failure(function, comm.get(), straitInternalError,
                          std::string("Internal: unexpected exception: ") + e.what());
  } catch (...) {
    return record_failure(function, comm.get(), straitInternalError,
                          "Internal: unexpected exception of an unknown type");
  }
}

}  // namespace strait::capi
