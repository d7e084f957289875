// DeviceCall: one Communicator operation as the device path sees it, and the test that decides
// whether it goes to NCCL (its buffers are device memory) or to the host algorithms.
//
// Buffers and counts follow NCCL's conventions, per kind (counts in elements of dtype):
//   Send        send: count                      to rank `root` (the peer)
//   Recv        recv: count                      from rank `root` (the peer)
//   Broadcast   recv: count (in place; send is ignored)
//   Allreduce   send, recv: count
//   Allgather   send: count, recv: size * count
//   ReduceScatter  send: size * count, recv: count
//   Reduce      send: count, recv: count (used on the root only)
//   Gather      send: count, recv: size * count (used on the root only)
//   Scatter     send: size * count (used on the root only), recv: count
//   Alltoall    send, recv: size * count (block j goes to / comes from rank j)
// Only the buffers a rank uses count: recv of Reduce and Gather and send of Scatter on non-roots
// are ignored (may be null or host memory), and null buffers are ignored (count 0).
//
// validate(call, rank, size): throws InvalidArgument, naming the operation, for a root or peer
// outside 0..size-1, a send or receive to this rank itself (NCCL would wait for itself forever
// outside a group: copy instead), a non-zero tag, a null buffer with count > 0, avg of an integer
// dtype, or an alltoall in place. Makes no CUDA call.
// describe_device_call(call, device): "(f32 x 5, sum) on GPU 0 via NCCL", for descriptions and
// errors.
//
// device_of(call, rank): the CUDA device the used buffers live on (kernels::pointer_device), or
// nullopt when they are all host memory (or null): then the host path runs. Throws InvalidArgument
// when some are device memory and others host memory (naming which is which), or when they live on
// different devices. Never makes a CUDA call in a build without CUDA.
// Thread-safety: pure. Errors: InvalidArgument as above.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

struct DeviceCall {
  enum class Kind : std::uint8_t {
    Send,
    Recv,
    Broadcast,
    Allreduce,
    Allgather,
    ReduceScatter,
    Reduce,
    Gather,
    Scatter,
    Alltoall,
  };
  Kind kind = Kind::Allreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  kernels::DType dtype = kernels::DType::U8;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;  // Allreduce, ReduceScatter, Reduce
  int root = 0;                                   // the root; the peer of Send and Recv
  std::uint64_t tag = 0;  // Send, Recv: NCCL matches in order, not by tag, so it must be 0

  // One per kind, with the Communicator's argument order (Send and Recv count bytes).
  static DeviceCall send_to(const void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
    return {.kind = Kind::Send, .send = buf, .count = bytes, .root = peer, .tag = tag};
  }
  static DeviceCall recv_from(void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
    return {.kind = Kind::Recv, .recv = buf, .count = bytes, .root = peer, .tag = tag};
  }
  static DeviceCall broadcast(void* buf, std::size_t count, kernels::DType dtype, int root) {
    return {.kind = Kind::Broadcast, .recv = buf, .count = count, .dtype = dtype, .root = root};
  }
  static DeviceCall allreduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                              kernels::ReduceOp op) {
    return {.kind = Kind::Allreduce,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op};
  }
  static DeviceCall allgather(const void* send, void* recv, std::size_t count,
                              kernels::DType dtype) {
    return {.kind = Kind::Allgather, .send = send, .recv = recv, .count = count, .dtype = dtype};
  }
  static DeviceCall reduce_scatter(const void* send, void* recv, std::size_t count,
                                   kernels::DType dtype, kernels::ReduceOp op) {
    return {.kind = Kind::ReduceScatter,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op};
  }
  static DeviceCall reduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                           kernels::ReduceOp op, int root) {
    return {.kind = Kind::Reduce,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op,
            .root = root};
  }
  static DeviceCall gather(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                           int root) {
    return {.kind = Kind::Gather,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .root = root};
  }
  static DeviceCall scatter(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                            int root) {
    return {.kind = Kind::Scatter,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .root = root};
  }
  static DeviceCall alltoall(const void* send, void* recv, std::size_t count,
                             kernels::DType dtype) {
    return {.kind = Kind::Alltoall, .send = send, .recv = recv, .count = count, .dtype = dtype};
  }

  [[nodiscard]] bool point_to_point() const noexcept {
    return kind == Kind::Send || kind == Kind::Recv;
  }
  [[nodiscard]] bool reduces() const noexcept {
    return kind == Kind::Allreduce || kind == Kind::ReduceScatter || kind == Kind::Reduce;
  }
};

// "allreduce", "reduce_scatter", ... (the Communicator's names).
[[nodiscard]] std::string_view device_call_name(DeviceCall::Kind kind) noexcept;

void validate(const DeviceCall& call, int rank, int size);

[[nodiscard]] std::string describe_device_call(const DeviceCall& call, int device);

[[nodiscard]] std::optional<int> device_of(const DeviceCall& call, int rank);

}  // namespace strait::comm
