// Helpers for the offload tests: environment overrides, running a check in a child process (for
// process-wide state such as seccomp filters or capabilities), and whether the io_uring engine
// works here. Scratch directories and mounts are in tests/common/ (temp_dir.h, scratch_mount.h).
#pragma once

#include <linux/capability.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <system_error>

#include "core/error.h"
#include "offload/io_engine_factory.h"

namespace strait::offload::testing {

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

// Makes mlock fail in this process (meant for a run_in_child child): drops CAP_IPC_LOCK from the
// effective set and lowers RLIMIT_MEMLOCK to 0. False when the kernel refuses either step.
inline bool forbid_mlock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2]{};
  if (::syscall(SYS_capget, &header, caps) != 0) return false;
  caps[0].effective &= ~(1U << CAP_IPC_LOCK);
  if (::syscall(SYS_capset, &header, caps) != 0) return false;
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  lim.rlim_cur = 0;
  return ::setrlimit(RLIMIT_MEMLOCK, &lim) == 0;
}

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

// Why the io_uring engine (io_uring with O_DIRECT) cannot run for files in `dir` here, for
// GTEST_SKIP; nullopt where it can. Errors other than Unavailable propagate.
inline std::optional<std::string> uring_unavailable(const std::filesystem::path& dir) {
  IoEngineOptions probe;
  probe.force = IoEngineKind::Uring;
  try {
    make_io_engine(dir, probe);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unavailable) throw;
    return std::string("io_uring with O_DIRECT does not work here: ") + e.what();
  }
  return std::nullopt;
}

}  // namespace strait::offload::testing
