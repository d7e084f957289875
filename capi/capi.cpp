// The C API's library, communicator and request functions (capi/strait.h); the
// collectives are in collectives.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "capi/arguments.h"
#include "capi/callback_store.h"
#include "capi/config.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "capi/results.h"
#include "capi/strait.h"
#include "comm/bootstrap/launch_env.h"
#include "comm/communicator.h"
#include "core/error.h"

// The header's version is the project's (CMake passes project()'s version). Equal sides are the
// point, hence the NOLINT.
static_assert(STRAIT_VERSION_CODE ==  // NOLINT(misc-redundant-expression)
                  STRAIT_VERSION(STRAIT_PROJECT_VERSION_MAJOR, STRAIT_PROJECT_VERSION_MINOR,
                                 STRAIT_PROJECT_VERSION_PATCH),
              "capi/strait.h's STRAIT_MAJOR/MINOR/PATCH must match project(strait VERSION)");

namespace strait::capi {

namespace {

thread_local std::string t_last_error;
thread_local std::string t_returned;  // what straitGetLastError last returned on this thread

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

void check_world(int nranks, int rank, const char* function) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    invalid(
        fmt::format("{}: rank {} of {} ranks is out of range: nranks >= 1 and 0 <= rank < "
                    "nranks",
                    function, rank, nranks));
  }
}

// Creation's common end: the handle of a new world communicator.
straitResult_t publish(std::unique_ptr<comm::Communicator> communicator, straitComm_t* out) {
  *out = Registry::instance().add(std::make_shared<CommHandle>(std::move(communicator)));
  return straitSuccess;
}

}  // namespace

straitResult_t record_failure(const char* function, CommHandle* comm, straitResult_t result,
                              std::string_view message) noexcept {
  try {
    t_last_error = fmt::format("{}: {}", function, message);
    if (comm != nullptr) comm->set_last_error(t_last_error);
  } catch (...) {  // out of memory for the message: the code still says what happened
    t_last_error.clear();
  }
  return result;
}

const std::string& thread_last_error() noexcept {
  return t_last_error;
}

// The accessors' one shape: the communicator looked up, the out pointer checked, the value read.
template <class T, class Read>
straitResult_t read_comm(const char* function, straitComm_t comm, T* out, const char* name,
                         Read&& read) noexcept {
  return guard(function, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, function);
    require_out(out, function, name);
    *out = read(std::as_const(handle->comm()));
    return straitSuccess;
  });
}

}  // namespace strait::capi

using strait::capi::CallbackStore;
using strait::capi::CommHandle;
using strait::capi::guard;
using strait::capi::Registry;
using strait::capi::require_out;
using strait::comm::Communicator;

extern "C" {

straitResult_t straitGetVersion(int* version) {
  return guard("straitGetVersion", [&](std::shared_ptr<CommHandle>& /*comm*/) {
    require_out(version, "straitGetVersion", "version");
    *version = STRAIT_VERSION_CODE;
    return straitSuccess;
  });
}

const char* straitGetErrorString(straitResult_t result) {
  return strait::capi::result_string(result);
}

const char* straitGetLastError(straitComm_t comm) {
  using strait::capi::t_returned;
  try {
    if (comm == nullptr) {
      t_returned = strait::capi::thread_last_error();
    } else if (auto handle = Registry::instance().find(comm)) {
      t_returned = handle->last_error();
    } else {
      try {
        (void)Registry::instance().comm(comm, "straitGetLastError");
      } catch (const strait::Error& e) {
        t_returned = fmt::format("straitGetLastError: {}", e.what());
      }
    }
  } catch (...) {
    t_returned.clear();
  }
  return t_returned.c_str();
}

straitResult_t straitCommInitFromEnv(straitComm_t* comm, const straitConfig_t* config) {
  constexpr const char* kFunction = "straitCommInitFromEnv";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*comm*/) {
    require_out(comm, kFunction, "comm");
    *comm = nullptr;
    return strait::capi::publish(
        Communicator::from_env(strait::capi::options_from(config, kFunction)), comm);
  });
}

