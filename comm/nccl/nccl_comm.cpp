#include "comm/nccl/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/reduce.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;
using kernels::ReduceOp;

ErrorCode nccl_error_code(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return ErrorCode::InvalidArgument;
    case ncclRemoteError:
    case ncclSystemError: return ErrorCode::PeerLost;
    default: return ErrorCode::Internal;
  }
}

std::string_view nccl_hint(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return "check the buffers, count, dtype and that each rank has its own GPU";
    case ncclRemoteError:
    case ncclSystemError:
      return "a peer failed or the network broke: check the other ranks' logs (NCCL_DEBUG=WARN)";
    case ncclUnhandledCudaError: return "a CUDA call inside NCCL failed: see NCCL_DEBUG=WARN";
    default: return "rerun with NCCL_DEBUG=INFO and report it";
  }
}

ncclDataType_t to_nccl(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I8: return ncclInt8;
    case DType::U8: return ncclUint8;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  throw Error(ErrorCode::InvalidArgument, "NcclComm: unknown dtype");
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Band:
    case ReduceOp::Bor:
    case ReduceOp::Bxor:
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("NcclComm: NCCL has no {} reduction (bitwise ops are host-only in "
                              "strait); reduce host tensors, or use sum/min/max on the device",
                              kernels::reduce_op_name(op)));
  }
  throw Error(ErrorCode::InvalidArgument, "NcclComm: unknown reduce op");
}

// The NCCL op for a communicator of `size` ranks, after refusing Avg of integers (as
// kernels::scale does). With one rank, Avg goes as Sum, which gives the same values: NCCL before
// 2.29.7 leaves the last count % blocks elements of a one-rank Avg unwritten (NVIDIA/nccl#1950,
// seen here on an H200 with NCCL 2.28 by DeviceCollectives.AllreduceEveryDtypeOpAndCount).
ncclRedOp_t checked_op(ReduceOp op, DType dtype, int size, const std::string& what) {
  if (op == ReduceOp::Avg && !kernels::dtype_is_float(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm: {}: avg is defined for floating-point dtypes only", what));
  }
  if (op == ReduceOp::Avg && size == 1) return ncclSum;
  return to_nccl(op);
}

// The calling thread's Group nesting (NCCL's group state is per thread too) and the communicators
// called inside its outermost group, which Group::end waits for.
thread_local int t_group_depth = 0;
thread_local std::vector<NcclComm*> t_group_comms;

// Spin briefly (an enqueue usually completes in microseconds), then sleep so a long wait does not
// burn a core.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls_ < 1024 ? 50 : 1000));
    }
  }

 private:
  int polls_ = 0;
};

}  // namespace

NcclComm::Group::Group() {
  const ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    throw Error(nccl_error_code(r),
                fmt::format("NcclComm::Group: ncclGroupStart failed: {}", ncclGetErrorString(r)));
  }
  ++t_group_depth;
}

NcclComm::Group::~Group() {
  if (ended_) return;
  try {
    end();
  } catch (const std::exception& e) {
    spdlog::warn("NcclComm::Group: ending the group failed: {}", e.what());
  }
}

void NcclComm::Group::end() {
  if (ended_) return;
  ended_ = true;
  --t_group_depth;
  const ncclResult_t r = ncclGroupEnd();
  if (t_group_depth > 0) {  // an inner group: the outermost end launches and waits
    if (r != ncclSuccess && r != ncclInProgress) {
      throw Error(nccl_error_code(r),
                  fmt::format("NcclComm::Group: ncclGroupEnd failed: {}", ncclGetErrorString(r)));
    }
    return;
  }
  std::vector<NcclComm*> comms;
  comms.swap(t_group_comms);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string detail = comms.empty() ? "" : ncclGetLastError(nullptr);
    throw Error(nccl_error_code(r),
                fmt::format("NcclComm::Group: ncclGroupEnd of {} communicator(s) failed: {} ({}): "
                            "{}",
                            comms.size(), ncclGetErrorString(r), detail, nccl_hint(r)));
  }
  for (NcclComm* c : comms) {
    c->wait_ready("ncclGroupEnd (enqueue of the group)", Clock::now() + c->options_.timeout,
                  /*abort_on_timeout=*/false);
  }
}

