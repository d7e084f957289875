/// \file
/// Communicator: a group of ranks and the collectives over it (the role of an MPI communicator, a
/// NCCL ncclComm_t or a c10d ProcessGroup), over host memory through UCX and over GPU memory
/// through NCCL (see "Device buffers" below).
///
/// Every operation has a blocking form and a non-blocking form (i-prefixed) that returns a Work.
/// Operations of one communicator must be called in the same order on every rank (as in MPI and
/// NCCL); they run in the background on the progress engine, many at once, and complete in the
/// order submitted. Counts are in elements of `dtype`; buffers are owned by the caller and must
/// stay valid until the operation completes; send == recv means in place. Every operation
/// fails within the communicator's timeout (STRAIT_TIMEOUT_S, default 300 s) rather than hang: with
/// PeerLost when a rank dies, Timeout when a rank never arrives, Mismatch when ranks disagree on
/// the operation (kind, count, dtype, op, root or algorithm: each collective exchanges its
/// fingerprint with the peers it talks to, ahead of its data). After a failure the communicator is
/// unusable (as NCCL after an error).
///
/// Algorithms (comm/algorithms/, one per file with its steps and bytes moved): allreduce is
/// recursive doubling (short vectors) or a ring pipelined in segments (longer ones), chosen by size
/// and world size through comm/algorithms/selection.h, which also offers Rabenseifner's
/// reduce-scatter + allgather and the unsegmented ring (STRAIT_TUNE / STRAIT_TUNE_FILE or
/// CommOptions::algorithms), and with several sites (sites(), comm/sites.h) the hierarchical
/// allreduce (comm/algorithms/hierarchical_allreduce.h); reduce_scatter and allgather(_v) are
/// rings, broadcast, reduce, gather and scatter binomial trees, alltoall(_v) a pairwise exchange,
/// barrier the dissemination algorithm. Between ranks that all share this host, allgather,
/// reduce_scatter, alltoall, gather and scatter from 64 KiB (reduce from 64 KiB to 16 MiB,
/// allgather_v and reduce_scatter_v with 3 ranks or more) read their peers' buffers in place
/// instead (comm/algorithms/local_copy.h; broadcast, allreduce, alltoall_v and the rest of those
/// sizes too by rule: `single_copy`).
///
/// Device buffers (CUDA builds with NCCL): when an operation's buffers are GPU memory
/// (cudaMalloc; see kernels/device_memory.h), the same call goes to NCCL instead
/// (comm/device_collectives.h): it is enqueued on the communicator's CUDA stream (set_stream)
/// in program order, and its Work completes once the GPU has finished it, with the same deadlines,
/// ordering and abort() (which calls ncclCommAbort). The first device operation creates the NCCL
/// communicator, on the buffers' GPU (one rank per GPU), and must be a collective. Mixing host and
/// device buffers in one call is InvalidArgument. Device point-to-point operations are ordered on
/// the stream with the device collectives (NCCL matches them in order, so tag must be 0); a send
/// waits on the GPU for its receive, so a pair exchanging both ways orders its calls oppositely.
/// NCCL exchanges no fingerprint: ranks that disagree on a device operation fail with Timeout (or
/// whatever NCCL reports), not Mismatch. Without NCCL in the build, device buffers are reported
/// Unavailable.
///
/// Thread-safety: a communicator may be used from several threads, but the order of operations
/// must still be the same on all ranks, so most callers use it from one thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/collective_args.h"
#include "comm/compress/matrix_shape.h"
#include "comm/reform.h"
#include "comm/sites.h"
#include "comm/symmetric_memory.h"
#include "comm/work.h"
#include "core/export.h"
#include "kernels/cuda_stream.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class DeviceComm;
struct Group;
class ProgressEngine;
class AlgorithmTable;
class CompressionState;
struct CodecChoice;
struct Hierarchy;