straitResult_t straitCommInitRank(straitComm_t* comm, int nranks, int rank, const char* address,
                                  int port, const straitConfig_t* config) {
  constexpr const char* kFunction = "straitCommInitRank";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*comm*/) {
    require_out(comm, kFunction, "comm");
    *comm = nullptr;
    strait::capi::check_world(nranks, rank, kFunction);
    if (address == nullptr || *address == '\0') {
      strait::capi::invalid(fmt::format(
          "{}: address is {}; pass the host name or IP address where rank 0 serves the store",
          kFunction, address == nullptr ? "NULL" : "empty"));
    }
    if (port < 1 || port > 65535) {
      strait::capi::invalid(fmt::format("{}: port is {}; it must be 1 .. 65535", kFunction, port));
    }
    const strait::comm::CommOptions options = strait::capi::options_from(config, kFunction);
    const strait::comm::LaunchEnv env{.rank = rank,
                                      .world_size = nranks,
                                      .local_rank = rank,
                                      .local_world_size = nranks,
                                      .master_addr = address,
                                      .master_port = static_cast<std::uint16_t>(port)};
    std::shared_ptr<strait::comm::Store> store =
        strait::comm::make_launch_store(env, options.timeout, options.timeout, options.secret_file);
    return strait::capi::publish(Communicator::create(std::move(store), rank, nranks, options),
                                 comm);
  });
}

straitResult_t straitCommInitStore(straitComm_t* comm, int nranks, int rank,
                                   const straitStore_t* store, const straitConfig_t* config) {
  constexpr const char* kFunction = "straitCommInitStore";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*comm*/) {
    require_out(comm, kFunction, "comm");
    *comm = nullptr;
    strait::capi::check_world(nranks, rank, kFunction);
    if (store == nullptr) strait::capi::invalid(fmt::format("{}: store is NULL", kFunction));
    auto callbacks = std::make_shared<CallbackStore>(*store, kFunction);
    return strait::capi::publish(
        Communicator::create(std::move(callbacks), rank, nranks,
                             strait::capi::options_from(config, kFunction)),
        comm);
  });
}

straitResult_t straitCommSplit(straitComm_t comm, int color, int key, straitComm_t* newcomm) {
  constexpr const char* kFunction = "straitCommSplit";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    require_out(newcomm, kFunction, "newcomm");
    *newcomm = nullptr;
    auto child = handle->comm().split(color, key);
    if (child) *newcomm = Registry::instance().add(std::make_shared<CommHandle>(std::move(child)));
    return straitSuccess;
  });
}

straitResult_t straitCommAbort(straitComm_t comm, const char* reason) {
  constexpr const char* kFunction = "straitCommAbort";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    handle->comm().abort(reason != nullptr ? reason : "straitCommAbort was called");
    return straitSuccess;
  });
}

straitResult_t straitCommDestroy(straitComm_t comm) {
  constexpr const char* kFunction = "straitCommDestroy";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*handle*/) {
    // The last reference (this one, unless another thread is inside a call on it) destroys the
    // Communicator, which fails its pending operations with Aborted.
    (void)Registry::instance().remove(comm, kFunction);
    return straitSuccess;
  });
}

straitResult_t straitCommCount(straitComm_t comm, int* count) {
  return strait::capi::read_comm("straitCommCount", comm, count, "count",
                                 [](const Communicator& c) { return c.size(); });
}

straitResult_t straitCommUserRank(straitComm_t comm, int* rank) {
  return strait::capi::read_comm("straitCommUserRank", comm, rank, "rank",
                                 [](const Communicator& c) { return c.rank(); });
}

straitResult_t straitCommSetTimeout(straitComm_t comm, int64_t timeoutMs) {
  constexpr const char* kFunction = "straitCommSetTimeout";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    handle->comm().set_timeout(
        std::chrono::milliseconds(strait::capi::to_timeout_ms(timeoutMs, kFunction, "timeoutMs")));
    return straitSuccess;
  });
}

straitResult_t straitCommGetTimeout(straitComm_t comm, int64_t* timeoutMs) {
  return strait::capi::read_comm("straitCommGetTimeout", comm, timeoutMs, "timeoutMs",
                                 [](const Communicator& c) { return c.timeout().count(); });
}

straitResult_t straitCommGetStats(straitComm_t comm, straitStats_t* stats) {
  constexpr const char* kFunction = "straitCommGetStats";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    require_out(stats, kFunction, "stats");
    constexpr std::size_t kFirst = offsetof(straitStats_t, alltoallBytes) + sizeof(uint64_t);
    if (stats->size < kFirst || stats->size > sizeof(straitStats_t)) {
      strait::capi::invalid(fmt::format(
          "{}: stats->size is {}; set it up with STRAIT_STATS_INITIALIZER ({} bytes in this "
          "version)",
          kFunction, stats->size, sizeof(straitStats_t)));
    }
    const strait::comm::CommStats s = handle->comm().stats();
    straitStats_t out = STRAIT_STATS_INITIALIZER;
    out.size = stats->size;
    out.allreduceBytes = s.allreduce_bytes;
    out.broadcastBytes = s.broadcast_bytes;
    out.allgatherBytes = s.allgather_bytes;
    out.sendBytes = s.send_bytes;
    out.reduceScatterBytes = s.reduce_scatter_bytes;
    out.reduceBytes = s.reduce_bytes;
    out.gatherBytes = s.gather_bytes;
    out.scatterBytes = s.scatter_bytes;
    out.alltoallBytes = s.alltoall_bytes;
    out.symmetricBytes = s.symmetric_bytes;
    std::memcpy(stats, &out, stats->size);
    return straitSuccess;
  });
}

