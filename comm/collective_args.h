/// \file
/// CollectiveArgs: one Communicator operation as an argument record (the role of NCCL's ncclInfo).
/// Every entry point of comm/communicator.h fills one and posts it (Communicator::post), where it
/// is checked once (comm/collective_check.h), routed to the host algorithms or to NCCL by the
/// memory its buffers live in (resolved once), built from the selection table's row
/// (comm/algorithm_registry.h), fingerprinted and submitted. The C API and the torch backend go
/// through the same entry points, so a new collective is a row of the kind table
/// (comm/algorithms/collective_kind.h), its record here, its check and one registry row (its name
/// in selection.cpp, its constructor in comm/algorithm_registry.cpp).
///
/// Buffers and counts follow NCCL's conventions, per kind (counts in elements of dtype):
///   Send        send: count bytes                to rank `root` (the peer), tag `tag`
///   Recv        recv: count bytes                from rank `root` (the peer), tag `tag`
///   Barrier     no buffers
///   Broadcast   recv: count (in place; send is ignored)
///   Allreduce   send, recv: count
///   AllreduceCompressed  send, recv: count f32 (`compression` says how)
///   Allgather   send: count, recv: size * count
///   AllgatherV  send: counts[rank], recv: sum(counts)
///   ReduceScatter  send: size * count, recv: count
///   ReduceScatterV send: sum(counts), recv: counts[rank]
///   Reduce      send: count, recv: count (used on the root only)
///   Gather      send: count, recv: size * count (used on the root only)
///   Scatter     send: size * count (used on the root only), recv: count
///   Alltoall    send, recv: size * count (block j goes to / comes from rank j)
///   AlltoallV   send: sum(counts) (counts = send counts), recv: sum(recv_counts)
/// Only the buffers a rank uses count: recv of Reduce and Gather and send of Scatter on non-roots
/// are ignored (may be null or host memory), and null buffers are ignored (count 0).
/// The spans and `compression` are borrowed: they must outlive the post() call only (what an
/// operation needs later is copied when it is built).
/// Thread-safety: a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "comm/algorithms/collective_kind.h"
#include "comm/work.h"
#include "kernels/cuda_stream.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

struct Compression;

/// Where an operation's buffers live: decided once per operation (comm/collective_check.h).
enum class MemoryKind : std::uint8_t { Host, Device };

/// One operation's arguments, filled by an entry point and checked once by Communicator::post.
struct CollectiveArgs {
  using Kind = CollectiveKind;  ///< comm/algorithms/collective_kind.h: what each kind is
  /// Which operation.
  Kind kind = Kind::Allreduce;
  /// Input buffer (see the table above for its length per kind).
  const void* send = nullptr;
  /// Output buffer (see the table above for its length per kind).
  void* recv = nullptr;
  /// Elements of dtype (bytes for Send and Recv).
  std::size_t count = 0;
  /// Element type (U8 for Send and Recv).
  kernels::DType dtype = kernels::DType::U8;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;  ///< the reducing kinds
  int root = 0;                                   ///< the root; the peer of Send and Recv
  /// Recv with root kAnySource: where the sender's rank is written when the receive completes
  /// (shared with the operation, so it outlives a caller that stops waiting).
  std::shared_ptr<int> source{};
  std::uint64_t tag = 0;                       ///< Send, Recv (device buffers: must be 0)
  std::span<const std::size_t> counts{};       ///< AllgatherV, ReduceScatterV; AlltoallV: send
  std::span<const std::size_t> recv_counts{};  ///< AlltoallV
  const Compression* compression = nullptr;    ///< AllreduceCompressed
  /// When the operation's deadline starts (AtWait for receives posted early).
  DeadlineStart start = DeadlineStart::AtSubmit;
  /// Device buffers: the CUDA stream to enqueue on (nullptr: the legacy default stream); unset:
  /// the communicator's (Communicator::set_stream). Host buffers ignore it.
  std::optional<kernels::CudaStream> stream{};

