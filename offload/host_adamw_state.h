/// \file
/// HostAdamWState: the AdamW moments m and v of one rank in host RAM (`strait train
/// --offload-optimizer cpu`): page-aligned, locked memory (offload/pinned_buffer.h), updated in
/// place by kernels::ParallelAdamW. This is ZeRO-Offload's placement (Ren et al., USENIX ATC 2021:
/// optimizer state and its update on the CPU) for a trainer whose model already runs on the CPU;
/// on a GPU trainer the same memory would also serve as the staging area of gradient and
/// parameter copies.
///
/// Layout: m for all count parameters, then v, each starting on a page (one mapping). Memory:
/// 8 bytes per parameter, zero-filled (moments start at zero before step 1), locked when
/// RLIMIT_MEMLOCK allows (else usable but unlocked, with one warning per process). The buffer type
/// is PinnedBuffer; a pool of size classes (DESIGN.md's PinnedPool) can replace it without changing
/// this interface.
/// Results: bit-identical to kernels::adamw_step over the same ranges, and to AdamWStateFile (see
/// offload/adamw_state.h). Thread-safety, errors: as AdamWState; Io when the memory cannot be
/// mapped (the constructor, naming the bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/export.h"
#include "kernels/adamw.h"
#include "offload/adamw_state.h"
#include "offload/pinned_buffer.h"

namespace strait::offload {

/// Options of HostAdamWState.
struct HostAdamWStateOptions {
  /// Threads of the update, the calling thread included; 0: std::thread::hardware_concurrency().
  unsigned threads = 0;
};

/// The AdamW moments in locked host RAM (see the file comment). Move-only.
class STRAIT_API HostAdamWState final : public AdamWState {
 public:
  /// Maps and zero-fills 8 bytes per parameter for `count` parameters. Errors: Io when the memory
  /// cannot be mapped.
  HostAdamWState(std::size_t count, const HostAdamWStateOptions& options);
  HostAdamWState(const HostAdamWState&) = delete;
  HostAdamWState& operator=(const HostAdamWState&) = delete;
  /// Takes `other`'s memory.
  HostAdamWState(HostAdamWState&&) noexcept = default;
  /// Frees this memory, then takes `other`'s.
  HostAdamWState& operator=(HostAdamWState&&) noexcept = default;
  ~HostAdamWState() override = default;

  using AdamWState::step;
  void step(std::span<float> params, std::span<const float> grads,
            std::span<const DecayGroup> groups, const kernels::AdamWHyper& hyper,
            std::int64_t t) override;
  /// Copies the stored moments out (tests, checkpoints); m and v have count() elements.
  void read_moments(std::span<float> m, std::span<float> v) override;
  /// Replaces the stored moments (restoring a checkpoint); m and v have count() elements.
  void write_moments(std::span<const float> m, std::span<const float> v) override;

  /// Parameters covered.
  [[nodiscard]] std::size_t count() const noexcept override { return count_; }
  /// Threads the update runs on, the calling thread included.
  [[nodiscard]] unsigned threads() const noexcept override;
  /// The last step's timing (no I/O); zeros before the first.
  [[nodiscard]] AdamWStepStats last_step_stats() const noexcept override { return stats_; }
  /// "8.0 MiB in locked host RAM" (or unlocked, when the kernel refused).
  [[nodiscard]] std::string describe() const override;
  /// Whether the moments' pages are locked in RAM.
  [[nodiscard]] bool locked() const noexcept { return memory_.locked(); }

 private:
  [[nodiscard]] std::span<float> m() const noexcept;
  [[nodiscard]] std::span<float> v() const noexcept;

  std::size_t count_ = 0;
  std::size_t v_offset_ = 0;  ///< bytes from the start of memory_ to v
  PinnedBuffer memory_;
  kernels::ParallelAdamW opt_;
  AdamWStepStats stats_;
};

}  // namespace strait::offload