straitResult_t straitMemAlloc(straitComm_t comm, size_t size, void** ptr) {
  constexpr const char* kFunction = "straitMemAlloc";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    require_out(ptr, kFunction, "ptr");
    *ptr = nullptr;
    *ptr = handle->keep_buffer(handle->comm().alloc(size));
    return straitSuccess;
  });
}

straitResult_t straitMemFree(straitComm_t comm, void* ptr) {
  constexpr const char* kFunction = "straitMemFree";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    handle->free_buffer(ptr, kFunction);
    return straitSuccess;
  });
}

straitResult_t straitTest(straitRequest_t request) {
  constexpr const char* kFunction = "straitTest";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    const auto r = Registry::instance().request(request, kFunction);
    if (!r->work().test()) return straitInProgress;
    if (r->error_message() != nullptr) {
      handle = r->comm();
      throw *r->work().error();
    }
    return straitSuccess;
  });
}

straitResult_t straitWait(straitRequest_t request, int64_t timeoutMs) {
  constexpr const char* kFunction = "straitWait";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    const auto r = Registry::instance().request(request, kFunction);
    handle = r->comm();  // where a failure is recorded (null once the communicator is destroyed)
    if (timeoutMs == STRAIT_WAIT_DEADLINE) {
      r->work().wait();
    } else if (timeoutMs >= 0) {
      r->work().wait(std::chrono::milliseconds(timeoutMs));
    } else {
      strait::capi::invalid(
          fmt::format("{}: timeoutMs is {}; pass 0 or more milliseconds, or "
                      "STRAIT_WAIT_DEADLINE (-1)",
                      kFunction, timeoutMs));
    }
    return straitSuccess;
  });
}

const char* straitRequestGetError(straitRequest_t request) {
  using strait::capi::t_returned;
  try {
    const auto r = Registry::instance().request(request, "straitRequestGetError");
    const std::string* error = r->error_message();
    // The request (and its message) lives in the registry until straitRequestFree.
    return error == nullptr ? "" : error->c_str();
  } catch (const strait::Error& e) {
    try {
      t_returned = e.what();
      return t_returned.c_str();
    } catch (...) {
      return "straitRequestGetError: not a live request";
    }
  } catch (...) {
    return "";
  }
}

straitResult_t straitRequestGetSource(straitRequest_t request, int* source) {
  constexpr const char* kFunction = "straitRequestGetSource";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*handle*/) {
    require_out(source, kFunction, "source");
    const auto r = Registry::instance().request(request, kFunction);
    if (r->source() == nullptr) {
      strait::capi::invalid(
          fmt::format("{}: the request is not a receive from any source "
                      "(straitRecvAnyAsync)",
                      kFunction));
    }
    if (!r->work().test()) return straitInProgress;
    *source = *r->source();
    return straitSuccess;
  });
}

straitResult_t straitRequestOnComplete(straitRequest_t request, straitCompletionFn_t fn,
                                       void* user) {
  constexpr const char* kFunction = "straitRequestOnComplete";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*handle*/) {
    const auto r = Registry::instance().request(request, kFunction);
    if (fn == nullptr) {
      strait::capi::invalid(fmt::format("{}: fn is NULL; pass the function to call", kFunction));
    }
    r->work().on_complete([fn, user](const std::optional<strait::Error>& error) {
      fn(user, error ? strait::capi::to_result(error->code()) : straitSuccess);
    });
    return straitSuccess;
  });
}

straitResult_t straitCommGetSequenceNumber(straitComm_t comm, uint64_t* sequence) {
  constexpr const char* kFunction = "straitCommGetSequenceNumber";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm, kFunction);
    require_out(sequence, kFunction, "sequence");
    *sequence = handle->comm().sequence_number();
    return straitSuccess;
  });
}

straitResult_t straitRequestFree(straitRequest_t request) {
  constexpr const char* kFunction = "straitRequestFree";
  return guard(kFunction, [&](std::shared_ptr<CommHandle>& /*handle*/) {
    (void)Registry::instance().remove(request, kFunction);
    return straitSuccess;
  });
}

}  // extern "C"
