// comm/device_collectives.h for builds without NCCL: no device buffer can be routed anywhere
// (the host transports cannot read GPU memory), so a device operation reports Unavailable.
#include <fmt/format.h>

#include <atomic>

#include "comm/device_collectives.h"
#include "core/error.h"

namespace strait::comm {

struct DeviceComm::Impl {
  std::atomic<kernels::CudaStream> stream{nullptr};
};

DeviceComm::DeviceComm(const std::shared_ptr<Store>& /*store*/, int /*comm_id*/, int /*rank*/,
                       int /*size*/)
    : impl_(std::make_unique<Impl>()) {}

DeviceComm::~DeviceComm() = default;

void DeviceComm::set_stream(kernels::CudaStream stream) noexcept {
  impl_->stream.store(stream);
}

kernels::CudaStream DeviceComm::stream() const noexcept {
  return impl_->stream.load();
}

std::unique_ptr<Op> DeviceComm::enqueue(const CollectiveArgs& call, int device,
                                        std::chrono::milliseconds /*timeout*/) {
  throw Error(ErrorCode::Unavailable,
              fmt::format("device {}: the buffers are memory of GPU {}, but strait was built "
                          "without NCCL: install NCCL (nccl.h and libnccl) next to the CUDA "
                          "toolkit and reconfigure, or pass host buffers",
                          collective_name(call.kind), device));
}

void DeviceComm::abort() noexcept {}

}  // namespace strait::comm
