#include "capi/handles.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strait::capi {

namespace {

// Ids step by 16 from 16: never 0 (NULL), never reused, and unlike small integers or real heap
// addresses they stand out in a debugger.
constexpr std::uintptr_t kStep = 16;

std::uintptr_t id_of(const void* handle) noexcept {
  return reinterpret_cast<std::uintptr_t>(handle);
}

template <class Handle>
Handle handle_of(std::uintptr_t id) noexcept {
  return reinterpret_cast<Handle>(id);  // NOLINT(performance-no-int-to-ptr): an id, never read
}

}  // namespace

void CommHandle::set_last_error(const std::string& message) {
  const std::lock_guard lock(error_mutex_);
  last_error_ = message;
}

std::string CommHandle::last_error() const {
  const std::lock_guard lock(error_mutex_);
  return last_error_;
}

void* CommHandle::keep_buffer(comm::SymmetricBuffer buffer) {
  void* p = buffer.data();
  const std::lock_guard lock(buffers_mutex_);
  buffers_.emplace(reinterpret_cast<std::uintptr_t>(p), std::move(buffer));
  return p;
}

void CommHandle::free_buffer(void* p, const char* function) {
  if (p == nullptr) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: ptr is NULL; pass a pointer straitMemAlloc gave on this "
                            "communicator",
                            function));
  }
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  comm::SymmetricBuffer freed;  // unmapped once the lock is released
  {
    const std::lock_guard lock(buffers_mutex_);
    auto it = buffers_.upper_bound(a);
    if (it != buffers_.begin()) {
      --it;
      if (it->first == a) {
        freed = std::move(it->second);
        buffers_.erase(it);
        return;
      }
      if (a < it->first + it->second.size()) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: ptr ({:#x}) is {} bytes into a {}-byte straitMemAlloc "
                                "buffer of this communicator; pass its start ({:#x})",
                                function, a, a - it->first, it->second.size(), it->first));
      }
    }
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{}: ptr ({:#x}) is not a live straitMemAlloc buffer of this "
                          "communicator: freed already, allocated on another communicator, or "
                          "not from straitMemAlloc; free each buffer once, with the "
                          "communicator that allocated it",
                          function, a));
}

const std::string* RequestHandle::error_message() {
  const std::lock_guard lock(mutex_);
  if (!error_ && work_.test()) {
    if (auto e = work_.error()) error_ = std::make_unique<std::string>(e->what());
  }
  return error_.get();
}

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

straitComm_t Registry::add(std::shared_ptr<CommHandle> comm) {
  const std::lock_guard lock(mutex_);
  next_ += kStep;
  comms_.emplace(next_, std::move(comm));
  return handle_of<straitComm_t>(next_);
}

straitRequest_t Registry::add(std::shared_ptr<RequestHandle> request) {
  const std::lock_guard lock(mutex_);
  next_ += kStep;
  requests_.emplace(next_, std::move(request));
  return handle_of<straitRequest_t>(next_);
}

void Registry::not_live(std::uintptr_t id, const char* function, const char* argument,
                        bool communicator) const {
  const char* kind = communicator ? "communicator" : "request";
  if (id == 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} is NULL; pass a {} that a strait call gave you", function,
                            argument, kind));
  }
  if (communicator ? requests_.contains(id) : comms_.contains(id)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} ({:#x}) is a {}, not a {}", function, argument, id,
                            communicator ? "request" : "communicator", kind));
  }
  const bool was_ours = id % kStep == 0 && id <= next_;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{}: {} ({:#x}) is not a live {}: {}", function, argument, id, kind,
                          was_ours ? "it was destroyed or freed already"
                                   : "strait never gave out this handle (uninitialised, or "
                                     "overwritten?)"));
}

std::shared_ptr<CommHandle> Registry::comm(straitComm_t handle, const char* function,
                                           const char* argument) const {
  const std::lock_guard lock(mutex_);
  const auto it = comms_.find(id_of(handle));
  if (it == comms_.end()) not_live(id_of(handle), function, argument, true);
  return it->second;
}

std::shared_ptr<RequestHandle> Registry::request(straitRequest_t handle,
                                                 const char* function) const {
  const std::lock_guard lock(mutex_);
  const auto it = requests_.find(id_of(handle));
  if (it == requests_.end()) not_live(id_of(handle), function, "request", false);
  return it->second;
}

std::shared_ptr<CommHandle> Registry::remove(straitComm_t handle, const char* function) {
  const std::lock_guard lock(mutex_);
  const auto it = comms_.find(id_of(handle));
  if (it == comms_.end()) not_live(id_of(handle), function, "comm", true);
  auto comm = std::move(it->second);
  comms_.erase(it);
  return comm;
}

std::shared_ptr<RequestHandle> Registry::remove(straitRequest_t handle, const char* function) {
  const std::lock_guard lock(mutex_);
  const auto it = requests_.find(id_of(handle));
  if (it == requests_.end()) not_live(id_of(handle), function, "request", false);
  auto request = std::move(it->second);
  requests_.erase(it);
  return request;
}

std::shared_ptr<CommHandle> Registry::find(straitComm_t handle) const noexcept {
  const std::lock_guard lock(mutex_);
  const auto it = comms_.find(id_of(handle));
  return it == comms_.end() ? nullptr : it->second;
}

}  // namespace strait::capi