/// Options of a world communicator; every unset field takes its environment variable's value.
struct STRAIT_API CommOptions {
  /// Deadline of every operation, and of connecting to peers. Default: STRAIT_TIMEOUT_S or 300 s.
  std::chrono::milliseconds timeout = default_timeout();
  /// Which algorithm runs each collective, for this communicator and those split from it
  /// (comm/algorithms/selection.h). Null: AlgorithmTable::from_environment() (the built-in table,
  /// then STRAIT_TUNE_FILE, then STRAIT_TUNE), read by create().
  std::shared_ptr<const AlgorithmTable> algorithms;
  /// The site (0, 1, ...) of each world rank, for the hierarchical allreduce; overrides
  /// STRAIT_SITES and STRAIT_TOPOLOGY_FILE (comm/sites.h). Unset: from the environment.
  std::optional<std::vector<int>> sites{};
  /// Connections per peer on another host, each large message striped over them
  /// (transport/ucx/ucx_transport.h): for links that limit each TCP flow. 1 .. 8, the same on every
  /// rank (Mismatch otherwise). Default: STRAIT_STREAMS or 1.
  int streams = default_streams();
  /// Heartbeat interval of world communicators (comm/heartbeat.h): a peer silent for 5 intervals is
  /// lost (PeerLost on every pending operation, and left out by reform()). Zero: no heartbeat (the
  /// transport still sees processes exit and connections break). Default: STRAIT_HEARTBEAT_S or 0.
  std::chrono::milliseconds heartbeat = default_heartbeat();
  /// Throws InvalidArgument when STRAIT_HEARTBEAT_S is set to anything but 0 or 0.001 .. 3600 s.
  static std::chrono::milliseconds default_heartbeat();
  /// Collective messages of at least this many bytes to a rank on this host are copied once,
  /// straight from the sender's memory, rather than twice through UCX's shared-memory FIFO
  /// (transport/ucx/ucx_transport.h); 0: never. Default: STRAIT_SINGLE_COPY_MIN (bytes, with an
  /// optional K, M or G suffix, or "off") or kDefaultSingleCopyMin.
  std::size_t single_copy_min = default_single_copy_min();
  /// In the 64 - 256 KiB range where one copy should start paying for its handshake (an
  /// announcement and a "done" message); not tuned: the ring allreduce sends 8 KiB segments below
  /// 1 MiB and 512 KiB - 1 MiB ones above, so only the other collectives' messages meet it.
  static constexpr std::size_t kDefaultSingleCopyMin = 256 << 10;
  /// The job's shared secret (comm/security/secret.h): a file, mode 0600. Unset:
  /// STRAIT_SECRET_FILE; "": none. Communicator::from_env authenticates the store with it.
  std::optional<std::string> secret_file{};
  /// Which links are sealed with an AEAD (comm/transport/sealed_transport.h): "sites" (between
  /// sites), "all" or "off"; the same on every rank. Empty: STRAIT_ENCRYPT, else "sites" with a
  /// secret and "off" without.
  std::string encrypt{};
  /// Throws InvalidArgument when STRAIT_TIMEOUT_S is set to anything but 0.001 .. 1e6 seconds.
  static std::chrono::milliseconds default_timeout();
  /// Throws InvalidArgument when STRAIT_STREAMS is set to anything but 1 .. 8.
  static int default_streams();
  /// Throws InvalidArgument when STRAIT_SINGLE_COPY_MIN is neither "off" nor a size of at least
  /// 64 bytes.
  static std::size_t default_single_copy_min();
};

/// Payload bytes this rank has sent, by operation kind, since the communicator was created (the
/// operations' headers are not counted; host buffers only: NCCL does not report what it sends). A
/// v-form counts with its plain form.
struct CommStats {
  /// allreduce and allreduce_compressed.
  std::uint64_t allreduce_bytes = 0;
  /// broadcast.
  std::uint64_t broadcast_bytes = 0;
  std::uint64_t allgather_bytes = 0;  ///< allgather and allgather_v
  /// send (point to point).
  std::uint64_t send_bytes = 0;
  std::uint64_t reduce_scatter_bytes = 0;  ///< reduce_scatter and reduce_scatter_v
  /// reduce.
  std::uint64_t reduce_bytes = 0;
  /// gather.
  std::uint64_t gather_bytes = 0;
  /// scatter.
  std::uint64_t scatter_bytes = 0;
  std::uint64_t alltoall_bytes = 0;  ///< alltoall and alltoall_v
  /// Of all the bytes this process's communicators sent (the world and those split from it share
  /// one transport), those that a rank on this host copied straight from this process's memory
  /// (CommOptions::single_copy_min).
  std::uint64_t single_copy_bytes = 0;
  /// Bytes this rank read straight out of its mappings of peers' symmetric buffers
  /// (Communicator::alloc), with no system call.
  std::uint64_t symmetric_bytes = 0;
};

