/// \file
/// make_io_engine: picks the IoEngine for files in one directory.
///
/// Order: IoEngineOptions::force, else the environment variable STRAIT_IO_ENGINE=posix|uring,
/// else automatic: io_uring with O_DIRECT when both work in that directory (probed by creating a
/// hidden file there and writing and reading one block through the ring), otherwise PosixEngine
/// with one warning (per reason, per process) saying why: io_uring refused by the kernel (ENOSYS,
/// EPERM from seccomp or /proc/sys/kernel/io_uring_disabled) or O_DIRECT refused by the file
/// system (EINVAL on open, e.g. ramfs). Forcing uring where it cannot work is an error saying why.
/// Thread-safety: safe to call from several threads.
/// Errors: InvalidArgument for a missing directory, a path that is not a directory, a directory
/// that is not writable, or a bad STRAIT_IO_ENGINE value; Unavailable when uring is forced but
/// cannot work there.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "core/export.h"
#include "offload/io_engine.h"

namespace strait::offload {

struct IoEngineChoice {
  std::unique_ptr<IoEngine> engine;
  std::string reason;  ///< why this engine, for logs: e.g. the fallback cause
};

STRAIT_API IoEngineChoice make_io_engine(const std::filesystem::path& dir,
                                         const IoEngineOptions& options = {});

/// Throws InvalidArgument unless dir exists and is a directory, with the --offload-dir hint.
STRAIT_API void check_offload_dir(const std::filesystem::path& dir);

/// A new file for one object's offloaded data, created exclusively through the engine
/// make_io_engine picks for dir: <dir>/strait-<kind>-<tag>-pid<pid>-<n>.<ext>, n counting up within
/// the process, so concurrent ranks, runs and objects never collide. The caller removes it (e.g.
/// RemoveOnExit on path). Errors: InvalidArgument for a tag holding '/' (the message starts with
/// `what`) or a bad dir (check_offload_dir); those of make_io_engine and IoEngine::open.
struct OffloadFile {
  std::unique_ptr<IoEngine> engine;
  std::string reason;  ///< why this engine (IoEngineChoice::reason)
  IoFile file;
  std::filesystem::path path;
};
STRAIT_API OffloadFile create_offload_file(const std::filesystem::path& dir, std::string_view what,
                                           std::string_view kind, std::string_view tag,
                                           std::string_view ext, const IoEngineOptions& io);

}  // namespace strait::offload
