#include "comm/device_call.h"

#include <fmt/format.h>

#include <array>

#include "core/error.h"
#include "kernels/device_memory.h"

namespace strait::comm {

std::string_view device_call_name(DeviceCall::Kind kind) noexcept {
  switch (kind) {
    case DeviceCall::Kind::Send: return "send";
    case DeviceCall::Kind::Recv: return "recv";
    case DeviceCall::Kind::Broadcast: return "broadcast";
    case DeviceCall::Kind::Allreduce: return "allreduce";
    case DeviceCall::Kind::Allgather: return "allgather";
    case DeviceCall::Kind::ReduceScatter: return "reduce_scatter";
    case DeviceCall::Kind::Reduce: return "reduce";
    case DeviceCall::Kind::Gather: return "gather";
    case DeviceCall::Kind::Scatter: return "scatter";
    case DeviceCall::Kind::Alltoall: return "alltoall";
  }
  return "operation";
}

void validate(const DeviceCall& call, int rank, int size) {
  using Kind = DeviceCall::Kind;
  const std::string_view name = device_call_name(call.kind);
  const auto invalid = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("device {}: {}", name, why));
  };
  if (call.root < 0 || call.root >= size) {
    invalid(fmt::format("{} {} is not in this communicator of size {}",
                        call.point_to_point() ? "rank" : "root", call.root, size));
  }
  if (call.point_to_point()) {
    if (call.root == rank) {
      invalid(
          fmt::format("rank {} cannot {} itself on the GPU: NCCL's send and receive each wait "
                      "for the other; copy the buffer (cudaMemcpyAsync) instead",
                      rank, call.kind == Kind::Send ? "send to" : "receive from"));
    }
    if (call.tag != 0) {
      invalid(
          fmt::format("tag {}: NCCL matches sends and receives between two ranks in the "
                      "order posted, not by tag; pass tag 0 for device buffers",
                      call.tag));
    }
  }
  if (call.reduces() && call.op == kernels::ReduceOp::Avg && !kernels::dtype_is_float(call.dtype)) {
    invalid(fmt::format("avg of {} is not defined; use sum and divide, or a floating-point dtype",
                        kernels::dtype_name(call.dtype)));
  }
  if (call.count == 0) return;
  const bool root = rank == call.root;
  const bool needs_send = call.kind != Kind::Recv && call.kind != Kind::Broadcast &&
                          (call.kind != Kind::Scatter || root);
  const bool needs_recv =
      call.kind != Kind::Send && ((call.kind != Kind::Reduce && call.kind != Kind::Gather) || root);
  if ((needs_send && call.send == nullptr) || (needs_recv && call.recv == nullptr)) {
    invalid("null buffer with a non-zero count");
  }
  if (call.kind == Kind::Alltoall && call.send == call.recv) {
    invalid("send and recv are the same buffer: alltoall is not in place");
  }
}

std::string describe_device_call(const DeviceCall& call, int device) {
  using Kind = DeviceCall::Kind;
  std::string what = fmt::format("({} x {}", kernels::dtype_name(call.dtype), call.count);
  if (call.reduces()) what += fmt::format(", {}", kernels::reduce_op_name(call.op));
  switch (call.kind) {
    case Kind::Send: what += fmt::format(", to rank {}", call.root); break;
    case Kind::Recv: what += fmt::format(", from rank {}", call.root); break;
    case Kind::Broadcast:
    case Kind::Reduce:
    case Kind::Gather:
    case Kind::Scatter: what += fmt::format(", root {}", call.root); break;
    default: break;
  }
  return what + fmt::format(") on GPU {} via NCCL", device);
}

std::optional<int> device_of(const DeviceCall& call, int rank) {
  using Kind = DeviceCall::Kind;
  const bool root = rank == call.root;
  struct Used {
    const char* name;
    const void* p;
  };
  std::array<Used, 2> used{};
  std::size_t n = 0;
  const auto use = [&](const char* name, const void* p) {
    if (p != nullptr) used[n++] = Used{name, p};
  };
  switch (call.kind) {
    case Kind::Send: use("send", call.send); break;
    case Kind::Recv: use("recv", call.recv); break;
    case Kind::Broadcast: use("buffer", call.recv); break;
    case Kind::Allreduce:
    case Kind::Allgather:
    case Kind::ReduceScatter:
    case Kind::Alltoall:
      use("send", call.send);
      use("recv", call.recv);
      break;
    case Kind::Reduce:
    case Kind::Gather:
      use("send", call.send);
      if (root) use("recv", call.recv);
      break;
    case Kind::Scatter:
      if (root) use("send", call.send);
      use("recv", call.recv);
      break;
  }
  std::array<std::optional<int>, 2> device{};
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    device[i] = kernels::pointer_device(used[i].p);
    any = any || device[i].has_value();
  }
  if (!any) return std::nullopt;
  if (n == 2 && device[0] != device[1]) {
    const auto where = [&](std::size_t i) {
      return device[i] ? fmt::format("device memory of GPU {}", *device[i])
                       : std::string("host memory");
    };
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: the {} buffer is {} but the {} buffer is {}: pass both in host "
                    "memory (UCX) or both on the communicator's GPU (NCCL)",
                    device_call_name(call.kind), used[0].name, where(0), used[1].name, where(1)));
  }
  return device[0];
}

}  // namespace strait::comm
