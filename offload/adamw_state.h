/// \file
/// AdamWState: where a rank's AdamW optimizer state lives, behind one interface (ZeRO-Offload, Ren
/// et al., USENIX ATC 2021: optimizer state and its update on the CPU; ZeRO-Infinity, Rajbhandari
/// et al., SC 2021: the same state on NVMe, streamed through pinned buffers).
///
/// What is offloaded: the AdamW moments m and v (fp32, 8 bytes per parameter). The parameters are
/// the caller's: the reference transformer trains in fp32, so its parameters already are the fp32
/// master weights and must stay in memory for the forward and backward passes; streaming a second
/// copy to and from NVMe would double the optimizer's I/O (12 instead of 8 bytes per parameter
/// each way) and save no memory, so neither implementation keeps one. A model with bf16/fp16
/// working weights would hand its fp32 master copy here as `params` (adamw_step's params_bf16
/// output then refreshes the working copy); that is not wired up.
///
/// Implementations (make_adamw_state in offload/optimizer_offload.h picks one):
///   HostAdamWState (offload/host_adamw_state.h): m and v in page-aligned locked host memory;
///   AdamWStateFile (offload/adamw_state_file.h): m and v in a preallocated file (NVMe), streamed
///   in chunks with double buffering so reads and writes overlap the update.
/// Both update with kernels::ParallelAdamW (tiles over a thread pool), whose result is
/// bit-identical to kernels::adamw_step over the same elements whatever the thread count, chunk
/// size or tile split: the two implementations give the same bits as each other and as a plain
/// adamw_step loop.
///
/// Weight decay is per parameter range: DecayGroups cover [0, count) without gaps or overlaps (a
/// transformer exempts biases and LayerNorm weights); each group's weight_decay replaces
/// hyper.weight_decay inside it.
/// Thread-safety: one thread at a time per object (the update itself runs on the object's own
/// threads). Objects for different ranks are independent.
/// Errors (both implementations): InvalidArgument for bad lengths, groups, step numbers or
/// hyperparameters, checked before anything is modified. The file implementation adds Io and
/// Aborted (see adamw_state_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/export.h"
#include "kernels/adamw.h"

namespace strait::offload {

/// A range of parameters [offset, offset + count) with its own weight decay.
struct DecayGroup {
  std::size_t offset = 0;  ///< first parameter of the group
  std::size_t count = 0;   ///< parameters in the group
  /// Replaces AdamWHyper::weight_decay inside the range (0: no decay, e.g. biases, LayerNorm).
  double weight_decay = 0.0;
};

/// Where the time of the last step() went (seconds, steady clock), for logs and metrics. For the
/// file implementation compute + io_wait is about total: a small io_wait against compute means the
/// reads and writes were hidden behind the update (the overlap works); a large one means the disk
/// is the bottleneck.
struct AdamWStepStats {
  double total_s = 0;    ///< the whole call
  double compute_s = 0;  ///< inside the AdamW update (all threads busy on it)
  double io_wait_s = 0;  ///< blocked on a read that was not yet done or a write holding a buffer
  /// Bytes read from the file during the step (0 in RAM).
  std::uint64_t bytes_read = 0;
  /// Bytes written to the file during the step (0 in RAM).
  std::uint64_t bytes_written = 0;
};

/// A rank's AdamW moments and their update, in RAM or in a file (see the file comment).
class STRAIT_API AdamWState {
 public:
  AdamWState() = default;
  AdamWState(const AdamWState&) = delete;
  AdamWState& operator=(const AdamWState&) = delete;
  virtual ~AdamWState() = default;

  /// One AdamW step (t >= 1, counting from 1) over all count() parameters, in place on params;
  /// params and grads have count() elements.
  virtual void step(std::span<float> params, std::span<const float> grads,
                    std::span<const DecayGroup> groups, const kernels::AdamWHyper& hyper,
                    std::int64_t t) = 0;
  /// The same with one group: hyper.weight_decay everywhere.
  void step(std::span<float> params, std::span<const float> grads, const kernels::AdamWHyper& hyper,
            std::int64_t t);

  /// Copies the stored moments out (tests, checkpoints); m and v have count() elements.
  virtual void read_moments(std::span<float> m, std::span<float> v) = 0;
  /// Replaces the stored moments (restoring a checkpoint).
  virtual void write_moments(std::span<const float> m, std::span<const float> v) = 0;

  /// Parameters covered (the length of params, grads, m and v).
  [[nodiscard]] virtual std::size_t count() const noexcept = 0;
  /// Threads the update runs on (the calling thread included).
  [[nodiscard]] virtual unsigned threads() const noexcept = 0;
  /// The last completed or failed step()'s timing; zeros before the first.
  [[nodiscard]] virtual AdamWStepStats last_step_stats() const noexcept = 0;
  /// Where the moments are, for logs: "8.0 MiB in locked host RAM", "8.0 MiB in a file in /var/tmp
  /// through io_uring with O_DIRECT".
  [[nodiscard]] virtual std::string describe() const = 0;

 protected:
  /// For the implementations' own moves.
  AdamWState(AdamWState&&) noexcept = default;
  /// For the implementations' own moves.
  AdamWState& operator=(AdamWState&&) noexcept = default;
};

namespace detail {

/// The groups sorted by offset after checking that they cover [0, count) exactly (InvalidArgument
/// naming the gap, overlap or bad decay otherwise).
std::vector<DecayGroup> checked_groups(std::span<const DecayGroup> groups, std::size_t count);
/// InvalidArgument unless got == count, naming `what`.
void check_length(const char* what, std::size_t got, std::size_t count);
/// The checks every step() makes before touching anything: lengths, t >= 1, hyperparameters,
/// groups; returns the sorted groups.
std::vector<DecayGroup> check_step(std::span<const float> params, std::span<const float> grads,
                                   std::span<const DecayGroup> groups,
                                   const kernels::AdamWHyper& hyper, std::int64_t t,
                                   std::size_t count);

/// Runs AdamW on parameters [lo, lo + m.size()) with `opt`: params and grads are the whole
/// vectors, m and v the moments of this range only. Each sorted group that meets the range runs
/// with its weight decay. `first_group` is a cursor into `sorted` for ranges visited in increasing
/// order (start at 0).
void adamw_range(kernels::ParallelAdamW& opt, std::span<const DecayGroup> sorted,
                 std::size_t& first_group, std::size_t lo, std::span<float> params,
                 std::span<const float> grads, std::span<float> m, std::span<float> v,
                 const kernels::AdamWHyper& hyper, std::int64_t t);

}  // namespace detail

}  // namespace strait::offload
