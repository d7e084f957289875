// UringEngine: IoEngine over io_uring (liburing) with O_DIRECT files, so transfers bypass the page
// cache and go straight between pinned buffers and the device.
//
// Requests are cut into pieces (IoEngineOptions::block_size, at most kMaxTransferBytes since
// io_uring results are 32-bit); up to queue_depth pieces are in flight, more wait in a queue and
// are prepared as slots free up, submitted submit_batch at a time. Buffers given to
// register_buffers become io_uring fixed buffers and files given to register_files fixed files
// when the kernel allows (RLIMIT_MEMLOCK or CAP_IPC_LOCK for buffers); otherwise one warning and
// plain requests. Optional SQPOLL. Every completion's result is checked: see io_engine.h.
// Thread-safety and errors: as io_engine.h; the constructor throws Unavailable when the kernel
// refuses io_uring (ENOSYS: not built in; EPERM: seccomp, containers, or
// /proc/sys/kernel/io_uring_disabled), saying so.
#pragma once

#include <memory>

#include "offload/io_engine.h"

namespace strait::offload {

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoEngineOptions& options = {});
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;
  ~UringEngine() override;

  [[nodiscard]] IoEngineKind kind() const noexcept override { return IoEngineKind::Uring; }
  IoFile open(const std::filesystem::path& path, OpenMode mode) override;
  void register_buffers(std::span<const std::span<std::byte>> buffers) override;
  Ticket submit(std::span<const IoRequest> requests) override;
  void wait(Ticket ticket) override;

  void register_files(std::span<const IoFile* const> files) override;

  // Whether the last register_buffers() / register_files() call got fixed buffers / files.
  [[nodiscard]] bool buffers_registered() const noexcept;
  [[nodiscard]] bool files_registered() const noexcept;
  // Whether the ring runs with a submission-queue polling thread (asked for and granted).
  [[nodiscard]] bool sqpoll() const noexcept;

  // Counters since construction, for tests and benchmarks.
  struct Stats {
    std::uint64_t sqes = 0;  // SQEs prepared (pieces, remainders and retries)
    std::uint64_t fixed_buffer_sqes = 0;
    std::uint64_t fixed_file_sqes = 0;
    std::uint64_t short_transfers = 0;  // completions that moved less than asked: remainder sent
    std::uint64_t retries = 0;          // -EAGAIN / -EINTR completions resubmitted as they were
  };
  [[nodiscard]] Stats stats() const noexcept;

  // Fault injection, for tests only: provokes the rare paths a healthy disk never takes.
  struct Faults {
    std::size_t short_transfer = 0;  // > 0: each SQE asks for at most this many bytes (aligned)
    unsigned eagain = 0;             // the next N completions report -EAGAIN instead of theirs
  };
  void inject_faults_for_testing(const Faults& faults);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::offload
