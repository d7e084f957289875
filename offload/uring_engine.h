// UringEngine: IoEngine over io_uring (liburing) with O_DIRECT files, so transfers bypass the page
// cache and go straight between pinned buffers and the device.
//
// Up to queue_depth requests are in flight; more wait in a queue and are submitted as slots free
// up. Buffers given to register_buffers become io_uring fixed buffers when the kernel allows
// (RLIMIT_MEMLOCK or CAP_IPC_LOCK); otherwise one warning and plain reads and writes. Transfers
// above 1 GiB are issued as several (io_uring results are 32-bit). Every completion's result is
// checked: see io_engine.h.
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

  // Whether the last register_buffers() call got fixed buffers from the kernel.
  [[nodiscard]] bool buffers_registered() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::offload