NcclComm::NcclComm(Store& store, int rank, int world_size, int device, NcclCommOptions options)
    : rank_(rank), size_(world_size), device_(device), options_(std::move(options)) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm: rank {} of world size {} is out of range: ranks are 0..{}",
                            rank, world_size, world_size - 1));
  }
  if (options_.key.empty() || options_.timeout.count() < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm {}: the store key must be non-empty and the timeout "
                            "non-negative (got '{}', {} ms)",
                            who(), options_.key, options_.timeout.count()));
  }
  const auto deadline = Clock::now() + options_.timeout;

  // Check the device before waiting on peers: a missing GPU should fail now, not after a timeout.
  int devices = 0;
  kernels::cuda_check(cudaGetDeviceCount(&devices),
                      fmt::format("NcclComm {}: cudaGetDeviceCount", who()));
  if (device < 0 || device >= devices) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm {}: device {} does not exist: this process sees {} CUDA "
                            "device(s) (see CUDA_VISIBLE_DEVICES)",
                            who(), device, devices));
  }
  const kernels::DeviceGuard guard(device_);

  ncclUniqueId id{};
  if (rank_ == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      throw Error(nccl_error_code(r), fmt::format("NcclComm {}: ncclGetUniqueId failed: {}: {}",
                                                  who(), ncclGetErrorString(r), nccl_hint(r)));
    }
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&id);
    store.set(options_.key, Bytes(bytes, bytes + sizeof(id)));
  } else {
    Bytes value;
    try {
      value = store.get(options_.key, options_.timeout);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout,
                  fmt::format("NcclComm {}: rank 0 did not publish the NCCL unique id under '{}' "
                              "within {} ms: start rank 0, and give every rank the same store "
                              "and key ({})",
                              who(), options_.key, options_.timeout.count(), e.what()));
    }
    if (value.size() != sizeof(id)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("NcclComm {}: the value under '{}' has {} bytes, not the {} of an "
                              "NCCL unique id: another writer uses this key; pick a fresh one",
                              who(), options_.key, value.size(), sizeof(id)));
    }
    std::memcpy(&id, value.data(), sizeof(id));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
  {
    const std::lock_guard lock(mu_);
    comm_ = comm;
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
    abort();
    throw Error(nccl_error_code(r),
                fmt::format("NcclComm {}: ncclCommInitRankConfig failed: {} ({}): {}", who(),
                            ncclGetErrorString(r), detail, nccl_hint(r)));
  }
  if (!options_.wait_for_init) return;  // the first call waits for init instead
  try {
    wait_ready(fmt::format("ncclCommInitRankConfig (waiting for all {} ranks to join)", size_),
               deadline, /*abort_on_timeout=*/true);
  } catch (...) {
    abort();  // no destructor runs for a throwing constructor
    throw;
  }
}

NcclComm::~NcclComm() {
  const std::lock_guard lock(mu_);
  if (comm_ == nullptr) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  const auto deadline = Clock::now() + options_.timeout;
  // Polls until the communicator leaves ncclInProgress (an init or enqueue not yet done, then the
  // finalize itself) or the deadline passes.
  const auto settle = [&] {
    Backoff backoff;
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
           Clock::now() < deadline) {
      backoff.pause();
    }
    return state;
  };
  ncclResult_t r = settle();
  bool clean = false;
  if (r == ncclSuccess) {
    r = ncclCommFinalize(comm_);
    if (r == ncclSuccess || r == ncclInProgress) r = settle();
    clean = r == ncclSuccess;
  }
  if (clean) {
    // Once finalized, destroy only frees local resources; after a failure the handle is gone
    // either way (aborting it now could free it twice).
    r = ncclCommDestroy(comm_);
    if (r != ncclSuccess) {
      spdlog::warn("NcclComm {}: ncclCommDestroy failed: {}", who(), ncclGetErrorString(r));
    }
    comm_ = nullptr;
  } else {
    spdlog::warn("NcclComm {}: finalizing the communicator failed ({}); aborting it", who(),
                 ncclGetErrorString(r));
    abort_locked();
  }
  if (switched) static_cast<void>(cudaSetDevice(previous));
}