/// How a compressed allreduce encodes its messages (comm/compress/codec.h lists the codecs).
struct Compression {
  /// A codec spec: "name" or "name:key=value,..." ("int8", "int4:block=32", "topk:fraction=0.01",
  /// "powersgd:rank=4"), or "auto": the codec that the selection rules (STRAIT_TUNE_FILE, as
  /// `strait tune` writes it; comm/algorithms/selection.h) give this message size, "none" when no
  /// rule gives one. An "auto" that comes to "none" runs the plain allreduce with the rules'
  /// algorithm (lossless).
  std::string codec = "int8";
  /// Error feedback's key: a stable name of the tensor (a parameter, a gradient bucket); empty:
  /// no error feedback. One operation per key at a time; a key whose count changes starts again
  /// from zeros (PowerSGD: whose count, layout or spec changes; its key also keeps the warm start).
  std::string key{};
  /// PowerSGD only (the elementwise codecs ignore it): the weight matrices of the buffer, one per
  /// gradient matrix (elements, row-major; disjoint, inside the buffer; any order). Elements
  /// outside every matrix, and matrices too small to gain (comm/compress/powersgd.h), go
  /// uncompressed. Empty: the whole buffer as one near-square matrix (4096 x 4096 for 16M
  /// elements).
  std::vector<MatrixShape> matrices{};
};

/// A group of ranks and the collectives over it (see the file comment for ordering, errors and
/// threads).
struct CommunicatorShared;  ///< defined in comm/communicator_shared.h, private to comm/

class STRAIT_API Communicator {
  struct Key {
    explicit Key() = default;
  };

 public:
  /// What the communicators of one process share (comm/communicator_shared.h).
  using Shared = CommunicatorShared;

  /// The world communicator of a job launched with torchrun's environment (RANK, WORLD_SIZE,
  /// MASTER_ADDR, MASTER_PORT): `strait run`, torchrun, Slurm or mpirun wrappers. Collective.
  static std::unique_ptr<Communicator> from_env(const CommOptions& options = {});
  /// The world communicator over an existing store (rank 0 need not be special). Collective: it
  /// returns once every rank has connected (a barrier), so none can leave and tear down early.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const CommOptions& options = {});

  /// Constructed through create(), from_env(), split(), reform() and join() only (the Key is
  /// private).
  Communicator(Key, std::shared_ptr<Shared> shared, std::shared_ptr<const Group> group,
               std::chrono::milliseconds timeout);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  /// This rank, 0 .. size() - 1.
  [[nodiscard]] int rank() const noexcept;
  /// Ranks in the communicator.
  [[nodiscard]] int size() const noexcept;
  /// The sites of this communicator's ranks (comm/sites.h): read (or measured) by create() and
  /// checked to be the same on every rank. Communicators from split() have one site.
  [[nodiscard]] const Sites& sites() const noexcept;
  /// The deadline of operations submitted from now on.
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  /// Applies to operations submitted afterwards.
  void set_timeout(std::chrono::milliseconds timeout) noexcept {
    timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  }

  /// The CUDA stream (a cudaStream_t; nullptr, the default, is the legacy default stream) on which
  /// later operations on device buffers are enqueued; it must belong to their GPU. Host operations
  /// ignore it.
  void set_stream(kernels::CudaStream stream) noexcept;

  /// MPI_Comm_split: ranks with the same color form a new communicator, ordered by (key, rank).
  /// Collective over this communicator; returns null for color < 0. Each split draws a job-wide id
  /// that is not reused, so a job can create at most 4095 communicators (comm/transport/tag.h).
  std::unique_ptr<Communicator> split(int color, int key);

