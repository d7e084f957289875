// NcclComm: one rank's NCCL communicator (RAII) for collectives and point-to-point transfers on
// device buffers.
//
// Rendezvous (NCCL's documented recipe, with a Store for the broadcast): rank 0 calls
// ncclGetUniqueId and publishes the 128-byte id under options.key; every other rank get()s it from
// the store. Each rank then joins with ncclCommInitRankConfig on its CUDA device (one rank per
// device: NCCL does not support two ranks of one communicator on the same device). The key must be
// fresh for each communicator built on one store (rank 0 overwrites it; a late rank could read a
// previous communicator's id): use a distinct key or a PrefixStore per communicator.
//
// Deadlines: the communicator runs in NCCL's non-blocking mode (config.blocking = 0), and every
// wait here polls ncclCommGetAsyncError against options.timeout, because NCCL's blocking calls
// hang forever on a peer that never arrives. Construction as a whole (store wait + init) takes at
// most options.timeout; then the communicator is aborted and Error(Timeout) says who was waited
// for. With options.wait_for_init = false the constructor returns once init has started, and the
// first call waits for it instead (abort() from another thread can stop that wait). An
// asynchronous NCCL error (a peer died, a network failure) aborts the communicator, as NCCL
// requires, and throws.
//
// Calls (all ranks call collectives in the same order with the same count, dtype, op and root):
// buffers are device memory on device(); counts are in elements of dtype; each call is enqueued on
// `stream` (a cudaStream_t of device(); nullptr = legacy default stream) and is asynchronous like
// any NCCL call: synchronize(stream), or sync the stream, before reading the results. A call
// returns once NCCL has enqueued it (it waits, within options.timeout, for an earlier call still
// being enqueued, as non-blocking NCCL requires). count 0 enqueues nothing. Avg is NCCL's ncclAvg
// (sum, then divide by the world size, in the element type's precision); it is refused for integer
// dtypes, as kernels::scale is. dtypes: every strait DType (f32, f64, f16, bf16, i8, u8, i32, i64);
// ops: sum, prod, min, max, avg. In place: send == recv for allreduce, broadcast and reduce;
// recv == send + rank() * count for reduce_scatter; send == recv + rank() * count for allgather.
//
// Point to point: send/recv are blocking for the GPU (NCCL's rule): a send waits for its receive.
// Transfers that must progress together (an exchange, a ring shift, a send to oneself) go inside a
// Group. alltoall, gather and scatter are groups of sends and receives.
//
// Destruction: ncclCommFinalize (waits for enqueued work, polled up to options.timeout) and
// ncclCommDestroy; if that fails or times out, ncclCommAbort. Never throws.
// Thread-safety: as in NCCL, one thread at a time issues calls. abort() may be called from any
// thread at any time (a watchdog): it releases the NCCL communicator, and every later or
// in-progress wait throws Aborted. ready() may be called from another thread than the one issuing.
// The calling thread's current CUDA device is restored after each call.
// Errors: InvalidArgument (rank/size/device/root/peer out of range, unsupported dtype or op, null
// buffers, NCCL's invalid argument/usage), Unavailable (no driver or device), Timeout, Aborted,
// PeerLost (NCCL's remote or system error), Internal (NCCL internal or CUDA failure). Messages name
// the operation, rank, world size and device.
// Build: target strait_comm_nccl, present only when CUDA and NCCL are found (its consumers then
// see STRAIT_HAVE_NCCL=1).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
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
  bool wait_for_init = true;  // false: the first call waits for init instead of the constructor
};

class NcclComm {
 public:
  // ncclGroupStart / ncclGroupEnd as a scope: the NCCL calls of this thread between construction
  // and end() (or destruction) are fused into one launch, so sends and receives that depend on
  // each other progress together. end() throws what ncclGroupEnd reports and waits (each
  // communicator's timeout) until every communicator called inside is ready; the destructor ends a
  // group that end() did not (after an exception), logging any error. Groups nest, as in NCCL: only
  // the outermost end launches. A group belongs to the thread that made it.
  class Group {
   public:
    Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    ~Group();
    void end();

   private:
    bool ended_ = false;
  };

  NcclComm(Store& store, int rank, int world_size, int device, NcclCommOptions options = {});
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }

  // recv[i] = op over ranks of send[i], i < count.
  void allreduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                 kernels::ReduceOp op, kernels::CudaStream stream);
  // recv (recv_count) = block rank() of the reduction over ranks of send (size() * recv_count).
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, kernels::DType dtype,
                      kernels::ReduceOp op, kernels::CudaStream stream);
  // recv (size() * send_count) = the send buffers (send_count) of ranks 0..size()-1, in order.
  void allgather(const void* send, void* recv, std::size_t send_count, kernels::DType dtype,
                 kernels::CudaStream stream);
  // recv (count) = the root's send (count). send is read on the root only (may be null elsewhere).
  void broadcast(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root,
                 kernels::CudaStream stream);
  // The root's recv (count) = op over ranks of send. recv is written on the root only.
  void reduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
              kernels::ReduceOp op, int root, kernels::CudaStream stream);
  // The root's recv (size() * count) = the send buffers (count) of all ranks, in rank order.
  void gather(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root,
              kernels::CudaStream stream);
  // recv (count) = block rank() of the root's send (size() * count).
  void scatter(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root,
               kernels::CudaStream stream);
  // Block j of recv (count each, size() blocks) = block rank() of rank j's send. Not in place.
  void alltoall(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                kernels::CudaStream stream);
  // count elements to / from group rank `peer` (which calls recv / send with the same count and
  // dtype). See "Point to point" above.
  void send(const void* buf, std::size_t count, kernels::DType dtype, int peer,
            kernels::CudaStream stream);
  void recv(void* buf, std::size_t count, kernels::DType dtype, int peer,
            kernels::CudaStream stream);

  // Never blocks: true when no init or enqueue is in progress (the next call may be issued), false
  // while one is. Throws as the calls do: on an asynchronous error (after aborting), and Aborted
  // once aborted.
  [[nodiscard]] bool ready();

  // Waits until the work enqueued on `stream` has finished, checking the communicator for
  // asynchronous errors meanwhile. On timeout the work is still running: wait again, or abort().
  void synchronize(kernels::CudaStream stream);
  void synchronize(kernels::CudaStream stream, std::chrono::milliseconds timeout);

  // ncclCommAbort: stops NCCL's kernels and frees the communicator. Idempotent.
  void abort() noexcept;
  [[nodiscard]] bool aborted() const;

 private:
  [[nodiscard]] std::string who() const;
  void check_rank(int r, const char* role, const std::string& what) const;
  void check_buffer(const void* p, std::size_t count, const char* name,
                    const std::string& what) const;
  // Waits until ready, issues `call` (an NCCL function returning ncclResult_t, as an int to keep
  // nccl.h out of this header) under mu_, throws on failure, and waits until the call is enqueued
  // (inside a Group, the group's end() waits instead).
  void enqueue(const std::string& what, const std::function<int(ncclComm*)>& call);
  // Polls ncclCommGetAsyncError until it leaves ncclInProgress or `deadline` passes.
  void wait_ready(const std::string& what, std::chrono::steady_clock::time_point deadline,
                  bool abort_on_timeout);
  // With mu_ held: the communicator's state, ncclSuccess or ncclInProgress (as an int). Throws
  // Aborted when comm_ is gone; on an asynchronous error, aborts the communicator and throws.
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
