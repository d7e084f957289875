// NcclComm: one rank's NCCL communicator (RAII) for collectives on device buffers.
//
// Rendezvous (NCCL's documented recipe, with a Store for the broadcast): rank 0 calls
// ncclGetUniqueId and publishes the 128-byte id under options.key; every other rank get()s it from
// the store. Each rank then joins with ncclCommInitRankConfig on its CUDA device. The key must be
// fresh for each communicator built on one store (rank 0 overwrites it; a late rank could read a
// previous communicator's id): use a distinct key or a PrefixStore per communicator.
//
// Deadlines: the communicator runs in NCCL's non-blocking mode (config.blocking = 0), and every
// wait here polls ncclCommGetAsyncError against options.timeout, because NCCL's blocking calls
// hang forever on a peer that never arrives. Construction as a whole (store wait + init) takes at
// most options.timeout; then the communicator is aborted and Error(Timeout) says who was waited
// for. An asynchronous NCCL error (a peer died, a network failure) aborts the communicator, as
// NCCL requires, and throws.
//
// allreduce(send, recv, count, dtype, op, stream): recv[i] = op over ranks of send[i], count
// elements of dtype, enqueued on `stream` (a cudaStream_t; nullptr = legacy default stream) and
// asynchronous like any NCCL collective: call synchronize(stream) or sync the stream before
// reading recv. send == recv is in-place; count 0 enqueues nothing. Avg is NCCL's ncclAvg (sum,
// then divide by the world size, in the element type's precision); it is refused for integer
// dtypes, as kernels::scale is. All ranks must call collectives in the same order with the same
// count, dtype and op.
//
// Destruction: ncclCommFinalize (waits for enqueued work, polled up to options.timeout) and
// ncclCommDestroy; if that fails or times out, ncclCommAbort. Never throws.
// Thread-safety: as in NCCL, one thread at a time issues allreduce/synchronize. abort() may be
// called from any thread at any time (a watchdog): it releases the NCCL communicator, and every
// later or in-progress wait throws Aborted. The calling thread's current CUDA device is restored
// after each call.
// Errors: InvalidArgument (rank/size/device out of range, unsupported dtype or op, null buffers,
// NCCL's invalid argument/usage), Unavailable (no driver or device),
// Timeout, Aborted, PeerLost (NCCL's remote or system error), Internal (NCCL internal or CUDA
// failure). Messages name the operation, rank, world size and device.
// Build: target strait_comm_nccl, present only when CUDA and NCCL are found (its consumers then
// see STRAIT_HAVE_NCCL=1).
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "comm/bootstrap/store.h"
#include "kernels/cuda_stream.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

struct ncclComm;  // nccl.h's ncclComm_t is `struct ncclComm*`

namespace strait::comm {

struct NcclCommOptions {
  std::string key = "strait/nccl/unique_id";  // where rank 0 publishes the NCCL unique id
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // every wait, see above
};

class NcclComm {
 public:
  NcclComm(Store& store, int rank, int world_size, int device, NcclCommOptions options = {});
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }

  void allreduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                 kernels::ReduceOp op, kernels::CudaStream stream);

  // Waits until the work enqueued on `stream` has finished, checking the communicator for
  // asynchronous errors meanwhile. On timeout the work is still running: wait again, or abort().
  void synchronize(kernels::CudaStream stream);
  void synchronize(kernels::CudaStream stream, std::chrono::milliseconds timeout);

  // ncclCommAbort: stops NCCL's kernels and frees the communicator. Idempotent.
  void abort() noexcept;
  [[nodiscard]] bool aborted() const;

 private:
  [[nodiscard]] std::string who() const;
  // Polls ncclCommGetAsyncError until it leaves ncclInProgress or `deadline` passes.
  void wait_ready(const std::string& what, std::chrono::steady_clock::time_point deadline,
                  bool abort_on_timeout);
  // With mu_ held: the communicator's state, ncclSuccess or ncclInProgress (as an int, to keep
  // nccl.h out of this header). Throws Aborted when comm_ is gone; on an asynchronous error,
  // aborts the communicator and throws.
  int poll_locked(const std::string& what);
  void abort_locked() noexcept;

  int rank_;
  int size_;
  int device_;
  NcclCommOptions options_;
  mutable std::mutex mu_;     // guards comm_: abort() may free it from another thread
  ncclComm* comm_ = nullptr;  // null once aborted or destroyed
};

}  // namespace strait::comm
