// Helpers for the offload tests: scratch directories, file systems mounted for one test (tmpfs
// with a size limit, ramfs without O_DIRECT, read-only), environment overrides, and running a
// check in a child process (for process-wide state such as seccomp filters or capabilities).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <system_error>

namespace strait::offload::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "strait-offload-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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

// Sets (or with nullopt unsets) an environment variable, restoring it afterwards.
class EnvGuard {
 public:
  EnvGuard(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Runs fn in a forked child and returns its exit code (fn's return value; 128 + signal when it
// died of one). The child exits with _exit, so no test state is torn down twice.
inline int run_in_child(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    int code = 99;
    try {
      code = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: uncaught exception: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace strait::offload::testing
