// A file system mounted for one test (tmpfs with a size limit, ramfs without O_DIRECT, read-only).
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/common/temp_dir.h"

namespace strait::test {

// Mounts a file system on a fresh directory for the test's lifetime (needs root). error() says
// why when the mount failed, for GTEST_SKIP.
class ScratchMount {
 public:
  ScratchMount(const char* fstype, unsigned long flags, const char* data) {
    dir_ = base_.path() / "mnt";
    std::filesystem::create_directory(dir_);
    if (::mount(fstype, dir_.c_str(), fstype, flags, data) != 0) {
      error_ = std::string("mount -t ") + fstype + " failed: " + std::strerror(errno) +
               " (needs root with CAP_SYS_ADMIN)";
    }
  }
  ScratchMount(const ScratchMount&) = delete;
  ScratchMount& operator=(const ScratchMount&) = delete;
  ~ScratchMount() {
    if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  [[nodiscard]] bool ok() const { return error_.empty(); }
  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] const std::filesystem::path& path() const { return dir_; }

 private:
  TempDir base_;
  std::filesystem::path dir_;
  std::string error_;
};

}  // namespace strait::test