void NcclComm::check_rank(int r, const char* role, const std::string& what) const {
  if (r < 0 || r >= size_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm {}: {}: {} {} is not a rank of this communicator (0..{})",
                            who(), what, role, r, size_ - 1));
  }
}

void NcclComm::check_buffer(const void* p, std::size_t count, const char* name,
                            const std::string& what) const {
  if (count > 0 && p == nullptr) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm {}: {}: the {} buffer is null: pass device buffers", who(),
                            what, name));
  }
}

void NcclComm::enqueue(const std::string& what, const std::function<int(ncclComm*)>& call) {
  const kernels::DeviceGuard guard(device_);
  const auto deadline = Clock::now() + options_.timeout;
  // Non-blocking NCCL forbids a call while init or an earlier call is still in progress.
  wait_ready(what + " (waiting for the communicator to be ready)", deadline,
             /*abort_on_timeout=*/false);
  const bool grouped = t_group_depth > 0;
  ncclResult_t r = ncclSuccess;
  {
    const std::lock_guard lock(mu_);
    if (comm_ == nullptr) static_cast<void>(poll_locked(what));  // throws Aborted
    r = static_cast<ncclResult_t>(call(comm_));
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string detail = ncclGetLastError(comm_);
      throw Error(nccl_error_code(r),
                  fmt::format("NcclComm {}: {} failed: {} ({}): {}", who(), what,
                              ncclGetErrorString(r), detail, nccl_hint(r)));
    }
  }
  if (grouped) {
    if (std::find(t_group_comms.begin(), t_group_comms.end(), this) == t_group_comms.end()) {
      t_group_comms.push_back(this);
    }
  } else if (r == ncclInProgress) {
    // Non-blocking mode: the enqueue finishes in the background; NCCL forbids the next call until
    // the state is ncclSuccess.
    wait_ready(what + " (enqueue)", deadline, /*abort_on_timeout=*/false);
  }
}

namespace {

std::string describe_call(std::string_view name, std::size_t count, DType dtype) {
  return fmt::format("{} of {} {}", name, count, kernels::dtype_name(dtype));
}

std::string describe_call(std::string_view name, std::size_t count, DType dtype, ReduceOp op) {
  return fmt::format("{} of {} {} ({})", name, count, kernels::dtype_name(dtype),
                     kernels::reduce_op_name(op));
}

}  // namespace

void NcclComm::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                         kernels::CudaStream stream) {
  const std::string what = describe_call("ncclAllReduce", count, dtype, op);
  const ncclRedOp_t nccl_op = checked_op(op, dtype, size_, what);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(send, count, "send", what);
  check_buffer(recv, count, "recv", what);
  if (count == 0) return;  // every rank passes the same count, so all of them skip it alike
  enqueue(what, [&](ncclComm* c) {
    return static_cast<int>(ncclAllReduce(send, recv, count, t, nccl_op, c, stream));
  });
}

void NcclComm::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                              ReduceOp op, kernels::CudaStream stream) {
  const std::string what = describe_call("ncclReduceScatter", recv_count, dtype, op);
  const ncclRedOp_t nccl_op = checked_op(op, dtype, size_, what);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(send, recv_count, "send", what);
  check_buffer(recv, recv_count, "recv", what);
  if (recv_count == 0) return;
  enqueue(what, [&](ncclComm* c) {
    return static_cast<int>(ncclReduceScatter(send, recv, recv_count, t, nccl_op, c, stream));
  });
}

