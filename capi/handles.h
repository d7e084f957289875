// The C API's handles: what a straitComm_t and a straitRequest_t stand for, and the registry of
// the live ones.
//
// A handle is not a pointer to its object but an id the registry hands out (never reused), so a
// destroyed, foreign or mistyped handle is found missing and reported, never dereferenced: a C
// caller cannot crash the library through a stale handle, even after its memory is reused. The
// registry holds the objects by shared_ptr, so a handle destroyed while another thread is still
// inside a call on it lives until that call returns.
// Thread-safety: every member is safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "capi/strait.h"
#include "comm/communicator.h"
#include "comm/symmetric_memory.h"
#include "comm/work.h"

namespace strait::capi {

// One communicator, the last error of a call on it (or on one of its requests), and the
// symmetric buffers straitMemAlloc gave on it, by address. The buffers are members after the
// communicator, so they are freed first when the handle goes (straitCommDestroy).
class CommHandle {
 public:
  explicit CommHandle(std::unique_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {}

  [[nodiscard]] comm::Communicator& comm() const noexcept { return *comm_; }

  void set_last_error(const std::string& message);
  [[nodiscard]] std::string last_error() const;

  // Keeps `buffer` until free_buffer(its data()) or the handle's end; returns its data().
  void* keep_buffer(comm::SymmetricBuffer buffer);
  // Frees the buffer that starts at `p`. InvalidArgument, naming `function`, when none does
  // (saying whether `p` is inside one of this communicator's buffers).
  void free_buffer(void* p, const char* function);

 private:
  std::unique_ptr<comm::Communicator> comm_;
  mutable std::mutex error_mutex_;
  std::string last_error_;
  mutable std::mutex buffers_mutex_;
  std::map<std::uintptr_t, comm::SymmetricBuffer> buffers_;
};

// One non-blocking operation. Its error message, once the operation has failed, is kept for the
// request's lifetime (straitRequestGetError returns a pointer into it).
class RequestHandle {
 public:
  RequestHandle(comm::Work work, std::weak_ptr<CommHandle> comm,
                std::shared_ptr<const int> source = nullptr)
      : work_(std::move(work)), comm_(std::move(comm)), source_(std::move(source)) {}

  [[nodiscard]] const comm::Work& work() const noexcept { return work_; }
  [[nodiscard]] std::shared_ptr<CommHandle> comm() const { return comm_.lock(); }
  // The error's message, recorded the first time the finished operation is found failed; nullptr
  // while it runs or when it succeeded. The string never changes once set.
  const std::string* error_message();
  // A receive from any source: where its operation writes the sender's rank; else null.
  [[nodiscard]] const std::shared_ptr<const int>& source() const noexcept { return source_; }

 private:
  comm::Work work_;
  std::weak_ptr<CommHandle> comm_;
  std::shared_ptr<const int> source_;
  std::mutex mutex_;
  std::unique_ptr<std::string> error_;
};

class Registry {
 public:
  static Registry& instance();

  straitComm_t add(std::shared_ptr<CommHandle> comm);
  straitRequest_t add(std::shared_ptr<RequestHandle> request);
  // The live object of a handle. InvalidArgument, naming `function` and `argument`, for NULL, a
  // destroyed or unknown handle, or a handle of the other kind.
  [[nodiscard]] std::shared_ptr<CommHandle> comm(straitComm_t handle, const char* function,
                                                 const char* argument = "comm") const;
  [[nodiscard]] std::shared_ptr<RequestHandle> request(straitRequest_t handle,
                                                       const char* function) const;
  // As above, and the handle is no longer live.
  std::shared_ptr<CommHandle> remove(straitComm_t handle, const char* function);
  std::shared_ptr<RequestHandle> remove(straitRequest_t handle, const char* function);
  // Null when the handle is not a live communicator; never throws.
  [[nodiscard]] std::shared_ptr<CommHandle> find(straitComm_t handle) const noexcept;

 private:
  [[noreturn]] void not_live(std::uintptr_t id, const char* function, const char* argument,
                             bool communicator) const;

  mutable std::mutex mutex_;
  std::uintptr_t next_ = 0;
  std::unordered_map<std::uintptr_t, std::shared_ptr<CommHandle>> comms_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<RequestHandle>> requests_;
};

}  // namespace strait::capi
