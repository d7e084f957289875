/// \file
/// IoFile: an open file as the I/O engines use it: descriptor, path (for error messages), whether
/// it was opened with O_DIRECT, and the alignment that O_DIRECT demands there.
///
/// Alignment comes from statx(STATX_DIOALIGN) (Linux >= 6.1); where the kernel or file system does
/// not report it, from the logical block size of the block device under the file system (sysfs),
/// and where there is none (network and memory file systems), 4096 bytes, which satisfies every
/// logical block size up to 4 KiB.
/// Thread-safety: immutable after opening; the descriptor may be shared by concurrent requests.
/// Errors: InvalidArgument when a file cannot be created because its directory is missing or not
/// writable; Unavailable when the file system refuses O_DIRECT (EINVAL, e.g. ramfs, old tmpfs);
/// Io for anything else, naming the path and the errno.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "core/export.h"
#include "core/fd.h"

namespace strait::offload {

/// Where an O_DIRECT alignment came from (for logs and benchmark reports).
enum class AlignmentSource : std::uint8_t { None, Statx, LogicalBlockSize, Default };

/// The source in words ("statx(STATX_DIOALIGN)", "the 4096-byte default", ...), for logs.
STRAIT_API std::string_view to_string(AlignmentSource source) noexcept;

/// The O_DIRECT alignment of a file: offset, length and address multiples.
struct IoAlignment {
  std::size_t offset = 1;  ///< bytes: file offsets and lengths must be multiples of this
  std::size_t memory = 1;  ///< bytes: buffer addresses must be multiples of this
  AlignmentSource source = AlignmentSource::None;  ///< None: not an O_DIRECT file
};

/// The logical block size in bytes of the block device `device` (a file system's st_dev; for a
/// partition, its disk's), from /sys/dev/block; nullopt where the file system has no block device
/// (tmpfs, NFS, FUSE) or sysfs does not say.
STRAIT_API std::optional<std::size_t> logical_block_size(dev_t device);

/// How IoFile opens a path.
enum class OpenMode : std::uint8_t {
  Existing,         ///< open a file that exists, read-write
  CreateExclusive,  ///< create it (mode 0600); fail if it exists, so two owners never share a file
};

/// An open file as the I/O engines use it (see the file comment). Move-only; owns its descriptor.
class STRAIT_API IoFile {
 public:
  IoFile() = default;
  /// Opens path read-write (O_CLOEXEC, plus O_DIRECT when direct).
  IoFile(const std::filesystem::path& path, OpenMode mode, bool direct);

  /// The descriptor (still owned by this file).
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  /// The path it was opened at, for error messages.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// True when opened with O_DIRECT.
  [[nodiscard]] bool direct() const noexcept { return direct_; }
  /// What O_DIRECT demands of this file's requests (1/1/None when not direct).
  [[nodiscard]] IoAlignment alignment() const noexcept { return alignment_; }
  [[nodiscard]] std::uint64_t size() const;  ///< bytes, from fstat
  /// Unique per opened file in this process (never reused, kept by moves): engines key
  /// registrations by it, since descriptors and addresses are reused after a close.
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

 private:
  Fd fd_;
  std::uint64_t id_ = 0;
  std::filesystem::path path_;
  bool direct_ = false;
  IoAlignment alignment_;
};

/// Reserves [0, bytes) of the file's blocks (fallocate; posix_fallocate where the file system has
/// no fallocate) so that running out of space fails now, with a clear message, rather than halfway
/// through a training step. New extents read as zeros.
/// Errors: Io naming the file, the bytes needed and the bytes free (ENOSPC) or the errno.
STRAIT_API void preallocate(const IoFile& file, std::uint64_t bytes);

/// The same for the byte range [offset, offset + bytes) (the file grows to cover it; blocks
/// already there are kept). The ENOSPC message names the range as well.
STRAIT_API void preallocate(const IoFile& file, std::uint64_t offset, std::uint64_t bytes);

/// Gives the blocks of [offset, offset + bytes) back to the file system (fallocate with
/// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the size stays, the range reads as zeros).
/// Returns false, changing nothing, where the file system cannot punch holes. Never throws.
STRAIT_API bool release_blocks(const IoFile& file, std::uint64_t offset,
                               std::uint64_t bytes) noexcept;

}  // namespace strait::offload
