/// \file
/// AdamWStateFile: optimizer-state offload for one rank to NVMe (`strait train --offload-optimizer
/// nvme`): the AdamW moments m and v (fp32) of `count` parameters live in a file on disk, and
/// step() streams them through pinned host memory while kernels::ParallelAdamW updates the
/// parameters in place (the parameters, the fp32 master weights, stay with the caller: see
/// offload/adamw_state.h for what is offloaded and why).
///
/// The file is created under a caller-given directory with a name holding the caller's tag (e.g.
/// "rank3"), the pid and a per-process counter, so concurrent ranks and runs never collide; it is
/// preallocated (a full disk fails in the constructor, naming the bytes needed), zero-filled, and
/// removed when the object is destroyed. Layout: parameters are cut into chunks of chunk_params;
/// chunk k is one contiguous extent [m of the chunk | v of the chunk], each half padded to the I/O
/// alignment, so a chunk is one read and one write. step() keeps `buffers` chunks in flight: it
/// reads chunk i+1 (up to buffers - 2 chunks ahead) while chunk i is updated on all the update's
/// threads and chunk i-1 is written back (double buffering as in ZeRO-Infinity, Rajbhandari et
/// al., SC 2021); last_step_stats() tells how long the update waited for the disk. The arithmetic
/// is exactly kernels::adamw_step over the same elements, so results are bit-identical to running
/// that kernel in memory (and to HostAdamWState).
/// Weight decay is per parameter range (DecayGroup, offload/adamw_state.h); a chunk may straddle
/// groups.
/// Thread-safety: one thread at a time per object. Objects for different ranks are independent.
/// A moved-from object may only be destroyed or assigned to.
/// Errors: InvalidArgument for a missing, non-directory or unwritable directory (with the
/// --offload-dir hint), bad lengths, groups or hyperparameters (checked before any I/O); Io for
/// a full disk or a failed transfer, naming the file. A step that fails partway leaves some
/// chunks updated and others not: later calls throw Aborted until write_moments() restores a
/// consistent state (from a checkpoint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/export.h"
#include "kernels/adamw.h"
#include "offload/adamw_state.h"
#include "offload/io_engine.h"

namespace strait::offload {

/// Where and how AdamWStateFile streams the moments.
struct AdamWStateFileOptions {
  std::filesystem::path dir;  ///< offload directory: must exist and be writable
  std::string tag = "rank0";  ///< part of the file name; no '/'
  /// Parameters per chunk, rounded up to the I/O alignment (1024 for 4 KiB pages). The default
  /// moves 4 MiB of moments per transfer, large enough for NVMe to reach full bandwidth.
  std::size_t chunk_params = std::size_t{512} * 1024;
  unsigned buffers = 3;  ///< pinned chunk buffers, >= 2; 3 overlaps a read, an update and a write
  /// Threads of the update, the calling thread included; 0: std::thread::hardware_concurrency().
  unsigned threads = 0;
  IoEngineOptions io;  ///< engine choice and tuning (see io_engine_factory.h)
  /// false (default): the file is unlinked as soon as it is preallocated, so it vanishes with the
  /// process however that ends (SIGKILL included) and a killed job leaves no state on the disk;
  /// path() then names where it was. true: the name stays until the object is destroyed (tests,
  /// inspection).
  bool keep_name = false;
};

/// The AdamW moments in a preallocated file, streamed in chunks (see the file comment). Move-only.
class STRAIT_API AdamWStateFile final : public AdamWState {
 public:
  /// Preallocates the file (8 bytes per parameter) under options.dir. Errors: InvalidArgument for a
  /// bad dir, tag or option; Io when the file cannot be created or allocated (a full disk fails
  /// here).
  AdamWStateFile(std::size_t count, const AdamWStateFileOptions& options);
  AdamWStateFile(const AdamWStateFile&) = delete;
  AdamWStateFile& operator=(const AdamWStateFile&) = delete;
  /// Takes `other`'s file and threads; `other` may then only be destroyed or assigned to.
  AdamWStateFile(AdamWStateFile&&) noexcept;
  /// Releases this file, then takes `other`'s.
  AdamWStateFile& operator=(AdamWStateFile&&) noexcept;
  ~AdamWStateFile() override;

  /// AdamWState's step (t >= 1) over all `count` parameters.
  using AdamWState::step;
  void step(std::span<float> params, std::span<const float> grads,
            std::span<const DecayGroup> groups, const kernels::AdamWHyper& hyper,
            std::int64_t t) override;

  /// Copies the stored moments out (tests, checkpoints); m and v have count elements.
  void read_moments(std::span<float> m, std::span<float> v) override;
  /// Replaces the stored moments (restoring a checkpoint); clears a failed step's Aborted state.
  void write_moments(std::span<const float> m, std::span<const float> v) override;

  /// Parameters covered.
  [[nodiscard]] std::size_t count() const noexcept override;
  /// Threads the update runs on, the calling thread included.
  [[nodiscard]] unsigned threads() const noexcept override;
  /// The last step's timing and bytes moved; zeros before the first.
  [[nodiscard]] AdamWStepStats last_step_stats() const noexcept override;
  /// "8.0 MiB in a file in /var/tmp through io_uring with O_DIRECT".
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] std::size_t chunk_params() const noexcept;  ///< after rounding
  [[nodiscard]] std::uint64_t file_bytes() const noexcept;  ///< preallocated size
  /// Where the file is (or was, once unlinked: see keep_name).
  [[nodiscard]] const std::filesystem::path& path() const noexcept;
  /// The I/O engine streaming it.
  [[nodiscard]] IoEngineKind engine_kind() const noexcept;
  [[nodiscard]] std::string_view engine_reason() const noexcept;  ///< why that engine

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::offload