void NcclComm::allgather(const void* send, void* recv, std::size_t send_count, DType dtype,
                         kernels::CudaStream stream) {
  const std::string what = describe_call("ncclAllGather", send_count, dtype);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(send, send_count, "send", what);
  check_buffer(recv, send_count, "recv", what);
  if (send_count == 0) return;
  enqueue(what, [&](ncclComm* c) {
    return static_cast<int>(ncclAllGather(send, recv, send_count, t, c, stream));
  });
}

void NcclComm::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                         kernels::CudaStream stream) {
  const std::string what =
      describe_call("ncclBroadcast", count, dtype) + fmt::format(" from {}", root);
  check_rank(root, "root", what);
  const ncclDataType_t t = to_nccl(dtype);
  if (rank_ == root) check_buffer(send, count, "send", what);
  check_buffer(recv, count, "recv", what);
  if (count == 0) return;
  enqueue(what, [&](ncclComm* c) {
    return static_cast<int>(ncclBroadcast(send, recv, count, t, root, c, stream));
  });
}

void NcclComm::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                      int root, kernels::CudaStream stream) {
  const std::string what =
      describe_call("ncclReduce", count, dtype, op) + fmt::format(" to {}", root);
  check_rank(root, "root", what);
  const ncclRedOp_t nccl_op = checked_op(op, dtype, size_, what);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(send, count, "send", what);
  if (rank_ == root) check_buffer(recv, count, "recv", what);
  if (count == 0) return;
  enqueue(what, [&](ncclComm* c) {
    return static_cast<int>(ncclReduce(send, recv, count, t, nccl_op, root, c, stream));
  });
}

void NcclComm::gather(const void* send, void* recv, std::size_t count, DType dtype, int root,
                      kernels::CudaStream stream) {
  const std::string what = describe_call("gather (grouped ncclSend/ncclRecv)", count, dtype) +
                           fmt::format(" to {}", root);
  check_rank(root, "root", what);
  check_buffer(send, count, "send", what);
  if (rank_ == root) check_buffer(recv, count, "recv", what);
  if (count == 0) return;
  const std::size_t block = count * kernels::dtype_size(dtype);
  Group group;
  this->send(send, count, dtype, root, stream);
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) {
      this->recv(static_cast<std::byte*>(recv) + static_cast<std::size_t>(r) * block, count, dtype,
                 r, stream);
    }
  }
  group.end();
}

void NcclComm::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root,
                       kernels::CudaStream stream) {
  const std::string what = describe_call("scatter (grouped ncclSend/ncclRecv)", count, dtype) +
                           fmt::format(" from {}", root);
  check_rank(root, "root", what);
  if (rank_ == root) check_buffer(send, count, "send", what);
  check_buffer(recv, count, "recv", what);
  if (count == 0) return;
  const std::size_t block = count * kernels::dtype_size(dtype);
  Group group;
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) {
      this->send(static_cast<const std::byte*>(send) + static_cast<std::size_t>(r) * block, count,
                 dtype, r, stream);
    }
  }
  this->recv(recv, count, dtype, root, stream);
  group.end();
}

void NcclComm::alltoall(const void* send, void* recv, std::size_t count, DType dtype,
                        kernels::CudaStream stream) {
  const std::string what = describe_call("alltoall (grouped ncclSend/ncclRecv)", count, dtype);
  check_buffer(send, count, "send", what);
  check_buffer(recv, count, "recv", what);
  if (count == 0) return;
  if (send == recv) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("NcclComm {}: {}: send and recv are the same buffer: alltoall is not "
                            "in place",
                            who(), what));
  }
  const std::size_t block = count * kernels::dtype_size(dtype);
  Group group;
  for (int r = 0; r < size_; ++r) {
    const std::size_t offset = static_cast<std::size_t>(r) * block;
    this->send(static_cast<const std::byte*>(send) + offset, count, dtype, r, stream);
    this->recv(static_cast<std::byte*>(recv) + offset, count, dtype, r, stream);
  }
  group.end();
}

