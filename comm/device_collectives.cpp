#include "comm/device_collectives.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <utility>

#include "comm/collective_describe.h"
#include "comm/nccl/nccl_comm.h"
#include "core/error.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_guard.h"

namespace strait::comm {
namespace {

using Kind = CollectiveArgs::Kind;

struct EventDeleter {
  void operator()(CUevent_st* event) const noexcept { static_cast<void>(cudaEventDestroy(event)); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

// An NCCL call enqueued on a stream, followed there by `event`: finished when the event is.
class NcclOp final : public Op {
 public:
  NcclOp(std::shared_ptr<NcclComm> nccl, Event event, kernels::CudaStream stream, std::string what)
      : nccl_(std::move(nccl)), event_(std::move(event)), stream_(stream), what_(std::move(what)) {}
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;
  // Destroyed unfinished (refused by a broken communicator, or the engine is going away): the GPU
  // may still run the call, on buffers its caller is about to free. Stop it.
  ~NcclOp() override {
    if (!done_) nccl_->abort();
  }

  bool advance(Transport& /*transport*/) override {
    if (done_) return true;
    const kernels::DeviceGuard guard(nccl_->device());
    const cudaError_t q = cudaEventQuery(event_.get());
    if (q == cudaSuccess) {
      done_ = true;
      return true;
    }
    if (q != cudaErrorNotReady) {
      nccl_->abort();
      kernels::cuda_check(q, fmt::format("cudaEventQuery after {}", what_));
    }
    static_cast<void>(nccl_->ready());  // throws, after aborting, on an asynchronous NCCL error
    return false;
  }

  void cancel(Transport& /*transport*/) override { nccl_->abort(); }

  [[nodiscard]] std::string waiting_for() const override {
    return fmt::format(
        "the GPU to finish {} (stream {}); NCCL waits for every rank of the "
        "communicator",
        what_, static_cast<const void*>(stream_));
  }

  [[nodiscard]] bool needs_polling() const noexcept override { return true; }

 private:
  std::shared_ptr<NcclComm> nccl_;
  Event event_;
  kernels::CudaStream stream_;
  std::string what_;
  bool done_ = false;
};

// An operation that failed while it was being enqueued: it fails as soon as the engine runs it, so
// the error reaches the caller through Work and breaks the communicator like any failure.
class FailedOp final : public Op {
 public:
  explicit FailedOp(const Error& error) : error_(std::make_exception_ptr(error)) {}
  bool advance(Transport& /*transport*/) override { std::rethrow_exception(error_); }
  void cancel(Transport& /*transport*/) override {}
  [[nodiscard]] std::string waiting_for() const override {
    return "nothing: it failed while being enqueued";
  }

 private:
  std::exception_ptr error_;
};

void issue(NcclComm& nccl, const CollectiveArgs& c, kernels::CudaStream stream) {
  switch (c.kind) {
    case Kind::Send: nccl.send(c.send, c.count, c.dtype, c.root, stream); return;
    case Kind::Recv: nccl.recv(c.recv, c.count, c.dtype, c.root, stream); return;
    case Kind::Broadcast: nccl.broadcast(c.recv, c.recv, c.count, c.dtype, c.root, stream); return;
    case Kind::Allreduce: nccl.allreduce(c.send, c.recv, c.count, c.dtype, c.op, stream); return;
    case Kind::Allgather: nccl.allgather(c.send, c.recv, c.count, c.dtype, stream); return;
    case Kind::ReduceScatter:
      nccl.reduce_scatter(c.send, c.recv, c.count, c.dtype, c.op, stream);
      return;
    case Kind::Reduce: nccl.reduce(c.send, c.recv, c.count, c.dtype, c.op, c.root, stream); return;
    case Kind::Gather: nccl.gather(c.send, c.recv, c.count, c.dtype, c.root, stream); return;
    case Kind::Scatter: nccl.scatter(c.send, c.recv, c.count, c.dtype, c.root, stream); return;
    case Kind::Alltoall: nccl.alltoall(c.send, c.recv, c.count, c.dtype, stream); return;
    default: break;  // host-only kinds: memory_of refuses device buffers for them
  }
  throw Error(ErrorCode::InvalidArgument, "device operation: unknown kind");
}

}  // namespace

struct DeviceComm::Impl {
  std::shared_ptr<Store> store;
  std::string key;
  int rank = 0;
  int size = 1;
  std::atomic<kernels::CudaStream> stream{nullptr};
  std::mutex issue_mutex;  // one thread at a time creates the communicator and issues calls
  std::mutex nccl_mutex;   // guards nccl and aborted: abort() reads them while a call is issued
  std::shared_ptr<NcclComm> nccl;
  bool aborted = false;
};

DeviceComm::DeviceComm(const std::shared_ptr<Store>& store, int comm_id, int rank, int size)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = store;
  impl_->key = fmt::format("strait/nccl/{}/unique_id", comm_id);
  impl_->rank = rank;
  impl_->size = size;
}

DeviceComm::~DeviceComm() = default;

void DeviceComm::set_stream(kernels::CudaStream stream) noexcept {
  impl_->stream.store(stream);
}

kernels::CudaStream DeviceComm::stream() const noexcept {
  return impl_->stream.load();
}

std::unique_ptr<Op> DeviceComm::enqueue(const CollectiveArgs& call, int device,
                                        std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const std::string what =
      fmt::format("the {} {}", collective_name(call.kind), describe_device(call, device));
  const std::lock_guard issuing(m.issue_mutex);
  std::shared_ptr<NcclComm> nccl;
  {
    const std::lock_guard lock(m.nccl_mutex);
    if (m.aborted) {
      return std::make_unique<FailedOp>(
          Error(ErrorCode::Aborted, "the communicator's device path was aborted"));
    }
    nccl = m.nccl;
  }
  if (nccl && nccl->device() != device) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("device {}: the buffers are on GPU {}, but this communicator's NCCL "
                            "communicator is on GPU {} (the GPU of its first device operation): "
                            "one communicator drives one GPU",
                            collective_name(call.kind), device, nccl->device()));
  }
  const kernels::CudaStream stream = call.stream.value_or(m.stream.load());
  try {
    if (!nccl) {
      NcclCommOptions options;
      options.key = m.key;
      options.timeout = timeout;
      options.wait_for_init = false;  // the first enqueue waits, where abort() can stop it
      nccl = std::make_shared<NcclComm>(*m.store, m.rank, m.size, device, options);
      const std::lock_guard lock(m.nccl_mutex);
      m.nccl = nccl;
      if (m.aborted) nccl->abort();  // abort() came while it was being created
    }
    const kernels::DeviceGuard guard(device);
    issue(*nccl, call, stream);
    CUevent_st* raw = nullptr;
    kernels::cuda_check(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming),
                        "cudaEventCreateWithFlags");
    Event event(raw);
    kernels::cuda_check(
        cudaEventRecord(event.get(), stream),
        fmt::format("cudaEventRecord after {} (is the stream on GPU {}?)", what, device));
    return std::make_unique<NcclOp>(std::move(nccl), std::move(event), stream, what);
  } catch (const Error& e) {
    // The NCCL communicator may hold half-issued work: it cannot be trusted any more. Later
    // operations fail at once rather than wait for peers again (the engine refuses them anyway).
    const std::lock_guard lock(m.nccl_mutex);
    m.aborted = true;
    if (nccl) nccl->abort();
    return std::make_unique<FailedOp>(e);
  }
}

void DeviceComm::abort() noexcept {
  const std::lock_guard lock(impl_->nccl_mutex);
  impl_->aborted = true;
  if (impl_->nccl) impl_->nccl->abort();
}

}  // namespace strait::comm
