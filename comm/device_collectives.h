// DeviceComm: the NCCL side of one Communicator. Communicator routes an operation here when its
// buffers are device memory (comm/collective_check.h decides), so device buffers get the same API,
// Work handles, deadlines, ordering and abort() as host buffers.
//
// enqueue(call, device, timeout) enqueues the NCCL call on the communicator's CUDA stream, on the
// caller's thread, so it takes its place on the stream in program order (after the kernels that
// produced its input, before those that consume its output), then records a CUDA event after it.
// It returns the progress-engine operation that completes when the event has (cudaEventQuery),
// polling ncclCommGetAsyncError meanwhile: an asynchronous error aborts the NCCL communicator
// (ncclCommAbort) and fails the operation with PeerLost (NCCL's remote or system error) or
// Internal, naming it. Cancelling the operation (the engine does on its deadline, abort() and any
// failure of the communicator) and destroying it before the GPU has finished both call
// ncclCommAbort, so no NCCL kernel outlives a failed operation's buffers. Errors met while
// enqueueing (creating the NCCL communicator, a failed enqueue, a timeout waiting for peers) come
// back as an operation that fails with them, so Work reports them and the communicator breaks as
// for any failure; only a buffer on another GPU than the NCCL communicator's is thrown at once
// (InvalidArgument). After any failure, later enqueues fail at once with Aborted.
//
// The NCCL communicator is created by the first device operation: rank 0 draws NCCL's unique id
// and publishes it in the store under "strait/nccl/<comm id>/unique_id" (the comm id is unique in
// the job, so sub-communicators never collide); the other ranks wait for it there (at most the
// timeout; a blocking wait on the caller's thread that abort() cannot shorten). Its device is the
// GPU that the operation's buffers live on, and every later operation's buffers must be on it too.
// NCCL's own initialisation then runs in the background, and the first enqueue waits for it (at
// most the timeout; abort() stops that wait). As with NCCL, the first device operation must be one
// every rank of the communicator calls (a collective), and there is one rank per GPU.
// Stream: the operation's own (CollectiveArgs::stream), else the one set_stream() set last
// (nullptr, the default, is the legacy default stream). It must belong to the buffers' GPU.
// Thread-safety: enqueue() calls are serialised (NCCL allows one issuing thread per communicator);
// set_stream(), stream() and abort() may be called from any thread at any time.
// Build: with NCCL (STRAIT_HAVE_NCCL) the real path; without it, enqueue() throws Unavailable
// saying what to install (comm/device_collectives_unavailable.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/bootstrap/store.h"
#include "comm/collective_args.h"
#include "comm/transport/op.h"
#include "kernels/cuda_stream.h"

namespace strait::comm {

class DeviceComm {
 public:
  DeviceComm(const std::shared_ptr<Store>& store, int comm_id, int rank, int size);
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;
  ~DeviceComm();

  void set_stream(kernels::CudaStream stream) noexcept;
  [[nodiscard]] kernels::CudaStream stream() const noexcept;

  // `call` must have passed validate_device(); `device` is from memory_of(call); `timeout` bounds
  // the waits for the store, NCCL's init and the enqueue.
  std::unique_ptr<Op> enqueue(const CollectiveArgs& call, int device,
                              std::chrono::milliseconds timeout);

  // Aborts the NCCL communicator (if created) and makes later enqueues fail with Aborted.
  void abort() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::comm