  /// One per entry point, with the Communicator's argument order (Send and Recv count bytes).
  static CollectiveArgs send_to(const void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                                DeadlineStart start = DeadlineStart::AtSubmit) {
    return {
        .kind = Kind::Send, .send = buf, .count = bytes, .root = peer, .tag = tag, .start = start};
  }
  /// Receive `bytes` bytes from `peer` with `tag` (Communicator::irecv).
  static CollectiveArgs recv_from(void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                                  DeadlineStart start = DeadlineStart::AtSubmit) {
    return {
        .kind = Kind::Recv, .recv = buf, .count = bytes, .root = peer, .tag = tag, .start = start};
  }
  /// Recv's root for a receive from whichever rank sends (MPI_ANY_SOURCE).
  static constexpr int kAnySource = -1;
  /// Receive `bytes` bytes with `tag` from any rank; its rank goes to *source once received
  /// (Communicator::irecv_any).
  static CollectiveArgs recv_from_any(void* buf, std::size_t bytes, std::uint64_t tag,
                                      std::shared_ptr<int> source) {
    return {.kind = Kind::Recv,
            .recv = buf,
            .count = bytes,
            .root = kAnySource,
            .source = std::move(source),
            .tag = tag};
  }
  /// Communicator::barrier.
  static CollectiveArgs barrier() { return {.kind = Kind::Barrier}; }
  /// Communicator::broadcast: `count` elements of the root's `buf` to every rank's.
  static CollectiveArgs broadcast(void* buf, std::size_t count, kernels::DType dtype, int root) {
    return {.kind = Kind::Broadcast, .recv = buf, .count = count, .dtype = dtype, .root = root};
  }
  /// Communicator::allreduce.
  static CollectiveArgs allreduce(const void* send, void* recv, std::size_t count,
                                  kernels::DType dtype, kernels::ReduceOp op) {
    return {.kind = Kind::Allreduce,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op};
  }
  /// Communicator::allreduce_compressed (f32 only).
  static CollectiveArgs allreduce_compressed(const float* send, float* recv, std::size_t count,
                                             kernels::ReduceOp op, const Compression& c) {
    return {.kind = Kind::AllreduceCompressed,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = kernels::DType::F32,
            .op = op,
            .compression = &c};
  }
  /// Communicator::allgather.
  static CollectiveArgs allgather(const void* send, void* recv, std::size_t count,
                                  kernels::DType dtype) {
    return {.kind = Kind::Allgather, .send = send, .recv = recv, .count = count, .dtype = dtype};
  }
  /// Communicator::allgather_v.
  static CollectiveArgs allgather_v(const void* send, void* recv,
                                    std::span<const std::size_t> counts, kernels::DType dtype) {
    return {.kind = Kind::AllgatherV, .send = send, .recv = recv, .dtype = dtype, .counts = counts};
  }
  /// Communicator::reduce_scatter.
  static CollectiveArgs reduce_scatter(const void* send, void* recv, std::size_t count,
                                       kernels::DType dtype, kernels::ReduceOp op) {
    return {.kind = Kind::ReduceScatter,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op};
  }
  /// Communicator::reduce_scatter_v.
  static CollectiveArgs reduce_scatter_v(const void* send, void* recv,
                                         std::span<const std::size_t> counts, kernels::DType dtype,
                                         kernels::ReduceOp op) {
    return {.kind = Kind::ReduceScatterV,
            .send = send,
            .recv = recv,
            .dtype = dtype,
            .op = op,
            .counts = counts};
  }
  /// Communicator::reduce.
  static CollectiveArgs reduce(const void* send, void* recv, std::size_t count,
                               kernels::DType dtype, kernels::ReduceOp op, int root) {
    return {.kind = Kind::Reduce,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .op = op,
            .root = root};
  }
  /// Communicator::gather.
  static CollectiveArgs gather(const void* send, void* recv, std::size_t count,
                               kernels::DType dtype, int root) {
    return {.kind = Kind::Gather,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .root = root};
  }
  /// Communicator::scatter.
  static CollectiveArgs scatter(const void* send, void* recv, std::size_t count,
                                kernels::DType dtype, int root) {
    return {.kind = Kind::Scatter,
            .send = send,
            .recv = recv,
            .count = count,
            .dtype = dtype,
            .root = root};
  }
  /// Communicator::alltoall.
  static CollectiveArgs alltoall(const void* send, void* recv, std::size_t count,
                                 kernels::DType dtype) {
    return {.kind = Kind::Alltoall, .send = send, .recv = recv, .count = count, .dtype = dtype};
  }
  /// Communicator::alltoall_v.
  static CollectiveArgs alltoall_v(const void* send, std::span<const std::size_t> send_counts,
                                   void* recv, std::span<const std::size_t> recv_counts,
                                   kernels::DType dtype) {
    return {.kind = Kind::AlltoallV,
            .send = send,
            .recv = recv,
            .dtype = dtype,
            .counts = send_counts,
            .recv_counts = recv_counts};
  }

  /// True for Send and Recv.
  [[nodiscard]] bool point_to_point() const noexcept { return kind_info(kind).point_to_point; }
  /// True for the kinds that apply `op`.
  [[nodiscard]] bool reduces() const noexcept { return kind_info(kind).reduces; }
  /// True for the kinds that have a root (Broadcast, Reduce, Gather, Scatter).
  [[nodiscard]] bool rooted() const noexcept { return kind_info(kind).rooted; }
  /// The kinds NCCL runs when the buffers are device memory.
  [[nodiscard]] bool device_capable() const noexcept { return comm::device_capable(kind); }
};

}  // namespace strait::comm
