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

/// The engine make_io_engine picked and why.
struct IoEngineChoice {
  /// Owned by the caller; used by one thread at a time.
  std::unique_ptr<IoEngine> engine;
  std::string reason;  ///< why this engine, for logs: e.g. the fallback cause
};

/// The engine for files in `dir` (see the file comment for the order of choice and the errors).
STRAIT_API IoEngineChoice make_io_engine(const std::filesystem::path& dir,
                                         const IoEngineOptions& options = {});

/// Throws InvalidArgument unless dir exists and is a directory, with the --offload-dir hint.
STRAIT_API void check_offload_dir(const std::filesystem::path& dir);

/// A new file for one object's offloaded data, created exclusively through the engine
/// make_io_engine picks for dir: DIR/strait-KIND-TAG-pidPID-N.EXT, N counting up
/// within the process, so concurrent ranks, runs and objects never collide. The caller removes it
/// (e.g. RemoveOnExit on path). Errors: InvalidArgument for a tag holding '/' (the message starts
/// with `what`) or a bad dir (check_offload_dir); those of make_io_engine and IoEngine::open.
struct OffloadFile {
  /// The engine the file was opened for (make_io_engine's choice for `dir`).
  std::unique_ptr<IoEngine> engine;
  std::string reason;  ///< why this engine (IoEngineChoice::reason)
  /// The new file, opened by `engine` (O_DIRECT where it uses io_uring).
  IoFile file;
  /// Where the file is, for removing it.
  std::filesystem::path path;
};
/// Creates an OffloadFile under `dir`; `what` starts error messages, `kind`, `tag` and `ext` name
/// the file (see OffloadFile). Errors as OffloadFile says.
STRAIT_API OffloadFile create_offload_file(const std::filesystem::path& dir, std::string_view what,
                                           std::string_view kind, std::string_view tag,
                                           std::string_view ext, const IoEngineOptions& io);

}  // namespace strait::offload