void NcclComm::send(const void* buf, std::size_t count, DType dtype, int peer,
                    kernels::CudaStream stream) {
  const std::string what = describe_call("ncclSend", count, dtype) + fmt::format(" to {}", peer);
  check_rank(peer, "peer", what);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(buf, count, "send", what);
  if (count == 0) return;
  enqueue(what,
          [&](ncclComm* c) { return static_cast<int>(ncclSend(buf, count, t, peer, c, stream)); });
}

void NcclComm::recv(void* buf, std::size_t count, DType dtype, int peer,
                    kernels::CudaStream stream) {
  const std::string what = describe_call("ncclRecv", count, dtype) + fmt::format(" from {}", peer);
  check_rank(peer, "peer", what);
  const ncclDataType_t t = to_nccl(dtype);
  check_buffer(buf, count, "recv", what);
  if (count == 0) return;
  enqueue(what,
          [&](ncclComm* c) { return static_cast<int>(ncclRecv(buf, count, t, peer, c, stream)); });
}

bool NcclComm::ready() {
  const std::lock_guard lock(mu_);
  return poll_locked("while its work ran") == ncclSuccess;
}

void NcclComm::synchronize(kernels::CudaStream stream) {
  synchronize(stream, options_.timeout);
}

void NcclComm::synchronize(kernels::CudaStream stream, std::chrono::milliseconds timeout) {
  const std::string what = "synchronize";
  const auto deadline = Clock::now() + timeout;
  const kernels::DeviceGuard guard(device_);
  Backoff backoff;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    {
      const std::lock_guard lock(mu_);
      static_cast<void>(poll_locked(what));
    }
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      kernels::cuda_check(q, fmt::format("NcclComm {}: {}: cudaStreamQuery", who(), what));
    }
    if (Clock::now() >= deadline) {
      throw Error(ErrorCode::Timeout,
                  fmt::format("NcclComm {}: {}: the stream's work has not finished after {} ms: a "
                              "peer may be slow or stuck; wait again, or abort() the communicator",
                              who(), what, timeout.count()));
    }
    backoff.pause();
  }
}

void NcclComm::abort() noexcept {
  const std::lock_guard lock(mu_);
  abort_locked();
}

bool NcclComm::aborted() const {
  const std::lock_guard lock(mu_);
  return comm_ == nullptr;
}

std::string NcclComm::who() const {
  return fmt::format("rank {}/{} (device {})", rank_, size_, device_);
}

void NcclComm::wait_ready(const std::string& what, Clock::time_point deadline,
                          bool abort_on_timeout) {
  Backoff backoff;
  for (;;) {
    {
      const std::lock_guard lock(mu_);
      if (poll_locked(what) == ncclSuccess) return;
      if (Clock::now() >= deadline) {
        if (abort_on_timeout) abort_locked();
        throw Error(
            ErrorCode::Timeout,
            fmt::format("NcclComm {}: {} did not complete in time{}: check that every "
                        "rank started and can reach the others (NCCL_DEBUG=WARN)",
                        who(), what, abort_on_timeout ? "; the communicator was aborted" : ""));
      }
    }
    backoff.pause();
  }
}

int NcclComm::poll_locked(const std::string& what) {
  if (comm_ == nullptr) {
    throw Error(
        ErrorCode::Aborted,
        fmt::format("NcclComm {}: {}: the communicator was aborted: build a new one", who(), what));
  }
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  const ncclResult_t result = r != ncclSuccess ? r : state;
  if (result == ncclSuccess || result == ncclInProgress) return result;
  const std::string detail = ncclGetLastError(comm_);
  abort_locked();  // NCCL: after an asynchronous error the communicator can only be aborted
  throw Error(nccl_error_code(result),
              fmt::format("NcclComm {}: {}: asynchronous NCCL error {} ({}); the communicator "
                          "was aborted: {}",
                          who(), what, ncclGetErrorString(result), detail, nccl_hint(result)));
}

void NcclComm::abort_locked() noexcept {
  if (comm_ == nullptr) return;
  static_cast<void>(ncclCommAbort(comm_));
  comm_ = nullptr;
}

}  // namespace strait::comm
