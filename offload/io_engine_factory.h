// make_io_engine: picks the IoEngine for files in one directory.
//
// Order: IoEngineOptions::force, else the environment variable STRAIT_IO_ENGINE=posix|uring,
// else automatic: io_uring with O_DIRECT when both work in that directory (probed by creating a
// hidden file there and writing and reading one block through the ring), otherwise PosixEngine
// with one warning (per reason, per process) saying why: io_uring refused by the kernel (ENOSYS,
// EPERM from seccomp or /proc/sys/kernel/io_uring_disabled) or O_DIRECT refused by the file
// system (EINVAL on open, e.g. ramfs). Forcing uring where it cannot work is an error saying why.
// Thread-safety: safe to call from several threads.
// Errors: InvalidArgument for a missing directory, a path that is not a directory, a directory
// that is not writable, or a bad STRAIT_IO_ENGINE value; Unavailable when uring is forced but
// cannot work there.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "offload/io_engine.h"

namespace strait::offload {

struct IoEngineChoice {
  std::unique_ptr<IoEngine> engine;
  std::string reason;  // why this engine, for logs: e.g. the fallback cause
};

IoEngineChoice make_io_engine(const std::filesystem::path& dir,
                              const IoEngineOptions& options = {});

// Throws InvalidArgument unless dir exists and is a directory, with the --offload-dir hint.
void check_offload_dir(const std::filesystem::path& dir);

}  // namespace strait::offload