  /// Point to point. The receive must be for exactly `bytes` bytes. `tag` < 2^37. Messages between
  /// two ranks with one tag arrive in the order sent; point-to-point operations are not ordered
  /// with respect to collectives. DeadlineStart::AtWait suits receives posted early (see work.h).
  Work isend(const void* buf, std::size_t bytes, int peer, std::uint64_t tag = 0,
             DeadlineStart start = DeadlineStart::AtSubmit);
  /// Receive of exactly `bytes` bytes from `peer` with `tag` (as isend above).
  Work irecv(void* buf, std::size_t bytes, int peer, std::uint64_t tag = 0,
             DeadlineStart start = DeadlineStart::AtSubmit);
  /// Receive of exactly `bytes` bytes with `tag` from whichever rank sends one first
  /// (MPI_ANY_SOURCE); *source = that rank before the Work completes. Host buffers only, and not
  /// over sealed links (STRAIT_ENCRYPT): both fail with InvalidArgument / the receive's error.
  Work irecv_any(void* buf, std::size_t bytes, std::shared_ptr<int> source, std::uint64_t tag = 0);
  /// The sequence number the next collective of this communicator takes: strait's own count,
  /// equal on ranks that issued the same collectives (a collective made of several parts takes
  /// several; point-to-point operations take none). Any thread.
  [[nodiscard]] std::uint64_t sequence_number();
  /// Blocking isend(): returns once sent; throws its error.
  void send(const void* buf, std::size_t bytes, int peer, std::uint64_t tag = 0);
  /// Blocking irecv(): returns once received; throws its error.
  void recv(void* buf, std::size_t bytes, int peer, std::uint64_t tag = 0);

  /// No rank's Work completes before every rank has entered (dissemination).
  Work ibarrier();
  /// Blocking ibarrier().
  void barrier();

  /// buf: count elements; the root's values end up on every rank.
  Work ibroadcast(void* buf, std::size_t count, kernels::DType dtype, int root);
  /// Blocking ibroadcast().
  void broadcast(void* buf, std::size_t count, kernels::DType dtype, int root);

  /// Symmetric memory (comm/symmetric_memory.h): `bytes` zero-filled, page-aligned bytes that
  /// every rank on this host maps once, so that the single-copy collectives
  /// (comm/algorithms/local_copy.h) read a peer's data from their own mapping instead of
  /// process_vm_readv (no per-call pinning). Collective: every rank calls it with the same size,
  /// in the same order. Ranks on several hosts get ordinary memory. Buffers may be any argument of
  /// any collective; ordinary buffers keep working, and may be mixed with these per rank. The
  /// buffer is freed by its destructor (memfd-backed: it cannot outlive the job).
  ///   auto x = comm.alloc(n * sizeof(float));
  ///   comm.allreduce(x.data(), x.data(), n, DType::F32, ReduceOp::Sum);
  /// Errors: InvalidArgument (0 bytes, sizes differ between ranks), Unavailable (memfd/mmap
  /// refused), Timeout (a rank did not call it). Thread-safety: as the collectives.
  SymmetricBuffer alloc(std::size_t bytes);

