// PosixEngine: IoEngine over buffered pread/pwrite, run by a small pool of worker threads so that
// submit() returns at once and transfers overlap the caller's compute, as with io_uring.
// The fallback when io_uring or O_DIRECT is refused (see io_engine_factory.h); files go through
// the page cache, so requests have no alignment constraints.
// Requests longer than IoEngineOptions::block_size are cut into pieces that workers take in
// parallel; each piece is finished by one worker: short transfers continue with the remainder,
// EINTR and EAGAIN are retried, end of file on a read and every other failure are errors
// (io_engine.h). Thread-safety and errors: as io_engine.h. Destroying the engine drops requests
// that no worker has started and waits for those in progress.
#pragma once

#include <memory>

#include "offload/io_engine.h"

namespace strait::offload {

class PosixEngine final : public IoEngine {
 public:
  explicit PosixEngine(const IoEngineOptions& options = {});
  PosixEngine(const PosixEngine&) = delete;
  PosixEngine& operator=(const PosixEngine&) = delete;
  ~PosixEngine() override;

  [[nodiscard]] IoEngineKind kind() const noexcept override { return IoEngineKind::Posix; }
  IoFile open(const std::filesystem::path& path, OpenMode mode) override;
  // Nothing to register for pread/pwrite.
  void register_buffers(std::span<const std::span<std::byte>> /*buffers*/) override {}
  void register_files(std::span<const IoFile* const> /*files*/) override {}
  Ticket submit(std::span<const IoRequest> requests) override;
  void wait(Ticket ticket) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::offload
