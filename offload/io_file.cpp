#include "offload/io_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <fstream>

#include "core/error.h"
#include "offload/errno_text.h"

namespace strait::offload {
namespace {

constexpr std::size_t kFallbackDirectAlignment = 4096;

std::optional<std::size_t> read_block_size(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::size_t value = 0;
  if (!(in >> value) || value == 0 || !std::has_single_bit(value)) return std::nullopt;
  return value;
}

IoAlignment query_direct_alignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0U && stx.stx_dio_offset_align != 0U &&
      stx.stx_dio_mem_align != 0U) {
    return {stx.stx_dio_offset_align, stx.stx_dio_mem_align, AlignmentSource::Statx};
  }
#endif
  // Before statx reported it, the rule was the device's logical block size for both offsets and
  // addresses.
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (const auto lbs = logical_block_size(st.st_dev)) {
      return {*lbs, *lbs, AlignmentSource::LogicalBlockSize};
    }
  }
  return {kFallbackDirectAlignment, kFallbackDirectAlignment, AlignmentSource::Default};
}

}  // namespace

std::string_view to_string(AlignmentSource source) noexcept {
  switch (source) {
    case AlignmentSource::None: return "none (buffered)";
    case AlignmentSource::Statx: return "statx(STATX_DIOALIGN)";
    case AlignmentSource::LogicalBlockSize: return "the device's logical block size";
    case AlignmentSource::Default: return "the 4096-byte default";
  }
  return "?";
}

std::optional<std::size_t> logical_block_size(dev_t device) {
  if (major(device) == 0) return std::nullopt;  // anonymous: tmpfs, NFS, FUSE, overlay
  std::error_code ec;
  // /sys/dev/block/M:m links to the device's directory; a partition's directory sits inside its
  // disk's, which holds the queue limits.
  const std::filesystem::path dir = std::filesystem::canonical(
      fmt::format("/sys/dev/block/{}:{}", major(device), minor(device)), ec);
  if (ec) return std::nullopt;
  if (auto size = read_block_size(dir / "queue" / "logical_block_size")) return size;
  return read_block_size(dir.parent_path() / "queue" / "logical_block_size");
}

IoFile::IoFile(const std::filesystem::path& path, OpenMode mode, bool direct)
    : path_(path), direct_(direct) {
  int flags = O_RDWR | O_CLOEXEC;
  if (direct) flags |= O_DIRECT;
  if (mode == OpenMode::CreateExclusive) flags |= O_CREAT | O_EXCL;
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    const std::string dir = path.parent_path().string();
    if (direct && err == EINVAL) {
      // Linux creates the inode before it checks O_DIRECT support (ramfs): O_EXCL means the
      // file is ours, so take it away again.
      if (mode == OpenMode::CreateExclusive) ::unlink(path.c_str());
      throw Error(ErrorCode::Unavailable,
                  fmt::format("the file system of {} refuses O_DIRECT ({}): use a directory on a "
                              "disk file system (ext4, xfs, btrfs) or STRAIT_IO_ENGINE=posix",
                              dir, errno_text(err)));
    }
    if (mode == OpenMode::CreateExclusive &&
        (err == EACCES || err == EPERM || err == EROFS || err == ENOENT || err == ENOTDIR)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("offload directory {} is not writable: cannot create {} ({}); "
                              "make it writable or pass --offload-dir DIR",
                              dir, path.string(), errno_text(err)));
    }
    throw Error(ErrorCode::Io, fmt::format("cannot open {}{}: {}", path.string(),
                                           direct ? " with O_DIRECT" : "", errno_text(err)));
  }
  fd_.reset(fd);
  static std::atomic<std::uint64_t> next_id{1};
  id_ = next_id++;
  if (direct) alignment_ = query_direct_alignment(fd);
}

std::uint64_t IoFile::size() const {
  struct stat st {};
  if (::fstat(fd(), &st) != 0) {
    const int err = errno;
    throw Error(ErrorCode::Io, fmt::format("cannot stat {}: {}", path_.string(), errno_text(err)));
  }
  return static_cast<std::uint64_t>(st.st_size);
}

void preallocate(const IoFile& file, std::uint64_t bytes) {
  preallocate(file, 0, bytes);
}

void preallocate(const IoFile& file, std::uint64_t offset, std::uint64_t bytes) {
  if (bytes == 0) return;
  const auto off = static_cast<off_t>(offset);
  const auto len = static_cast<off_t>(bytes);
  // Free space before the attempt: a failed fallocate may hold what it got until the file goes.
  struct statvfs vfs {};
  std::string free_text = "an unknown number of";
  if (::statvfs(file.path().parent_path().c_str(), &vfs) == 0) {
    free_text = fmt::format("{}", static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize);
  }
  int err = 0;
  do {
    err = ::fallocate(file.fd(), 0, off, len) == 0 ? 0 : errno;
  } while (err == EINTR);
  if (err == EOPNOTSUPP) {
    // No native fallocate (ramfs, some network and FUSE file systems): glibc writes zeros
    // instead, which needs a buffered descriptor because O_DIRECT rejects its small writes. The
    // file is reopened through /proc/self/fd, which also works once its name is unlinked.
    if (file.direct()) {
      const IoFile buffered(fmt::format("/proc/self/fd/{}", file.fd()), OpenMode::Existing,
                            /*direct=*/false);
      err = ::posix_fallocate(buffered.fd(), off, len);
    } else {
      err = ::posix_fallocate(file.fd(), off, len);
    }
  }
  if (err == 0) return;
  const std::string range =
      offset == 0 ? std::string() : fmt::format(" (bytes [{}, {}))", offset, offset + bytes);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot preallocate {}{}: it needs {} bytes ({:.1f} MiB) but its file "
                            "system has {} bytes free ({}); free space or pass --offload-dir on a "
                            "larger disk",
                            file.path().string(), range, bytes,
                            static_cast<double>(bytes) / (1 << 20), free_text, errno_text(err)));
  }
  throw Error(ErrorCode::Io, fmt::format("cannot preallocate {} bytes for {}{}: {}", bytes,
                                         file.path().string(), range, errno_text(err)));
}

bool release_blocks(const IoFile& file, std::uint64_t offset, std::uint64_t bytes) noexcept {
  if (bytes == 0) return true;
  int err = 0;
  do {
    err = ::fallocate(file.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(offset), static_cast<off_t>(bytes)) == 0
              ? 0
              : errno;
  } while (err == EINTR);
  return err == 0;
}

}  // namespace strait::offload