  /// recv[i] = op over ranks of send[i], i < count. Avg is defined for floating-point dtypes.
  /// With several sites, vectors of 8249 bytes and more run the hierarchical allreduce
  /// (comm/algorithms/hierarchical_allreduce.h; the selection table's default, see selection.cpp).
  Work iallreduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                  kernels::ReduceOp op);
  /// Blocking iallreduce().
  void allreduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
                 kernels::ReduceOp op);

  /// Compressed allreduce of f32 (Sum or Avg) for bandwidth-bound links: a ring that encodes every
  /// message and reduces in fp32 (comm/algorithms/compressed_ring_allreduce.h) for bf16, fp16,
  /// int8, int4 and onebit, an allgather of encodings (compressed_allgather_allreduce.h) for topk,
  /// and for powersgd a rank-r approximation through two allreduces of low-rank factors
  /// (comm/algorithms/powersgd_allreduce.h; it takes three sequence numbers).
  /// The result is lossy but bit-identical on every rank. Every rank must pass the same codec spec
  /// (and for powersgd a layout giving the same plan: Mismatch otherwise). With several sites
  /// (sites()), the elementwise codecs run hierarchically: uncompressed inside each site,
  /// compressed only between sites (comm/algorithms/hierarchical_allreduce.h); the result is then
  /// bit-identical on every rank too. PowerSGD runs over all ranks alike.
  /// Errors: InvalidArgument for an op other than Sum or Avg, an unknown codec or argument, a
  /// powersgd layout whose matrices overlap or reach past the buffer, or a NaN / Inf in send (found
  /// before anything is sent; the other ranks then time out naming this rank).
  Work iallreduce_compressed(const float* send, float* recv, std::size_t count,
                             kernels::ReduceOp op, const Compression& compression);
  /// Blocking iallreduce_compressed().
  void allreduce_compressed(const float* send, float* recv, std::size_t count, kernels::ReduceOp op,
                            const Compression& compression);

  /// recv (size() * count elements) = the send buffers of ranks 0..size()-1, in rank order.
  Work iallgather(const void* send, void* recv, std::size_t count, kernels::DType dtype);
  /// Blocking iallgather().
  void allgather(const void* send, void* recv, std::size_t count, kernels::DType dtype);

  // The collectives below follow the conventions above; "block r" is rank r's part of a buffer,
  // blocks packed in rank order. Reductions take every op for every dtype, but Avg only for
  // floating-point dtypes (InvalidArgument otherwise, as for allreduce). Buffers that overlap in a
  // way other than the in-place layout each one names are InvalidArgument, as are spans that do
  // not have size() entries and null buffers where elements are to be read or written.

  /// send: size() * recv_count elements, block r for rank r; recv: recv_count elements = op over
  /// ranks of block rank() (NCCL's ncclReduceScatter). In place when recv == send + rank() *
  /// recv_count elements. Ring reduce-scatter: P-1 steps, (P-1) * recv_count elements sent.
  Work ireduce_scatter(const void* send, void* recv, std::size_t recv_count, kernels::DType dtype,
                       kernels::ReduceOp op);
  /// Blocking ireduce_scatter().
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, kernels::DType dtype,
                      kernels::ReduceOp op);
  /// As reduce_scatter with per-rank block sizes: recv_counts has size() entries (the same on every
  /// rank: Mismatch otherwise); block r of send starts at the prefix sum of recv_counts before r.
  /// In place when recv == send + that prefix sum for rank().
  Work ireduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> recv_counts,
                         kernels::DType dtype, kernels::ReduceOp op);
  /// Blocking ireduce_scatter_v().
  void reduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> recv_counts,
                        kernels::DType dtype, kernels::ReduceOp op);

  /// send: counts[rank()] elements; recv: counts[r] elements of rank r at offset prefix-sum(counts,
  /// r) (MPI_Allgatherv with packed displacements). counts has size() entries, the same on every
  /// rank (Mismatch otherwise). In place when send == recv + prefix-sum(counts, rank()). Ring.
  Work iallgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                    kernels::DType dtype);
  /// Blocking iallgather_v().
  void allgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                   kernels::DType dtype);

  /// recv (count elements, significant on root only; may be null elsewhere) = op over ranks of send
  /// (count elements). In place on the root when send == recv. Binomial tree: ceil(log2 P) steps;
  /// the order of the reduction depends only on (size(), root), so repeated calls agree bitwise.
  Work ireduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
               kernels::ReduceOp op, int root);
  /// Blocking ireduce().
  void reduce(const void* send, void* recv, std::size_t count, kernels::DType dtype,
              kernels::ReduceOp op, int root);

  /// Every rank's send: count elements; root's recv: size() * count elements, rank-major (ignored,
  /// may be null, elsewhere). In place on the root when send == recv + root * count. Binomial tree.
  Work igather(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root);
  /// Blocking igather().
  void gather(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root);

  /// Root's send: size() * count elements, rank-major (ignored, may be null, elsewhere); every
  /// rank's recv (count elements) gets its block. In place on the root when recv == send + root *
  /// count. Binomial tree.
  Work iscatter(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root);
  /// Blocking iscatter().
  void scatter(const void* send, void* recv, std::size_t count, kernels::DType dtype, int root);

  /// send and recv: size() * count elements; block j of send goes to rank j, block i of recv came
  /// from rank i. In place when send == recv (costs a copy of the buffer). Pairwise exchange: P-1
  /// steps.
  Work ialltoall(const void* send, void* recv, std::size_t count, kernels::DType dtype);
  /// Blocking ialltoall().
  void alltoall(const void* send, void* recv, std::size_t count, kernels::DType dtype);
  /// As alltoall with per-pair sizes (MPI_Alltoallv with packed displacements): send_counts[j]
  /// elements go to rank j, recv_counts[i] come from rank i, each packed in rank order. Rank i's
  /// send_counts[j] must equal rank j's recv_counts[i]: both fail with Mismatch otherwise. In place
  /// when send == recv and send_counts == recv_counts.
  Work ialltoall_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                   std::span<const std::size_t> recv_counts, kernels::DType dtype);
  /// Blocking ialltoall_v().
  void alltoall_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                  std::span<const std::size_t> recv_counts, kernels::DType dtype);

  /// True when this communicator's short allreduces go through shared memory: all its ranks run
  /// on this host (same network namespace) and its links are not sealed
  /// (comm/algorithms/local_mailbox.h, comm/algorithms/mailbox_allreduce.h).
  [[nodiscard]] bool shares_memory() const noexcept;

  /// The one path every operation above takes (comm/collective_args.h): checks the record once,
  /// routes it to NCCL when its buffers are device memory, else chooses the algorithm
  /// (comm/algorithm_registry.h), builds and fingerprints it and submits it to the progress
  /// engine. For callers that hold operations as data (the C API, language bindings); the entry
  /// points above are the same call with their record filled in. run() is every blocking call's
  /// path (the C API's too): the mailbox on the caller's thread when it applies, else post() and
  /// wait, driving the engine from the caller's thread.
  Work post(const CollectiveArgs& args);
  /// post() and wait: the blocking form of every operation; throws its error.
  void run(const CollectiveArgs& args);

  /// --- Elastic membership (comm/reform.h documents the protocol, its guarantees and limits) ---
  /// The world communicator of the next generation: this one's ranks that are alive and arrive,
  /// without the lost and the excluded ones, plus the processes waiting in join() (ranks ordered by
  /// their rank here, joiners last). Collective over the survivors (world communicators only);
  /// this communicator stays as it was (destroy it afterwards). Errors: InvalidArgument (a
  /// sub-communicator, a rank out of range), Aborted (the others excluded this rank), Timeout
  /// (no agreement within the deadline: names who decides), PeerLost (the store is gone).
  std::unique_ptr<Communicator> reform(const ReformOptions& options = {});
  /// A process that is not a member joins a running job's world at its next reform(): `store` is
  /// the root store of the job (the one create() was given, e.g. the launch store's server).
  /// Waits up to options.timeout for a reform that admits it. Errors: Timeout, PeerLost.
  static std::unique_ptr<Communicator> join(std::shared_ptr<Store> store,
                                            const CommOptions& options = {});
  /// 0 for a communicator made by create(), g + 1 for one reformed from generation g.
  [[nodiscard]] std::uint64_t generation() const noexcept;
  /// For each rank of this (world) communicator, its rank in the previous generation, -1 for a
  /// joiner; the identity for generation 0.
  [[nodiscard]] const std::vector<int>& former_ranks() const noexcept;
  /// The ranks of this communicator known to be gone now (process exited, connection broken,
  /// heartbeat lapsed), with how; ascending. Cheap (no message); any thread.
  [[nodiscard]] std::vector<std::pair<int, std::string>> lost_peers() const;
  /// How many processes wait in join() for this world's next generation (one store request).
  [[nodiscard]] int joiners_waiting() const;

  /// Fails every pending operation of this communicator with Aborted, at once, from any thread;
  /// later operations fail too. The communicator can then be destroyed.
  void abort(const std::string& why = "abort() was called");

  /// Payload bytes sent so far, by operation kind (a snapshot; any thread).
  [[nodiscard]] CommStats stats() const noexcept;

  /// This communicator's flight recorder (comm/flight_recorder.h, private to comm/: its last
  /// STRAIT_FR_ENTRIES operations, dumped on failures and SIGUSR1); null when STRAIT_FR_ENTRIES=0.
  [[nodiscard]] std::shared_ptr<FlightRecorder> flight_recorder() const noexcept {
    return recorder_;
  }

 private:
  /// Bytes sent, by CommStats' counter (StatSlot, comm/algorithms/collective_kind.h).
  using Counters = std::array<std::atomic<std::uint64_t>, kStatSlots>;
  /// The first of n consecutive sequence numbers (an operation made of several takes more than
  /// one). run()'s fast path for an allreduce whose ranks are all on this host: the mailbox
  /// protocol on the caller's thread (comm/algorithms/mailbox_allreduce.h; a slot at a time), with
  /// no operation, work or engine hand-off. False (nothing done) when it does not apply: the
  /// selection is another algorithm, earlier mailbox calls are still in flight, the buffers are GPU
  /// memory, or the communicator has failed (post() then says why).
  bool run_in_mailbox(const CollectiveArgs& args);
  /// An operation on host buffers, checked, its algorithm (and codec) chosen, described, then
  /// numbered: the one preparation of post() and run_in_mailbox() (defined in communicator.cpp).
  struct Prepared;
  [[nodiscard]] Prepared prepare(const CollectiveArgs& args) const;
  std::uint64_t next_seq(std::uint64_t n = 1);
  Work submit(std::unique_ptr<class Op> op, Describer describe, bool ordered,
              DeadlineStart start = DeadlineStart::AtSubmit, std::uint64_t record_id = 0);
  /// Enters an operation in the flight recorder (0 when there is none); seq -1: point to point.
  std::uint64_t record(const CollectiveArgs& args, std::int64_t seq, const char* algorithm,
                       bool device, bool started = false);
  /// Where an operation of `kind` counts the bytes it sends (null: it sends none).
  std::atomic<std::uint64_t>* counter_for(CollectiveArgs::Kind kind) noexcept;
  /// allreduce_compressed: the codec, checked and in canonical form, and the input checked for NaN
  /// and Inf; nullopt when "auto" comes to "none" (the plain allreduce runs).
  [[nodiscard]] std::optional<CodecChoice> resolve_codec(const CollectiveArgs& args) const;
  /// create(), reform() and join(): a world communicator of `generation` over `store` (a view of
  /// `root`, the store reform() agrees through), whose ranks were `former_ranks` before.
  static std::unique_ptr<Communicator> create_world(std::shared_ptr<Store> store, int rank,
                                                    int size, const CommOptions& options,
                                                    std::shared_ptr<Store> root,
                                                    std::uint64_t generation,
                                                    std::vector<int> former_ranks);
  /// create_world(): CommOptions::heartbeat's monitor (comm/heartbeat.h), once connected.
  void start_heartbeat(std::chrono::milliseconds interval);
  /// create(): agree on the sites (`mine`: this rank's reading, or nullopt to measure them;
  /// `error`: why it could not read them) and build the hierarchy. Collective over the world.
  void setup_sites(std::optional<Sites> mine, const std::string& error, int streams);

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<const Group> group_;
  std::atomic<std::chrono::milliseconds::rep> timeout_ms_;
  std::mutex mutex_;  ///< guards seq_, splits_ and mailbox_memo_
  std::uint64_t seq_ = 0;
  /// run_in_mailbox()'s last preparation, reused by a call of the same count, dtype and op.
  std::shared_ptr<Prepared> mailbox_memo_;
  std::uint64_t splits_ = 0;
  Counters counters_{};
  std::unique_ptr<DeviceComm> device_;
  /// Codecs and error-feedback residuals of this communicator's compressed collectives; used only
  /// by its operations, which run one at a time under the progress engine's lock.
  std::shared_ptr<CompressionState> compression_;
  /// The sites and the groups of the hierarchical allreduce (world communicators only).
  Sites sites_;
  std::shared_ptr<const Hierarchy> hierarchy_;
  /// The last operations, for diagnosis (null: STRAIT_FR_ENTRIES=0).
  std::shared_ptr<FlightRecorder> recorder_;
};

}  // namespace strait::comm
